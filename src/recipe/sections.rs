//! A plugin's section of the recipe: a top-level key named after a plugin whose settings hold
//! for every step of it that does not set them itself (`python: {interpreter: venv/bin/python}`
//! for every python step), and the command line's settings that win over them (`--python`).
//! Which keys a section takes, and the arg each sets, is the plugin's to say
//! ([`runner_plugin::Plugin::section_keys`]); the engine knows no plugin by name.

use serde_json::{Map, Value as Json};

use super::compiler::{Compiler, Setting};
use super::diagnostic::{Diagnostic, Loc};
use super::raw::{RawSection, to_json};
use super::suggest::suggestion;

impl Compiler<'_> {
    /// Reads each plugin's section, then lays the command line's settings over them.
    pub(super) fn compile_sections(&mut self, sections: Vec<RawSection<'_>>) {
        for (plugin, entries) in sections {
            for (key, item) in entries {
                let Some(arg) = self.section_arg(plugin, &key.value, key.loc) else { continue };
                match to_json(item) {
                    Ok(value) => self.set_section(plugin, Setting { arg, value, loc: Some(item.loc) }),
                    Err(diagnostic) => {
                        let message = format!("`{}` of `{plugin}`: {}", key.value, diagnostic.message);
                        self.error(Diagnostic { message, ..diagnostic });
                    }
                }
            }
        }
        let (options, registry) = (self.options, self.registry);
        for (plugin, key, value) in &options.sections {
            let Some(plugin) = registry.get(plugin) else { continue };
            if let Some(arg) = find_arg(&plugin.section_keys(), key) {
                self.set_section(plugin.name(), Setting { arg, value: value.clone(), loc: None });
            }
        }
    }

    /// The arg that `key` of `plugin`'s section sets; an unknown key is reported.
    fn section_arg(&mut self, plugin: &str, key: &str, loc: Loc) -> Option<&'static str> {
        let keys = self.registry.get(plugin)?.section_keys();
        let arg = find_arg(&keys, key);
        if arg.is_none() {
            self.error(
                Diagnostic::new(loc, format!("unknown key `{key}` in `{plugin}`"))
                    .expected(suggestion(key, keys.iter().map(|(key, _)| *key))),
            );
        }
        arg
    }

    fn set_section(&mut self, plugin: &'static str, setting: Setting) {
        let settings = self.sections.entry(plugin).or_default();
        settings.retain(|s| s.arg != setting.arg);
        settings.push(setting);
    }

    /// Adds to a step's `fixed` args each setting of its plugin's section that the step does
    /// not set itself (`given`), with where it was written (else `step_loc`).
    pub(super) fn fill_from_section(
        &self,
        plugin: &str,
        given: impl Fn(&str) -> bool,
        fixed: &mut Map<String, Json>,
        locations: &mut Vec<(String, Loc)>,
        step_loc: Loc,
    ) {
        for setting in self.sections.get(plugin).into_iter().flatten() {
            if !given(setting.arg) {
                fixed.insert(setting.arg.to_string(), setting.value.clone());
                locations.push((setting.arg.to_string(), setting.loc.unwrap_or(step_loc)));
            }
        }
    }
}

fn find_arg(keys: &[(&'static str, &'static str)], key: &str) -> Option<&'static str> {
    keys.iter().find(|(k, _)| *k == key).map(|(_, arg)| *arg)
}
