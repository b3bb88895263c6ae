//! Turns serde-saphyr's errors (YAML syntax, limits) into diagnostics worded for recipe authors:
//! no parser internals, no `Debug` text, every limit said with its figure.

use serde_saphyr::Error;
use serde_saphyr::budget::BudgetBreach;

use super::diagnostic::{Diagnostic, Loc};
use super::limits::{MAX_ALIAS_EXPANSION, MAX_YAML_DEPTH, MAX_YAML_NODES, MAX_YAML_TEXT_BYTES};

/// Turns a YAML error into a diagnostic without the parser's own rendering: the place goes to
/// the location, ", expected ..." to the expectation, limits are said in recipe terms, and
/// wording meant for the parser's developers is replaced by wording for recipe authors.
pub(super) fn yaml_diagnostic(error: &Error, text: &str) -> Diagnostic {
    let error = innermost(error.without_snippet());
    let loc = error.location().map(Loc::from).unwrap_or_default();
    if let Some(diagnostic) = limit_diagnostic(error, loc) {
        return diagnostic;
    }
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
    let (message, expected) = if let Some(what) = message.strip_prefix("unexpected character: `") {
        let what = what.trim_end_matches('\'');
        (
            format!("unexpected character `{what}`"),
            Some(
                "YAML text: a control character must be written as an escape inside double quotes, e.g. \"\\t\""
                    .to_string(),
            ),
        )
    } else if message.starts_with("multiple YAML documents") {
        (
            "more than one YAML document in the file".to_string(),
            Some("one recipe per file (no `---` separator)".to_string()),
        )
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
    let syntax = matches!(error, Error::ExternalMessage { .. });
    let expected = match (syntax, unclosed_flow(text, loc)) {
        (true, Some((open, at)))
            if !message.starts_with("unclosed") && !message.starts_with("unexpected character") =>
        {
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

/// The error an alias error wraps (its place is the alias's).
fn innermost(error: &Error) -> &Error {
    match error {
        Error::AliasError { error, .. } => innermost(error.without_snippet()),
        other => other,
    }
}

/// A limit of the YAML reader, said with its figure; `None` for other errors.
fn limit_diagnostic(error: &Error, loc: Loc) -> Option<Diagnostic> {
    let aliases =
        "fewer anchors and aliases (`&name`, `*name`), or long lists in a list file (`dim: {file: values.txt}`)";
    let (message, expected) = match error {
        Error::Budget { breach, .. } => match breach {
            BudgetBreach::Nodes { .. } | BudgetBreach::Events { .. } => (
                format!("the recipe has more than {MAX_YAML_NODES} nodes (anchors and aliases expand)"),
                format!("at most {MAX_YAML_NODES} values, lists and mappings; {aliases}"),
            ),
            BudgetBreach::Depth { .. } => (
                format!("the recipe is nested deeper than {MAX_YAML_DEPTH} levels"),
                format!("lists and mappings nested at most {MAX_YAML_DEPTH} deep"),
            ),
            BudgetBreach::ScalarBytes { .. } => (
                format!(
                    "the recipe's text values add up to more than {} MiB (anchors and aliases expand)",
                    MAX_YAML_TEXT_BYTES >> 20
                ),
                format!("at most {} MiB of text; {aliases}", MAX_YAML_TEXT_BYTES >> 20),
            ),
            BudgetBreach::RecordedAnchorEvents { .. } | BudgetBreach::RecordedAnchorBytes { .. } => (
                format!("anchors and aliases in the recipe expand to more than {MAX_ALIAS_EXPANSION} nodes"),
                aliases.to_string(),
            ),
            BudgetBreach::Aliases { .. }
            | BudgetBreach::Anchors { .. }
            | BudgetBreach::MergeKeys { .. }
            | BudgetBreach::AliasAnchorRatio { .. } => (
                "the recipe uses more anchors, aliases or merge keys than the reader allows".to_string(),
                aliases.to_string(),
            ),
            BudgetBreach::Documents { .. } => (
                "more than one YAML document in the file".to_string(),
                "one recipe per file (no `---` separator)".to_string(),
            ),
            _ => ("the recipe is beyond a limit of the YAML reader".to_string(), aliases.to_string()),
        },
        Error::AliasReplayLimitExceeded { .. } | Error::AliasExpansionLimitExceeded { .. } => {
            (format!("aliases in the recipe expand to more than {MAX_ALIAS_EXPANSION} nodes"), aliases.to_string())
        }
        Error::AliasReplayStackDepthExceeded { max_depth, .. } => {
            (format!("aliases in the recipe are nested more than {max_depth} deep"), aliases.to_string())
        }
        Error::InvalidUtf8Input => ("the recipe is not UTF-8 text".to_string(), "a UTF-8 text file".to_string()),
        Error::UnknownAnchor { .. } => (
            "an alias names an anchor that is not defined before it".to_string(),
            "`&name` on a value before `*name` refers to it".to_string(),
        ),
        _ => return None,
    };
    Some(Diagnostic::new(loc, message).expected(expected))
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
