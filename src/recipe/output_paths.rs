//! Checks of the args that name files a task writes ([`runner_plugin::ArgKind::OutputPath`]),
//! made when the recipe is compiled: two tasks of a step must not write the same path, and a
//! path must stay inside the working directory unless the recipe says otherwise.
//!
//! Both checks work on the template, not on every task: a path that does not mention a dim of
//! the step's `over` is written by every task along that dim; a format that may merge values
//! (a date format without the day, a string cut short) is tried on the dim's values. Whether a
//! path leaves the working directory is decided from its text with each dim reference standing
//! for a harmless name, and from every listed value that is not harmless. What depends on
//! several dims at once is left to the run-time check.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use runner_plugin::DimValue;
use serde_json::Value as Json;

use super::compiler::Compiler;
use super::diagnostic::{Diagnostic, Loc, shorten};
use super::dims::{DimId, DimValues};
use super::limits::MAX_PATH_VALUES_COMPARED;
use super::template::{Braces, Filled, Segment, Template, TemplateValue};

impl Compiler<'_> {
    /// Checks output path arg `arg` as written (`written`); false when it was refused.
    pub(super) fn check_output_path(
        &mut self,
        step: &str,
        arg: &str,
        loc: Loc,
        written: &Json,
        over: &[DimId],
    ) -> bool {
        let texts: Vec<&str> = match written {
            Json::String(text) => vec![text],
            Json::Array(items) => items.iter().filter_map(Json::as_str).collect(),
            _ => Vec::new(),
        };
        texts.into_iter().all(|text| match self.path_problem(step, arg, text, over) {
            None => true,
            Some(diagnostic) => {
                self.error(Diagnostic { loc, ..diagnostic });
                false
            }
        })
    }

    fn path_problem(&mut self, step: &str, arg: &str, written: &str, over: &[DimId]) -> Option<Diagnostic> {
        // Names and formats were checked already.
        let template = match self.fixed_template(written, Braces::Plain).ok()? {
            Filled::Value(Json::String(path)) => {
                Template { segments: vec![Segment::Literal(path)], braces: Braces::Plain }
            }
            Filled::Value(_) => return None,
            Filled::Partial(template) => template,
        };
        let first_path = self.render(&template, &|_| None);
        if let Some(problem) = self.shared_path(step, arg, &template, &first_path, over) {
            return Some(problem);
        }
        if written.starts_with('/') || self.paths.allow_outside {
            return None;
        }
        self.outside_path(step, arg, &template)
    }

    /// "does not depend on dim `member`", or two values of a dim that format alike.
    fn shared_path(
        &mut self,
        step: &str,
        arg: &str,
        template: &Template,
        first: &str,
        over: &[DimId],
    ) -> Option<Diagnostic> {
        let referenced = |d: DimId| template.names().any(|n| n == self.dims[d].name);
        let missing: Vec<DimId> = over.iter().copied().filter(|&d| self.dims[d].len() > 1 && !referenced(d)).collect();
        if let Some(&d) = missing.first() {
            let dim = &self.dims[d];
            let names: Vec<String> = missing.iter().map(|&m| format!("`{}`", self.dims[m].name)).collect();
            let refs: Vec<String> = missing.iter().map(|&m| format!("`{{{}}}`", self.dims[m].name)).collect();
            let (dims, them) = if missing.len() == 1 { ("dim", "") } else { ("dims", " (each)") };
            let message = format!(
                "arg `{arg}` of step `{step}` does not depend on {dims} {}: the {} tasks over `{}`{them} would all write `{}`",
                names.join(", "),
                dim.len(),
                dim.name,
                shorten(first, 200)
            );
            return Some(
                Diagnostic::new(Loc::default(), message).expected(format!("{} in the path", refs.join(" and "))),
            );
        }
        for &d in over {
            if template.may_merge(&self.dims[d].name)
                && let Some(problem) = self.merged_values(step, arg, template, d)
            {
                return Some(problem);
            }
        }
        None
    }

    /// Renders the path for the first values of dim `d` (others at their first value) and
    /// reports the first two values that give the same path.
    fn merged_values(&mut self, step: &str, arg: &str, template: &Template, d: DimId) -> Option<Diagnostic> {
        let dim = &self.dims[d];
        let mut seen: HashMap<String, u64> = HashMap::new();
        for i in 0..dim.len().min(MAX_PATH_VALUES_COMPARED) {
            let value = dim.value(i);
            let path = self.render(template, &|name| (name == dim.name).then(|| value.clone()));
            if let Some(before) = seen.insert(path.clone(), i) {
                let example = match &dim.values {
                    DimValues::Time { dates: true, .. } => format!(", e.g. `{{{}:%Y%m%d}}`", dim.name),
                    DimValues::Time { dates: false, .. } => format!(", e.g. `{{{}:%Y%m%dT%H%M}}`", dim.name),
                    _ => format!(", e.g. `{{{}}}`", dim.name),
                };
                let message = format!(
                    "arg `{arg}` of step `{step}` would write `{}` for both {} {} and {} {}",
                    shorten(&path, 200),
                    dim.name,
                    dim.value(before),
                    dim.name,
                    value
                );
                let expected = format!("a format of `{}` in the path that tells its values apart{example}", dim.name);
                return Some(Diagnostic::new(Loc::default(), message).expected(expected));
            }
        }
        None
    }

    /// A path that leaves the working directory: absolute (from a var or the cycle), or with
    /// more `..` than names before them.
    fn outside_path(&mut self, step: &str, arg: &str, template: &Template) -> Option<Diagnostic> {
        let refuse = |path: &str, from: String| {
            let message = format!(
                "arg `{arg}` of step `{step}` writes `{}`{from}, outside the working directory",
                shorten(path, 200)
            );
            Diagnostic::new(Loc::default(), message).expected(
                "a path inside the working directory, an absolute path written in the recipe itself, \
                 or `paths: {allow_outside: true}` at the top of the recipe",
            )
        };
        let path = self.render(template, &|name| self.stand_in(name));
        if leaves_working_dir(&path) {
            return Some(refuse(&path, String::new()));
        }
        if let Some(target) = symlinked_outside(Path::new(&path)) {
            return Some(refuse(
                &path,
                format!(" (through a symlink, to `{}`)", shorten(&target.display().to_string(), 200)),
            ));
        }
        let lists: Vec<DimId> = template
            .names()
            .filter_map(|n| self.dim_ids.get(n).copied())
            .filter(|&d| matches!(self.dims[d].values, DimValues::List(_)))
            .collect();
        for d in lists {
            let DimValues::List(values) = &self.dims[d].values else { continue };
            for value in values.iter().filter(|v| !is_harmless(v)) {
                let name = &self.dims[d].name;
                let lookup = |n: &str| if n == name { Some(value.clone()) } else { self.stand_in(n) };
                let path = self.render(template, &lookup);
                if leaves_working_dir(&path) {
                    return Some(refuse(&path, format!(" for {name} `{}`", shorten(&value.to_string(), 60))));
                }
            }
        }
        // A lookup's entries are text from a var: each that is not harmless is tried.
        for lookup in template.text_lookups() {
            let Some(table) = &lookup.entries else { continue };
            let risky = |entry: &Json| entry.as_str().is_some_and(|s| !is_harmless(&DimValue::Str(s.into())));
            for (value, _) in table.entries().filter(|(_, entry)| risky(entry)) {
                let lookup_value = |n: &str| if n == lookup.key { Some(value.clone()) } else { self.stand_in(n) };
                let path = self.render(template, &lookup_value);
                if leaves_working_dir(&path) {
                    let from = format!(
                        " for {} `{}` (from var `{}`)",
                        lookup.key,
                        shorten(&value.to_string(), 60),
                        lookup.table
                    );
                    return Some(refuse(&path, from));
                }
            }
        }
        None
    }

    /// The value a dim reference stands for when judging where a path leads: its first value
    /// when harmless (integers and dates format to digits and fixed separators whatever the
    /// value), else a plain name; the other listed values that are not harmless are tried one
    /// by one.
    fn stand_in(&self, name: &str) -> Option<DimValue> {
        let first = self.dims[*self.dim_ids.get(name)?].value(0);
        Some(if is_harmless(&first) { first } else { DimValue::Str("x".into()) })
    }

    /// The path with dims from `lookup` (and any other dim at its first value).
    fn render(&self, template: &Template, lookup: &dyn Fn(&str) -> Option<DimValue>) -> String {
        let values: Vec<(&str, DimValue)> = template
            .distinct_names()
            .into_iter()
            .filter_map(|name| {
                let value = lookup(name).or_else(|| self.dim_ids.get(name).map(|&d| self.dims[d].value(0)))?;
                Some((name, value))
            })
            .collect();
        let find = |name: &str| values.iter().find(|(n, _)| *n == name).map(|(_, v)| TemplateValue::Dim(v.clone()));
        match template.fill(&find) {
            Ok(Filled::Value(Json::String(text))) => text,
            Ok(Filled::Value(other)) => other.to_string(),
            Ok(Filled::Partial(_)) | Err(_) => String::new(),
        }
    }
}

/// `path` with its longest existing ancestor resolved through symlinks (made absolute against
/// the working directory) and the rest, not there yet, appended as written.
pub fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |p, part: &&std::ffi::OsStr| p.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// Where a relative output path that stays inside the working directory by its text really
/// leads when a folder on its way is a symlink to outside it; `None` when it stays inside.
fn symlinked_outside(path: &Path) -> Option<PathBuf> {
    let working_dir = std::env::current_dir().ok()?.canonicalize().ok()?;
    let resolved = resolve_existing_prefix(path);
    // `..` left in the part that does not exist yet was judged by the text already.
    (!resolved.starts_with(&working_dir)).then_some(resolved)
}

/// A listed value that cannot change where a path leads: no `/`, and not only dots.
fn is_harmless(value: &DimValue) -> bool {
    match value {
        DimValue::Str(s) => !s.contains('/') && s.chars().any(|c| c != '.'),
        _ => true,
    }
}

/// True when `path` is absolute or climbs above where it starts (`a/../../b`).
pub(super) fn leaves_working_dir(path: &str) -> bool {
    if path.starts_with('/') {
        return true;
    }
    let mut depth = 0usize;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_prefixes_resolve_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(real.join("elsewhere"), real.join("link")).unwrap();
        assert_eq!(resolve_existing_prefix(&real.join("link/a/b.npy")), real.join("elsewhere/a/b.npy"));
        assert_eq!(resolve_existing_prefix(&real.join("new/x")), real.join("new/x"));
    }

    #[test]
    fn paths_that_leave() {
        for inside in ["out/x.npy", "a/../b", "./x", "a/b/../../c", "..x/y", "x/.."] {
            assert!(!leaves_working_dir(inside), "{inside}");
        }
        for outside in ["/etc/x", "../x", "a/../../x", "./../x", "a/b/../../../c"] {
            assert!(leaves_working_dir(outside), "{outside}");
        }
    }
}
