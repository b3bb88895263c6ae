//! Recipe errors that say where (file:line:column), what is wrong and what was expected, and
//! render the offending line with a caret under the column. What is shown of the file is
//! bounded: a long line is cut around the column, control characters are escaped, and after
//! [`MAX_PROBLEMS_SHOWN`] problems only their count is given.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_saphyr::Location;

use super::Recipe;
use super::limits::MAX_PROBLEMS_SHOWN;

/// A place in the recipe file (1-based line and column; 0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Loc {
    pub line: u32,
    pub column: u32,
}

impl From<Location> for Loc {
    fn from(location: Location) -> Loc {
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Loc { line: clamp(location.line()), column: clamp(location.column()) }
    }
}

/// The recipe text, kept to show the offending lines.
#[derive(Debug)]
pub struct Source {
    pub path: PathBuf,
    pub text: String,
    /// Byte offset of each line's start, computed when a line is first shown.
    line_starts: OnceLock<Vec<usize>>,
}

impl Source {
    pub fn new(path: &Path, text: String) -> Source {
        Source { path: path.to_path_buf(), text, line_starts: OnceLock::new() }
    }

    fn line(&self, line: u32) -> Option<&str> {
        let starts = self
            .line_starts
            .get_or_init(|| std::iter::once(0).chain(self.text.match_indices('\n').map(|(at, _)| at + 1)).collect());
        let start = *starts.get(line.checked_sub(1)? as usize)?;
        let end = starts.get(line as usize).map_or(self.text.len(), |&next| next - 1);
        (start <= end).then(|| self.text[start..end].trim_end_matches('\r'))
    }
}

/// One problem in a recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub loc: Loc,
    /// What is wrong, e.g. "unknown dim `membr` in `over` of step `smooth`".
    pub message: String,
    /// What was expected, e.g. "one of: member, lead".
    pub expected: Option<String>,
}

impl Diagnostic {
    pub fn new(loc: impl Into<Loc>, message: impl Into<String>) -> Diagnostic {
        Diagnostic { loc: loc.into(), message: message.into(), expected: None }
    }

    pub fn expected(mut self, expected: impl Into<String>) -> Diagnostic {
        self.expected = Some(expected.into());
        self
    }

    /// A diagnostic from text that may end in "; expected ..." or ": expected ...".
    pub fn with_expectation(loc: impl Into<Loc>, text: String) -> Diagnostic {
        match text.split_once("; expected ").or_else(|| text.split_once(": expected ")) {
            Some((message, expected)) => Diagnostic::new(loc, message).expected(expected),
            None => Diagnostic::new(loc, text),
        }
    }
}

/// Everything wrong with a recipe, in file order.
#[derive(Debug, Clone, thiserror::Error)]
pub struct RecipeError {
    file: Arc<Source>,
    pub diagnostics: Vec<Diagnostic>,
    /// The steps of the rejected recipe that compiled without a problem, with everything they
    /// read: later checks (the graph's, the plan's) can run on it to report their problems in
    /// the same report.
    sound_part: Option<Arc<Recipe>>,
}

impl RecipeError {
    pub fn new(source: Arc<Source>, diagnostics: Vec<Diagnostic>) -> RecipeError {
        let mut error = RecipeError { file: source, diagnostics: Vec::new(), sound_part: None };
        error.extend(diagnostics);
        error
    }

    /// An error about the file as a whole (unreadable, empty...).
    pub fn whole_file(path: &Path, message: impl Into<String>) -> RecipeError {
        let source = Arc::new(Source::new(path, String::new()));
        RecipeError::new(source, vec![Diagnostic::new(Loc::default(), message)])
    }

    pub(super) fn with_sound_part(mut self, part: Option<Recipe>) -> RecipeError {
        self.sound_part = part.map(Arc::new);
        self
    }

    /// The part of the recipe that compiled soundly (see the field), when there is any.
    pub fn sound_part(&self) -> Option<&Recipe> {
        self.sound_part.as_deref()
    }

    /// Adds problems found by later checks; the report stays in file order.
    pub fn extend(&mut self, diagnostics: impl IntoIterator<Item = Diagnostic>) {
        self.diagnostics.extend(diagnostics);
        self.diagnostics.sort_by_key(|d| d.loc);
        self.diagnostics.dedup();
    }

    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.diagnostics.iter().take(MAX_PROBLEMS_SHOWN).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            render(f, &self.file, diagnostic)?;
        }
        if let Some(more) = self.diagnostics.len().checked_sub(MAX_PROBLEMS_SHOWN).filter(|&n| n > 0) {
            write!(f, "\n{}: ... and {more} more problems", self.file.path.display())?;
        }
        Ok(())
    }
}

/// Most characters of a message or an expectation shown.
const MAX_MESSAGE_CHARS: usize = 2000;
/// Characters of the offending line shown on each side of the column.
const EXCERPT_RADIUS: usize = 60;

/// `path:line:col: message; expected ...` then the line (or the part of it around the column)
/// and a caret.
fn render(f: &mut fmt::Formatter<'_>, source: &Source, d: &Diagnostic) -> fmt::Result {
    let path = source.path.display();
    let message = escape(&middle_cut(&d.message, MAX_MESSAGE_CHARS));
    match d.loc.line {
        0 => write!(f, "{path}: {message}")?,
        line => write!(f, "{path}:{line}:{}: {message}", d.loc.column)?,
    }
    if let Some(expected) = &d.expected {
        write!(f, "; expected {}", escape(&middle_cut(expected, MAX_MESSAGE_CHARS)))?;
    }
    if let Some(text) = source.line(d.loc.line) {
        let (excerpt, caret) = excerpt(text, d.loc.column.saturating_sub(1) as usize);
        let number = d.loc.line.to_string();
        let gutter = " ".repeat(number.len());
        write!(f, "\n{gutter} |\n{number} | {excerpt}\n{gutter} | {caret}^")?;
    }
    Ok(())
}

/// The part of `line` around character `column` (0-based), cut with `…` on the sides that
/// were cut and with control characters escaped; and the padding that puts a caret under it.
fn excerpt(line: &str, column: usize) -> (String, String) {
    // Only the characters up to the end of the excerpt are looked at: a diagnostic on a long
    // line costs its column, not the line.
    let column = column.min(line.chars().take(column).count());
    let start = column.saturating_sub(EXCERPT_RADIUS);
    let end = column + EXCERPT_RADIUS;
    let mut shown = String::new();
    let mut caret = String::new();
    if start > 0 {
        shown.push('…');
        caret.push(' ');
    }
    let mut chars = line.chars().enumerate().skip(start);
    for (i, c) in chars.by_ref().take(end - start) {
        let piece = if c == '\t' { "\t".to_string() } else { escape_char(c) };
        if i < column {
            let pad = if c == '\t' { "\t".to_string() } else { " ".repeat(piece.chars().count()) };
            caret.push_str(&pad);
        }
        shown.push_str(&piece);
    }
    if chars.next().is_some() {
        shown.push('…');
    }
    (shown, caret)
}

/// `text` with control characters (other than none) written as escapes (`\0`, `\u{1b}`).
fn escape(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        out.push_str(&escape_char(c));
    }
    out
}

fn escape_char(c: char) -> String {
    if c.is_control() {
        let mut out = String::new();
        let _ = write!(out, "{}", c.escape_debug());
        out
    } else {
        c.to_string()
    }
}

/// `text` cut in the middle to at most `max` characters, with `…` where it was cut.
fn middle_cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    let count = text.chars().count();
    if count <= max {
        return text.into();
    }
    let head: String = text.chars().take(max / 2).collect();
    let tail: String = text.chars().skip(count - max / 2).collect();
    format!("{head}…{tail}").into()
}

/// `text` cut to at most `max` characters, with `…` where it was cut.
pub fn shorten(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => text.into(),
        Some((end, _)) => format!("{}…", &text[..end]).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(text: &str, loc: Loc, message: &str) -> String {
        let source = Arc::new(Source::new(Path::new("r.yaml"), text.to_string()));
        RecipeError::new(source, vec![Diagnostic::new(loc, message).expected("x")]).to_string()
    }

    #[test]
    fn long_lines_are_cut_around_the_column() {
        let line = format!("key: {}BAD{}", "a".repeat(1_000_000), "b".repeat(1_000_000));
        let text = rendered(&line, Loc { line: 1, column: 1_000_006 }, "bad value");
        assert!(text.len() < 1000, "{} bytes", text.len());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("1 | …") && lines[2].ends_with('…'), "{}", lines[2]);
        let caret = lines[3].chars().position(|c| c == '^').unwrap();
        let under: String = lines[2].chars().skip(caret).take(3).collect();
        assert_eq!(under, "BAD", "{text}");
    }

    #[test]
    fn control_characters_are_escaped() {
        let text = rendered("a: \"x\0y\u{1b}\"\n", Loc { line: 1, column: 8 }, "odd `x\0y`");
        assert!(!text.contains('\0') && !text.contains('\u{1b}'), "{text:?}");
        assert!(text.contains("odd `x\\0y`"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], "1 | a: \"x\\0y\\u{1b}\"");
        // The caret is under the character at column 8 (ESC, shown as `\u{1b}`).
        assert_eq!(lines[3].find('^'), Some(lines[2].find("\\u{1b}").unwrap()), "{text}");
    }

    #[test]
    fn many_problems_are_counted_not_all_shown() {
        let source = Arc::new(Source::new(Path::new("r.yaml"), "a: 1\n".to_string()));
        let many = (0..1000).map(|i| Diagnostic::new(Loc { line: 1, column: i + 1 }, format!("problem {i}"))).collect();
        let text = RecipeError::new(source, many).to_string();
        assert!(text.contains("problem 99") && !text.contains("problem 100\n"), "{text}");
        assert!(text.ends_with("r.yaml: ... and 900 more problems"), "{}", &text[text.len() - 100..]);
    }
}
