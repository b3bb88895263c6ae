//! Fuzzes the cycles file of `runner replay` (`recipe:` and `cycles: [{id, vars}]`): the bytes are
//! read as `runner replay` reads the file (`runner::testing::cli::cycle_options`: the YAML, its shape, at
//! least one cycle, each cycle's vars turned into `--set`s), then the recipe the repository's
//! `recipes/cycles/mixed.yaml` names is compiled for the first cycles, as the replay compiles it
//! for every cycle before the first runs (the cycle id checked, each var set). Errors are fine; a
//! panic, an abort, a hang or memory beyond libFuzzer's limit is a crash.
#![no_main]

use std::collections::HashSet;
use std::path::Path;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use runner::testing::plan::Compiled;
use runner::testing::registry::Registry;

static REGISTRY: LazyLock<Registry> = LazyLock::new(|| Registry::new(runner_std_plugins::all()));

/// The recipe of `recipes/cycles/mixed.yaml`: vars `wet` (a number) and `thresholds` (a list).
const RECIPE: &str = include_str!("../../recipes/precip_mixed.yaml");

/// Cycles compiled per input: a replay compiles every one, the same way.
const COMPILED: usize = 2;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let cycles = match runner::testing::cli::cycle_options(text) {
        Ok(cycles) => cycles,
        Err(problem) => {
            assert!(!problem.is_empty());
            return;
        }
    };
    assert!(!cycles.is_empty(), "a cycles file read has a cycle");
    let mut seen = HashSet::new();
    for options in cycles.iter().filter(|o| seen.insert(o.cycle.as_str())).take(COMPILED) {
        match Compiled::from_text(Path::new("recipes/precip_mixed.yaml"), RECIPE, options, &REGISTRY) {
            Ok(compiled) => assert_eq!(compiled.recipe.cycle, options.cycle),
            Err(error) => {
                let _ = error.to_string();
            }
        }
    }
});
