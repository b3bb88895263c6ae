//! "Did you mean" for misspelt names.

/// "did you mean" for a misspelt name.
pub(super) fn suggestion<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let list = if candidates.is_empty() { "(none)".to_string() } else { candidates.join(", ") };
    match closest(name, candidates) {
        Some(c) => format!("one of: {list} (did you mean `{c}`?)"),
        None => format!("one of: {list}"),
    }
}

/// The candidate `name` is most likely a misspelling of.
pub(super) fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(distance, c)| *distance <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}
