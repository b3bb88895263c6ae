//! A step's scalar keys read and checked: `memory`, `retries`, `timeout`, `on_missing`, `cache`,
//! `resume`.

use runner_plugin::size::{parse_duration, parse_size};

use super::compiler::Compiler;
use super::diagnostic::Diagnostic;
use super::limits::MAX_RETRIES;
use super::raw::bounded;
use super::suggest::suggestion;
use super::{OnMissing, ResumeCheck};

impl Compiler<'_> {
    pub(super) fn memory_hint(&mut self, step: &str, memory: &super::yaml::Item) -> Option<u64> {
        use super::yaml::Node;
        let parsed = match &memory.node {
            Node::Int(i) if *i >= 0 => Ok(*i as u64),
            Node::UInt(u) => Ok(*u),
            Node::Int(i) => Err(format!(
                "invalid size `{i}`: a size cannot be negative; expected a number of bytes or a size such as `600MiB`"
            )),
            Node::Str(s) => parse_size(s),
            Node::Float(x) if x.fract() == 0.0 && *x >= 18_446_744_073_709_551_616.0 => {
                Err(format!("{x:e} bytes: out of range; expected at most {} bytes (16 EiB)", u64::MAX))
            }
            Node::Float(x) if x.fract() == 0.0 && *x >= 0.0 => Ok(*x as u64),
            other => Err(format!("{}; expected a number of bytes or a size such as `600MiB`", other.kind())),
        };
        let what = format!("`memory` of step `{step}`");
        match parsed {
            // A hint of nothing would admit every task for free until history says otherwise.
            Ok(0) => {
                self.error(
                    Diagnostic::new(memory.loc, format!("{what} is 0 bytes"))
                        .expected("a size above 0, such as `600MiB` (or no `memory:`, to use the plugin's estimate)"),
                );
                None
            }
            Ok(bytes) => Some(bytes),
            Err(e) => {
                self.error(Diagnostic::with_expectation(memory.loc, format!("{what}: {e}")));
                None
            }
        }
    }

    pub(super) fn retries(&mut self, step: &str, item: &super::yaml::Item) -> Option<u64> {
        bounded(item, format!("`retries` of step `{step}`"), 0, MAX_RETRIES).map_err(|d| self.error(d)).ok()
    }

    pub(super) fn timeout(&mut self, step: &str, item: &super::yaml::Item) -> Option<std::time::Duration> {
        use super::yaml::Node;
        let what = format!("`timeout` of step `{step}`");
        let expected = "a duration with a unit, e.g. `30s`, `10m` or `2h`";
        let duration = match &item.node {
            Node::Str(s) => {
                parse_duration(s).map_err(|e| Diagnostic::with_expectation(item.loc, format!("{what}: {e}")))
            }
            other => Err(Diagnostic::new(item.loc, format!("{what} is {}", other.kind())).expected(expected)),
        };
        match duration {
            Ok(d) if d.is_zero() => {
                self.error(Diagnostic::new(item.loc, format!("{what} is 0")).expected(format!("{expected}, above 0")));
                None
            }
            Ok(d) => Some(d),
            Err(d) => {
                self.error(d);
                None
            }
        }
    }

    pub(super) fn on_missing(&mut self, step: &str, item: &super::yaml::Item) -> Option<OnMissing> {
        let choices = [("error", OnMissing::Error), ("skip", OnMissing::Skip), ("ignore", OnMissing::Ignore)];
        self.choice(&format!("`on_missing` of step `{step}`"), item, &choices)
    }

    pub(super) fn resume(&mut self, step: &str, item: &super::yaml::Item) -> Option<ResumeCheck> {
        let choices = [("metadata", ResumeCheck::Metadata), ("content", ResumeCheck::Content)];
        self.choice(&format!("`resume` of step `{step}`"), item, &choices)
    }

    /// One of a key's named `choices` (`what` names the key in the error).
    fn choice<T: Copy, const N: usize>(
        &mut self,
        what: &str,
        item: &super::yaml::Item,
        choices: &[(&'static str, T); N],
    ) -> Option<T> {
        use super::yaml::Node;
        let names = choices.map(|(n, _)| n);
        let expected = match &item.node {
            Node::Str(s) => match choices.iter().find(|(n, _)| **n == **s) {
                Some((_, choice)) => return Some(*choice),
                None => {
                    self.error(Diagnostic::new(item.loc, format!("{what} is `{s}`")).expected(suggestion(s, names)));
                    return None;
                }
            },
            other => Diagnostic::new(item.loc, format!("{what} is {}", other.kind())),
        };
        self.error(expected.expected(suggestion("", names)));
        None
    }

    pub(super) fn cache(&mut self, step: &str, item: &super::yaml::Item) -> Option<bool> {
        match item.node {
            super::yaml::Node::Bool(b) => Some(b),
            ref other => {
                let message = format!("`cache` of step `{step}` is {}", other.kind());
                self.error(Diagnostic::new(item.loc, message).expected("`true` or `false`"));
                None
            }
        }
    }
}
