//! "Did you mean" for misspelt names. Bounded whatever the recipe: at most [`MAX_LISTED`] names
//! are listed, at most [`MAX_COMPARED`] compared, and only names short enough to be a typo of
//! one another, so that a recipe with many misspelt references among many names stays linear.

/// Names listed in "one of: ...".
const MAX_LISTED: usize = 20;
/// Candidates compared with a misspelt name.
const MAX_COMPARED: usize = 10_000;
/// Longest name compared (edit distance is quadratic in the lengths).
const MAX_COMPARED_LEN: usize = 64;

/// "one of: a, b, c (did you mean `b`?)" for a misspelt name.
pub(super) fn suggestion<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let mut listed: Vec<&str> = Vec::new();
    let mut count = 0usize;
    let mut compared: Vec<&str> = Vec::new();
    for candidate in candidates {
        count += 1;
        if listed.len() < MAX_LISTED {
            listed.push(candidate);
        }
        if compared.len() < MAX_COMPARED {
            compared.push(candidate);
        }
    }
    let list = match count {
        0 => "(none)".to_string(),
        n if n > listed.len() => format!("{}, ... ({n} in all)", listed.join(", ")),
        _ => listed.join(", "),
    };
    match closest(name, compared) {
        Some(c) => format!("one of: {list} (did you mean `{c}`?)"),
        None => format!("one of: {list}"),
    }
}

/// The candidate `name` is most likely a misspelling of.
pub(super) fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if name.len() > MAX_COMPARED_LEN {
        return None;
    }
    candidates
        .into_iter()
        .take(MAX_COMPARED)
        .filter(|c| c.len() <= MAX_COMPARED_LEN)
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|&(distance, c)| is_close(name, c, distance))
        .min()
        .map(|(_, c)| c)
}

/// Whether `candidate`, `distance` edits away, is a likely typo of `name`: at most one edit in
/// three characters of the longer name (one for names up to five characters), so `sst` is not
/// offered `lat` (two of three letters changed) while `leed` is offered `lead`.
pub(super) fn is_close(name: &str, candidate: &str, distance: usize) -> bool {
    let longer = name.chars().count().max(candidate.chars().count());
    distance <= (longer / 3).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_bounded() {
        assert_eq!(suggestion("lead", ["member", "lead"]), "one of: member, lead (did you mean `lead`?)");
        assert_eq!(suggestion("x", []), "one of: (none)");
        let many: Vec<String> = (0..1000).map(|i| format!("step{i}")).collect();
        let text = suggestion("step99x", many.iter().map(String::as_str));
        assert!(text.starts_with("one of: step0, step1,") && text.contains("... (1000 in all)"), "{text}");
        assert!(text.ends_with("(did you mean `step99`?)"), "{text}");
        assert_eq!(closest(&"a".repeat(100_000), ["a"]), None);
        assert_eq!(closest("sst", ["lat", "lon", "sea_surface_temp"]), None, "two letters of three is not close");
        assert_eq!(closest("leed", ["member", "lead"]), Some("lead"));
        assert_eq!(closest("temprature", ["temperature"]), Some("temperature"));
    }
}
