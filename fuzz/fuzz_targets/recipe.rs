//! Fuzzes the recipe front end with the standard plugins: YAML reading, shape checks, the
//! compiler, and the graph and plan built from what compiles; then the rendering of every
//! problem. Anything but a clean `Ok` or `Err` (a panic, an abort, a hang, memory beyond
//! libFuzzer's limit) is a crash.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use runner::testing::plan::Compiled;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;

static REGISTRY: LazyLock<Registry> = LazyLock::new(|| Registry::new(runner_std_plugins::all()));

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // A list file may name any file; reading devices is not the front end's behaviour to fuzz.
    if text.contains("/dev") || text.contains("/proc") || text.contains("/sys") {
        return;
    }
    let options = CompileOptions { cycle: "2026-11-30T02Z".into(), set: vec![("wet".into(), "0.5".into())], ..Default::default() };
    match Compiled::from_text(Path::new("recipes/fuzzed.yaml"), text, &options, &REGISTRY) {
        Ok(compiled) => {
            // Per-task args of the first and last task of every step, as the scheduler renders them.
            for (id, step) in compiled.recipe.steps.iter().enumerate() {
                let shape = &compiled.graph.steps[id];
                for index in [0, shape.tasks.saturating_sub(1)] {
                    let coords = shape.coords(index);
                    let lookup = |name: &str| {
                        let pos = step.over.iter().position(|&d| compiled.recipe.dims[d].name == name)?;
                        Some(compiled.recipe.dims[step.over[pos]].value(coords[pos]))
                    };
                    let _ = step.args.for_task(&lookup);
                }
            }
        }
        Err(error) => {
            let _ = error.to_string();
        }
    }
});
