//! `runner plugins`: what this binary can run, with each plugin's args.

use crate::registry::Registry;

pub fn list(registry: &Registry) -> anyhow::Result<u8> {
    for plugin in registry.sorted() {
        println!("{:<12} {}", plugin.name(), plugin.about());
        for arg in plugin.args() {
            let default = match arg.default {
                None => "required".to_string(),
                Some(d) => format!("default {d}"),
            };
            println!("    {:<14} {} ({default})", arg.name, arg.about);
        }
    }
    Ok(0)
}
