//! The atomic-writer invariant (ARCHITECTURE.md, "No file is ever half-written"): no code of the
//! engine or of the plugins creates or writes a file but through `runner_plugin::files` (a hidden
//! temporary name, then a rename), except the files listed here, each with why it may not or need
//! not be written whole at once. The sources under `src/` and `plugins/` are scanned, their
//! comments, string literals and test code (`#[cfg(test)]` modules, inline or in files of their
//! own) left out; a new way of writing a file, or one more of an allowed kind in a file, fails
//! until it goes through the writer or is listed with its reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What creates or writes a file. `File::create` also counts `File::create_new`.
const WRITES: [&str; 5] = ["File::create", "File::options", "OpenOptions::new", "fs::write(", "fs::copy("];

/// The writer itself.
const WRITER: &str = "plugins/api/src/files.rs";

/// (file, what, how many times, why it is not the atomic writer's).
const ALLOWED: &[(&str, &str, usize, &str)] = &[
    ("src/store/connect.rs", "OpenOptions::new", 1, "the SQLite store: opened for writing to probe it, never written"),
    (
        "src/memory/spill/mapped.rs",
        "OpenOptions::new",
        1,
        "spill files: written in chunks, synced and mapped back, in a private folder no one else reads",
    ),
    (
        "src/command/log.rs",
        "OpenOptions::new",
        2,
        "task logs: appended as the command prints, capped with head and tail kept",
    ),
    ("src/command/registry.rs", "OpenOptions::new", 1, "a line appended to a killed command's log"),
    ("src/command/service/mod.rs", "OpenOptions::new", 1, "a service's log: appended as it prints"),
    ("src/command/cgroup.rs", "OpenOptions::new", 2, "cgroup control files: the kernel's interface, not files"),
    ("src/command/service/sampler.rs", "fs::write(", 1, "/proc/<pid>/clear_refs: the kernel's interface, not a file"),
    ("src/measure/system.rs", "fs::write(", 1, "/proc/self/clear_refs: the kernel's interface, not a file"),
    (
        "src/cli/output_lock.rs",
        "OpenOptions::new",
        1,
        "an output root's lock file: flocked, its content the holder's identity",
    ),
    ("src/budget.rs", "OpenOptions::new", 1, "the budget registry's lock file: flocked, never read"),
    (
        "src/executor/slurm/mod.rs",
        "fs::write(",
        1,
        "a Slurm run's list of jobs: its header, then a line appended per submitted array",
    ),
    ("src/executor/slurm/mod.rs", "OpenOptions::new", 1, "a line appended to the list of jobs per submitted array"),
    (
        "src/slurm/submit.rs",
        "fs::write(",
        1,
        "a job array's index file: written before the array that reads it is submitted",
    ),
    (
        "plugins/std/src/exec.rs",
        "fs::write(",
        1,
        "a command's input in the task's private scratch folder, removed after the task",
    ),
];

#[test]
fn files_are_written_only_through_the_atomic_writer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for dir in ["src", "plugins"] {
        for file in sources(&root.join(dir)) {
            let name = file.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if name == WRITER {
                continue;
            }
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            for what in WRITES {
                let times = code.matches(what).count();
                if times > 0 {
                    found.insert((name.clone(), what), times);
                }
            }
        }
    }
    let allowed: BTreeMap<(String, &str), usize> =
        ALLOWED.iter().map(|&(file, what, times, _)| ((file.to_string(), what), times)).collect();
    let unlisted: Vec<String> = found
        .iter()
        .filter(|(key, times)| allowed.get(*key) != Some(times))
        .map(|((file, what), times)| format!("{file}: `{what}` {times}×"))
        .collect();
    let stale: Vec<String> = allowed
        .iter()
        .filter(|(key, times)| found.get(*key) != Some(times))
        .map(|((file, what), times)| format!("{file}: `{what}` {times}×"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "files written other than through runner_plugin::files (use it, or list the file in ALLOWED with its \
         reason):\n  {}",
        unlisted.join("\n  ")
    );
    assert!(stale.is_empty(), "ALLOWED lists writes that are no longer there:\n  {}", stale.join("\n  "));
}

/// The `.rs` files under `dir` that are not test code: a module a file declares
/// `#[cfg(test)] mod name;` is left out with its folder.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut test_modules: Vec<PathBuf> = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                // Integration tests and fixtures of the plugin crates.
                if !path.ends_with("tests") && !path.ends_with("testdata") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                // A module's children sit beside `mod.rs`/`lib.rs`, or in a folder named after it.
                let base = match path.file_stem().and_then(|s| s.to_str()) {
                    Some("mod" | "lib" | "main") => path.parent().unwrap().to_path_buf(),
                    _ => path.with_extension(""),
                };
                for name in cfg_test_module_files(&text) {
                    test_modules.push(base.join(format!("{name}.rs")));
                    test_modules.push(base.join(name));
                }
                files.push(path);
            }
        }
    }
    files.retain(|f| !test_modules.iter().any(|t| f == t || f.starts_with(t)));
    files
}

/// The names of the modules `text` declares as `#[cfg(test)] mod name;`.
fn cfg_test_module_files(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line == "#[cfg(test)]"
            && let Some(next) = lines.next()
            && let Some(name) = next.strip_prefix("mod ").or_else(|| next.strip_prefix("pub mod "))
            && let Some(name) = name.strip_suffix(';')
        {
            names.push(name.to_string());
        }
    }
    names
}

/// `text` without comments, the contents of string and char literals, and `#[cfg(test)]`
/// modules (`#[cfg(test)]` then `mod name {`, up to its closing brace).
fn code_of(text: &str) -> String {
    let blanked = blank_literals(text);
    let mut code = String::with_capacity(blanked.len());
    let mut rest = blanked.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        code.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let is_module = head.starts_with("mod ") || head.starts_with("pub mod ") || head.starts_with("pub(crate) mod ");
        match head.find(['{', ';']) {
            Some(open) if is_module && head.as_bytes()[open] == b'{' => {
                let body = &head[open..];
                let mut depth = 0usize;
                let mut end = body.len();
                for (i, c) in body.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &body[end..];
            }
            _ => rest = after,
        }
    }
    code.push_str(rest);
    code
}

/// `text` with comments dropped and the insides of string, raw string and char literals
/// emptied, so that neither a word in them nor a brace counts.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && starts_literal(&chars, i) {
            // A raw string: r"…", r#"…"#, br"…"…
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), or else a lifetime or label.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Whether the `r` at `at` starts a raw string rather than ends a name (`for"` is no raw string;
/// `br"` is one).
fn starts_literal(chars: &[char], at: usize) -> bool {
    let before = |n: usize| at.checked_sub(n).and_then(|i| chars.get(i));
    !is_ident(before(1)) || (before(1) == Some(&'b') && !is_ident(before(2)))
}

#[test]
fn the_scan_sees_through_comments_literals_and_test_modules() {
    let text = "fn a() { std::fs::write(p, b) }\n// File::create(x)\nconst S: &str = \"OpenOptions::new\";\n\
                const R: &str = r#\"fs::copy(\"#;\nfn b<'a>(c: char) -> bool { c == '{' }\n\
                #[cfg(test)]\nmod tests {\n    fn t() { File::create(\"x\"); if true { } }\n}\nfn c() { File::options(); }\n";
    let code = code_of(text);
    let counts: Vec<usize> = WRITES.iter().map(|w| code.matches(w).count()).collect();
    assert_eq!(counts, [0, 1, 0, 1, 0], "{code}");
    assert_eq!(cfg_test_module_files("#[cfg(test)]\nmod testing;\n"), ["testing"]);
}
