//! `{input.NAME}` and `{output}`: references to a task's own files that a plugin fills in at run
//! time (as `exec` and `python` do), in args it marks with [`crate::ArgSpec::file_refs`].
//!
//! The recipe's templates (`{member}`, `{cycle}`, vars) are filled in by the engine first. So
//! that a value never becomes a reference — a `--set` value or a dim value holding `{output}`
//! reaches the command as that text, expanded once — the engine hands the strings of such an
//! arg over with every literal brace doubled (`{{`, `}}`), as Python's `str.format` reads them,
//! and only the references the recipe wrote stay single. [`pieces`] reads them back.

/// A piece of a string of an arg with file references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text as it is meant (a doubled brace already made single).
    Text(&'a str),
    /// `{input.NAME}`
    Input(&'a str),
    /// `{output}`
    Output,
}

/// Whether the text between a pair of braces is a file reference: `output` or `input.NAME`.
pub fn is_reference(body: &str) -> bool {
    body == "output" || body.strip_prefix("input.").is_some_and(is_input_name)
}

fn is_input_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// Splits `item` into its text and references. `{{` and `}}` are single braces; any other brace
/// is text as well (strings the engine did not render, as in a plugin's own tests).
pub fn pieces(item: &str) -> Vec<Piece<'_>> {
    let mut pieces = Vec::new();
    let mut text_from = 0;
    let mut at = 0;
    let bytes = item.as_bytes();
    while at < bytes.len() {
        let doubled = matches!(bytes[at], b'{' | b'}') && bytes.get(at + 1) == Some(&bytes[at]);
        let reference = (bytes[at] == b'{' && !doubled)
            .then(|| item[at..].find('}').map(|close| (&item[at + 1..at + close], at + close + 1)))
            .flatten()
            .filter(|(body, _)| is_reference(body));
        let (piece, next, keep) = if doubled {
            // The first brace of the pair is the text; the second is skipped.
            (None, at + 2, at + 1)
        } else if let Some((body, next)) = reference {
            let piece = if body == "output" { Piece::Output } else { Piece::Input(&body["input.".len()..]) };
            (Some(piece), next, at)
        } else {
            at += 1;
            continue;
        };
        if keep > text_from {
            pieces.push(Piece::Text(&item[text_from..keep]));
        }
        pieces.extend(piece);
        text_from = next;
        at = next;
    }
    if text_from < item.len() {
        pieces.push(Piece::Text(&item[text_from..]));
    }
    pieces
}

/// The input an item is exactly a reference to (`"{input.NAME}"`).
pub fn whole_input(item: &str) -> Option<&str> {
    match pieces(item).as_slice() {
        [Piece::Input(name)] => Some(name),
        _ => None,
    }
}

/// Whether `item` holds `{output}`.
pub fn mentions_output(item: &str) -> bool {
    pieces(item).contains(&Piece::Output)
}

/// `item` as its text is meant, with each reference filled in by `reference` (given the
/// piece, which is never [`Piece::Text`]).
pub fn render<E>(item: &str, mut reference: impl FnMut(Piece<'_>) -> Result<String, E>) -> Result<String, E> {
    let mut out = String::with_capacity(item.len());
    for piece in pieces(item) {
        match piece {
            Piece::Text(text) => out.push_str(text),
            other => out.push_str(&reference(other)?),
        }
    }
    Ok(out)
}

/// Doubles the braces of `text` (what the engine does to the literal text of such args).
pub fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        if matches!(c, '{' | '}') {
            out.push(c);
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_text_and_doubled_braces() {
        assert_eq!(pieces("{input.field}"), vec![Piece::Input("field")]);
        assert_eq!(
            pieces("--in={input.a}:{output}.tmp"),
            vec![Piece::Text("--in="), Piece::Input("a"), Piece::Text(":"), Piece::Output, Piece::Text(".tmp")]
        );
        assert_eq!(pieces("{input.}{inputs.x}{"), vec![Piece::Text("{input.}{inputs.x}{")]);
        // Other single braces are text (a Python dict in a string no engine rendered, say).
        assert_eq!(pieces("print({1: 2})"), vec![Piece::Text("print({1: 2})")]);
        // A value holding `{output}`, as the engine hands it over: text, not a reference.
        assert_eq!(pieces("{{output}}"), vec![Piece::Text("{"), Piece::Text("output}")]);
        assert_eq!(render::<()>("{{output}} {output}", |_| Ok("o.nc".into())).unwrap(), "{output} o.nc");
        assert_eq!(render::<()>("a}}b{{{input.x}}}", |_| Ok("F".into())).unwrap(), "a}b{F}");
        assert_eq!(whole_input("{input.members}"), Some("members"));
        assert_eq!(whole_input("x{input.members}"), None);
        assert!(mentions_output("o={output}") && !mentions_output("{{output}}"));
        let mut escaped = String::new();
        escape("{output} }", &mut escaped);
        assert_eq!(escaped, "{{output}} }}");
        assert_eq!(render::<()>(&escaped, |_| Ok("never".into())).unwrap(), "{output} }");
    }
}
