//! Turns serde-saphyr's errors (YAML syntax, shapes) into diagnostics worded for recipe authors.

use super::diagnostic::{Diagnostic, Loc};
use super::suggest::suggestion;

/// Turns a YAML or shape error into a diagnostic without the parser's own rendering: the place
/// goes to the location, ", expected ..." to the expectation, and wording meant for the
/// parser's developers is replaced by wording for recipe authors.
pub(super) fn yaml_diagnostic(error: &serde_saphyr::Error, text: &str) -> Diagnostic {
    let error = error.without_snippet();
    let loc = error.location().map(Loc::from).unwrap_or_default();
    let rendered = error.to_string();
    let first_line = rendered.lines().next().unwrap_or_default();
    // The parser prefixes "error: line L column C: " or appends " at line L, column C"; our
    // renderer prints the place itself.
    let mut message = first_line
        .strip_prefix("error: ")
        .unwrap_or(first_line)
        .split_once(": ")
        .filter(|(head, _)| head.starts_with("line "))
        .map_or(first_line, |(_, rest)| rest);
    if let Some(at) = message.rfind(" at line ")
        && message[at..].contains(", column ")
    {
        message = &message[..at];
    }
    let message = message.trim();
    let (message, expected) = match message.split_once(", expected ").or_else(|| message.split_once("; expected ")) {
        Some((message, expected)) => (message, Some(expected.to_string())),
        None => (message, None),
    };
    let (message, expected) = if let Some(key) = message.strip_prefix("duplicate mapping key: ") {
        let key = key.split_once(", set ").map_or(key, |(key, _)| key);
        (format!("duplicate key `{key}`"), Some("each key at most once in a mapping".to_string()))
    } else if let Some(field) = message.strip_prefix("missing field ") {
        (format!("missing key {field}"), Some(format!("{}: ...` in this mapping", field.trim_end_matches('`'))))
    } else if let Some(field) = message.strip_prefix("unknown field ") {
        // serde lists the fields as "one of a, b, c", "`a` or `b`" or "`a`".
        let fields: Vec<String> = expected
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches("one of ")
            .split(", ")
            .flat_map(|f| f.split(" or "))
            .map(|f| f.trim().trim_matches('`').to_string())
            .filter(|f| !f.is_empty())
            .collect();
        let name = field.trim_matches('`');
        (format!("unknown key {field}"), Some(suggestion(name, fields.iter().map(String::as_str))))
    } else if message.starts_with("cannot deserialize null into string") {
        ("empty value".to_string(), Some("a string".to_string()))
    } else if message.starts_with("multiple YAML documents") {
        (
            "more than one YAML document in the file".to_string(),
            Some("one recipe per file (no `---` separator)".to_string()),
        )
    } else if let (Some(what), None) = (message.strip_prefix("expected "), &expected) {
        let wanted = match what {
            "mapping start" => "a mapping (`key: value` entries)",
            "sequence start" => "a list (`[a, b]` or `- a` lines)",
            "string scalar" => "a string",
            other => other,
        };
        ("wrong type of value".to_string(), Some(wanted.to_string()))
    } else if message == "unclosed quote" {
        (message.to_string(), Some("a closing quote for the string that starts here".to_string()))
    } else if message.starts_with("tabs disallowed") {
        (message.to_string(), Some("spaces for indentation (YAML does not allow tabs)".to_string()))
    } else if message.starts_with("mapping values are not allowed") && expected.is_none() {
        let hint = "a `key: value` entry only where a mapping may start: check this line's indentation \
                    against the lines above, and quote values that contain `: `";
        (message.to_string(), Some(hint.to_string()))
    } else {
        (message.to_string(), expected)
    };
    // A syntax error inside a `[...]` or `{...}` that was never closed is usually that.
    let syntax = matches!(error, serde_saphyr::Error::ExternalMessage { .. });
    let expected = match (syntax, unclosed_flow(text, loc)) {
        (true, Some((open, at))) if !message.starts_with("unclosed") => {
            let close = if open == '[' { ']' } else { '}' };
            let closing = format!("a closing `{close}` for the `{open}` at line {}, column {}", at.line, at.column);
            Some(expected.map_or(closing.clone(), |e| format!("{e}, or {closing}")))
        }
        _ => expected,
    };
    let diagnostic =
        if message.is_empty() { Diagnostic::new(loc, "invalid YAML") } else { Diagnostic::new(loc, message) };
    match expected {
        Some(expected) => diagnostic.expected(expected),
        None => diagnostic,
    }
}

/// The innermost flow collection (`[` or `{`) still open at `until`, if any. A heuristic: it
/// skips quoted strings and comments, and counts a bracket only where a value may start.
fn unclosed_flow(text: &str, until: Loc) -> Option<(char, Loc)> {
    let mut open: Vec<(char, Loc)> = Vec::new();
    for (l, line) in text.lines().enumerate() {
        let line_no = l as u32 + 1;
        if line_no > until.line {
            break;
        }
        let mut quote: Option<char> = None;
        let mut previous: Option<char> = None;
        let mut chars = line.chars().enumerate().peekable();
        while let Some((c, ch)) = chars.next() {
            let column = c as u32 + 1;
            if line_no == until.line && column >= until.column {
                break;
            }
            match (quote, ch) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(q), ch) if ch == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(ch),
                (None, '#') if previous.is_none_or(char::is_whitespace) => break,
                (None, '[' | '{') if !open.is_empty() || matches!(previous, None | Some(':' | '-' | ',')) => {
                    open.push((ch, Loc { line: line_no, column }));
                }
                (None, ']' | '}') if !open.is_empty() => {
                    open.pop();
                }
                _ => {}
            }
            if !ch.is_whitespace() {
                previous = Some(ch);
            }
        }
    }
    open.pop()
}
