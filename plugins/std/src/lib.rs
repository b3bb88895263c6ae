//! The standard plugins of `runner`, written against the public plugin API only.

use std::sync::Arc;

use runner_plugin::Plugin;

/// Every standard plugin, for registration with the engine.
pub fn all() -> Vec<Arc<dyn Plugin>> {
    Vec::new()
}
