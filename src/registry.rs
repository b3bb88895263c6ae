//! The plugins a binary offers, by name. The engine looks plugins up here and knows none of
//! them itself.

use std::sync::Arc;

use runner_plugin::Plugin;

/// Plugins by name, in registration order.
#[derive(Clone, Default)]
pub struct Registry {
    plugins: Vec<Arc<dyn Plugin>>,
}

impl Registry {
    /// A registry of `plugins`; a later plugin with the same name replaces an earlier one, so an
    /// out-of-tree binary can override a standard plugin.
    pub fn new(plugins: impl IntoIterator<Item = Arc<dyn Plugin>>) -> Registry {
        let mut registry = Registry::default();
        for plugin in plugins {
            registry.plugins.retain(|p| p.name() != plugin.name());
            registry.plugins.push(plugin);
        }
        registry
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Plugin>> {
        self.plugins.iter().find(|p| p.name() == name)
    }

    /// Plugins sorted by name.
    pub fn sorted(&self) -> Vec<&Arc<dyn Plugin>> {
        let mut plugins: Vec<_> = self.plugins.iter().collect();
        plugins.sort_by_key(|p| p.name());
        plugins
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.sorted().iter().map(|p| p.name()).collect()
    }

    /// The plugins a recipe may have a top-level section for ([`Plugin::section_keys`]).
    pub fn section_names(&self) -> Vec<&'static str> {
        self.sorted().iter().filter(|p| !p.section_keys().is_empty()).map(|p| p.name()).collect()
    }
}
