//! Recipe errors that say where (file:line:column), what is wrong and what was expected, and
//! render the offending line with a caret under the column.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_saphyr::Location;

/// A place in the recipe file (1-based line and column; 0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Loc {
    pub line: u32,
    pub column: u32,
}

impl From<Location> for Loc {
    fn from(location: Location) -> Loc {
        Loc { line: location.line() as u32, column: location.column() as u32 }
    }
}

/// The recipe text, kept to show the offending line.
#[derive(Debug)]
pub struct Source {
    pub path: PathBuf,
    pub text: String,
}

impl Source {
    fn line(&self, line: u32) -> Option<&str> {
        self.text.lines().nth(line.checked_sub(1)? as usize)
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
}

impl RecipeError {
    pub fn new(source: Arc<Source>, mut diagnostics: Vec<Diagnostic>) -> RecipeError {
        diagnostics.sort_by_key(|d| d.loc);
        diagnostics.dedup();
        RecipeError { file: source, diagnostics }
    }

    /// An error about the file as a whole (unreadable, empty...).
    pub fn whole_file(path: &Path, message: impl Into<String>) -> RecipeError {
        let source = Arc::new(Source { path: path.to_path_buf(), text: String::new() });
        RecipeError::new(source, vec![Diagnostic::new(Loc::default(), message)])
    }

    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            render(f, &self.file, diagnostic)?;
        }
        Ok(())
    }
}

/// `path:line:col: message; expected ...` then the line and a caret.
fn render(f: &mut fmt::Formatter<'_>, source: &Source, d: &Diagnostic) -> fmt::Result {
    let path = source.path.display();
    match d.loc.line {
        0 => write!(f, "{path}: {}", d.message)?,
        line => write!(f, "{path}:{line}:{}: {}", d.loc.column, d.message)?,
    }
    if let Some(expected) = &d.expected {
        write!(f, "; expected {expected}")?;
    }
    if let Some(text) = source.line(d.loc.line) {
        let number = d.loc.line.to_string();
        let gutter = " ".repeat(number.len());
        let caret_pad: String = text
            .chars()
            .take(d.loc.column.saturating_sub(1) as usize)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "\n{gutter} |\n{number} | {text}\n{gutter} | {caret_pad}^")?;
    }
    Ok(())
}
