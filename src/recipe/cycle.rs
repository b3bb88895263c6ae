//! Cycle ids (`--cycle`, the ids of a cycles file): they go into output paths and the store, so
//! they must be safe as one path component and short.

use super::limits::MAX_CYCLE_LEN;

/// What a cycle id may be made of, for messages.
pub const CYCLE_ID_FORM: &str = "letters, digits and `. _ : + -` (not `.`, no `..`, no `/`), e.g. 2026-11-30T02Z";

/// Checks a cycle id: not empty, at most [`MAX_CYCLE_LEN`] bytes, only `[A-Za-z0-9._:+-]`, no
/// `..`. The error says what is wrong; the caller adds where the id came from.
pub fn validate_cycle(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err(format!("the cycle id is empty; expected {CYCLE_ID_FORM}"));
    }
    if id.len() > MAX_CYCLE_LEN {
        return Err(format!(
            "the cycle id is {} bytes long; expected at most {MAX_CYCLE_LEN} bytes of {CYCLE_ID_FORM}",
            id.len()
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '+' | '-');
    if let Some((at, c)) = id.char_indices().find(|&(_, c)| !allowed(c)) {
        return Err(format!(
            "cycle id `{}` has `{}` at character {}; expected {CYCLE_ID_FORM}",
            id.escape_debug(),
            c.escape_debug(),
            id[..at].chars().count() + 1
        ));
    }
    if id == "." {
        return Err(format!("cycle id `.` names the folder it is in; expected {CYCLE_ID_FORM}"));
    }
    if id.contains("..") {
        return Err(format!("cycle id `{id}` contains `..`; expected {CYCLE_ID_FORM}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_and_bad_cycle_ids() {
        for good in ["2026-11-30T02Z", "20261130T0200Z", "C1", "run_3.b", "2026-11-30T02:00+00:00"] {
            assert_eq!(validate_cycle(good), Ok(()), "{good}");
        }
        let cases = [
            ("", "the cycle id is empty"),
            ("../../../escape", "has `/` at character 3"),
            ("2026/11/01T00Z", "has `/` at character 5"),
            ("a..b", "contains `..`"),
            ("..", "contains `..`"),
            (".", "names the folder it is in"),
            ("a b", "has ` ` at character 2"),
            ("nul\0", "has `\\0` at character 4"),
        ];
        for (bad, says) in cases {
            let error = validate_cycle(bad).unwrap_err();
            assert!(error.contains(says) && error.contains("expected letters, digits"), "{bad:?}: {error}");
        }
        assert!(validate_cycle(&"x".repeat(65)).unwrap_err().contains("65 bytes long; expected at most 64"));
    }
}
