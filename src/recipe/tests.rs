//! The front end on valid and nearly valid recipes, with the standard plugins and with test
//! plugins: what each key becomes, how date dims expand and format, what a rejected recipe's
//! sound part holds, and that a plugin's panic is a located error.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use runner_plugin::{ArgError, ArgSpec, Args, DimValue, Inputs, Plugin, TaskContext, TaskError, Value};

use super::*;
use crate::graph::Graph;

fn standard() -> Registry {
    Registry::new(runner_std_plugins::all())
}

fn options(cycle: &str) -> CompileOptions {
    CompileOptions { cycle: cycle.to_string(), set: Vec::new() }
}

fn compile(text: &str) -> Result<Recipe, RecipeError> {
    parse(Path::new("test.yaml"), text.to_string(), &options("2026-11-30T02Z"), &standard())
}

fn compiled(text: &str) -> Recipe {
    compile(text).unwrap_or_else(|e| panic!("{e}"))
}

fn messages(error: &RecipeError) -> Vec<String> {
    error.diagnostics.iter().map(|d| d.message.clone()).collect()
}

/// The args of task `index` of step `step`, rendered as the scheduler renders them.
fn task_args(recipe: &Recipe, step: &str, index: &[u64]) -> Args {
    let step = &recipe.steps[recipe.step_id(step).expect("step")];
    let values: Vec<(String, DimValue)> =
        step.over.iter().zip(index).map(|(&d, &i)| (recipe.dims[d].name.clone(), recipe.dims[d].value(i))).collect();
    let lookup = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    step.args.for_task(&lookup).into_owned()
}

#[test]
fn step_keys_and_paths_reach_the_compiled_recipe() {
    let recipe = compiled(
        "recipe: keys\npaths: {allow_outside: true}\nsteps:\n  a:\n    plugin: noop\n    retries: 3\n    timeout: 90s\n    on_missing: skip\n    cache: true\n  b:\n    plugin: noop\n    on_missing: ignore\n    timeout: 500ms\n  c:\n    plugin: noop\n",
    );
    let [a, b, c] = [&recipe.steps[0], &recipe.steps[1], &recipe.steps[2]];
    assert_eq!(
        (a.retries, a.timeout, a.on_missing, a.cache),
        (3, Some(Duration::from_secs(90)), OnMissing::Skip, true)
    );
    assert_eq!((b.on_missing, b.timeout), (OnMissing::Ignore, Some(Duration::from_millis(500))));
    assert_eq!((c.retries, c.timeout, c.on_missing, c.cache), (0, None, OnMissing::Error, false));
    assert!(recipe.paths.allow_outside);
    assert!(!compiled("recipe: r\nsteps: {a: {plugin: noop}}\n").paths.allow_outside);
}

#[test]
fn date_dims_are_lazy_and_format_with_strftime() {
    let recipe = compiled(
        "recipe: oisst\ndims:\n  day: {start: 1981-09-01, stop: 2021-01-05, step: 1d}\n  chunk: {group: day, size: 5}\n  hour: {start: 2026-11-01T00Z, stop: 2026-11-02T00Z, step: 3h}\n\
         steps:\n  read:\n    plugin: synth\n    over: [day]\n    args: {ny: 2, nx: 2, wet_fraction: 0.1, seed: \"{day:%Y%m}/oisst-avhrr-v02r01.{day:%Y%m%d}.nc\"}\n\
         \x20 chunks:\n    plugin: noop\n    over: [chunk]\n    inputs: {days: read}\n\
         \x20 hourly:\n    plugin: synth\n    over: [hour]\n    args: {ny: 2, nx: 2, wet_fraction: 0.1, seed: \"{hour}|{hour:%H%M}|{cycle:%Y%m%dT%H%MZ}\"}\n",
    );
    let day = &recipe.dims[0];
    assert_eq!(day.len(), 14_372);
    assert!(matches!(day.values, DimValues::Time { .. }), "a rule, not a list: {:?}", day.values);
    assert_eq!(day.value(0), DimValue::Date(4261 * 86_400));
    assert_eq!(day.value(0).to_string(), "1981-09-01");
    assert_eq!(day.value(day.len() - 1).to_string(), "2021-01-05");
    assert_eq!(recipe.dims[1].len(), 14_372_u64.div_ceil(5));
    assert_eq!(recipe.dims[2].len(), 9);
    let seed = |recipe: &Recipe, step: &str, i: u64| task_args(recipe, step, &[i]).str("seed").unwrap();
    assert_eq!(seed(&recipe, "read", 0), "198109/oisst-avhrr-v02r01.19810901.nc");
    assert_eq!(seed(&recipe, "read", 30), "198110/oisst-avhrr-v02r01.19811001.nc");
    assert_eq!(seed(&recipe, "hourly", 1), "2026-11-01T03:00Z|0300|20261130T0200Z");
    let graph = Graph::build(&recipe).expect("graph");
    assert_eq!(graph.total_tasks(), 14_372 + 2_875 + 9);
}

#[test]
fn select_pins_a_date() {
    let recipe = compiled(
        "recipe: pick\ndims:\n  day: {start: 1981-09-01, stop: 1981-09-30}\n  hour: {start: 2026-11-01T00Z, stop: 2026-11-01T12Z, step: 6h}\nsteps:\n  f:\n    plugin: noop\n    over: [day, hour]\n\
         \x20 g:\n    plugin: noop\n    inputs: {f: {step: f, select: {day: 1981-09-03, hour: 2026-11-01T06:00Z}}}\n",
    );
    let pins: Vec<(DimId, u64)> = recipe.steps[1].inputs[0].select.iter().map(|&(d, i, _)| (d, i)).collect();
    assert_eq!(pins, vec![(0, 2), (1, 1)]);
    let error = compile(
        "recipe: pick\ndims:\n  day: {start: 1981-09-01, stop: 1981-09-30}\nsteps:\n  f: {plugin: noop, over: [day]}\n  g: {plugin: noop, inputs: {f: {step: f, select: {day: soon}}}}\n",
    )
    .unwrap_err();
    assert_eq!(messages(&error), ["`select` pins date dim `day` to \"soon\", which is not a date"]);
}

#[test]
fn list_files_are_read_next_to_the_recipe() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("lists")).unwrap();
    std::fs::write(dir.path().join("lists/inputs.txt"), "a.nc\r\n\n  b.nc  \nc/d.nc\n").unwrap();
    let text = "recipe: files\ndims:\n  file: {file: lists/inputs.txt}\nsteps:\n  a:\n    plugin: synth\n    over: [file]\n    args: {ny: 1, nx: 1, wet_fraction: 0.1, seed: \"{file}\"}\n";
    let path = dir.path().join("recipe.yaml");
    std::fs::write(&path, text).unwrap();
    let recipe = load(&path, &options("C1"), &standard()).unwrap_or_else(|e| panic!("{e}"));
    let values: Vec<String> = (0..recipe.dims[0].len()).map(|i| recipe.dims[0].value(i).to_string()).collect();
    assert_eq!(values, ["a.nc", "b.nc", "c/d.nc"]);
    assert_eq!(task_args(&recipe, "a", &[2]).str("seed").unwrap(), "c/d.nc");
}

#[test]
fn paths_outside_are_allowed_when_the_recipe_says_so() {
    let writes = |paths: &str, path: &str| {
        format!(
            "recipe: out\n{paths}vars:\n  dir: /tmp\n  up: ..\nsteps:\n  f: {{plugin: synth, args: {{ny: 1, nx: 1, wet_fraction: 0.1}}}}\n  s:\n    plugin: write_npy\n    inputs: {{array: f}}\n    args: {{path: \"{path}\"}}\n"
        )
    };
    for path in ["{dir}/x.npy", "{up}/x.npy", "../x.npy"] {
        assert!(compile(&writes("", path)).is_err(), "{path} accepted");
        compile(&writes("paths: {allow_outside: true}\n", path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    // Absolute in the recipe text itself, or inside: fine without opting in.
    for path in ["/tmp/runner-test/{cycle}.npy", "out/{cycle}/x.npy", "a/../b.npy"] {
        compile(&writes("", path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

#[test]
fn output_paths_that_tell_tasks_apart_are_accepted() {
    compiled(
        "recipe: ok\ndims:\n  member: 4\n  day: {start: 1981-09-01, stop: 1982-09-30}\n  one: [only]\nsteps:\n  f:\n    plugin: synth\n    over: [member, day, one]\n    args: {ny: 1, nx: 1, wet_fraction: 0.1}\n\
         \x20 s:\n    plugin: write_npy\n    over: [member, day, one]\n    inputs: {array: f}\n    args: {path: \"out/{day:%Y}/{day:%m%d}/m{member:02}.npy\"}\n",
    );
}

#[test]
fn a_rejected_recipe_keeps_its_sound_part_for_the_graph_checks() {
    let error = compile(
        "recipe: partial\ndims:\n  member: 3\n  lead: [1, 2]\nsteps:\n  field:\n    plugin: synth\n    over: [member, lead]\n    args: {ny: 1, nx: 1, wet_fraction: 0.1}\n\
         \x20 broken:\n    plugin: treshold\n    over: [member]\n    inputs: {field: field}\n\
         \x20 after_broken:\n    plugin: noop\n    inputs: {x: broken}\n\
         \x20 pinned:\n    plugin: noop\n    over: [lead]\n    inputs: {f: {step: field, select: {lead: 1}}}\n",
    )
    .unwrap_err();
    assert_eq!(messages(&error).len(), 1, "{error}");
    let part = error.sound_part().expect("a sound part");
    let names: Vec<&str> = part.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["field", "pinned"], "a step reading a rejected step is not sound");
    assert_eq!(part.steps[1].inputs[0].producer, 0, "ids renumbered");
    let graph_problems = Graph::build(part).expect_err("the pin on a matched dim is the graph's to find");
    assert!(graph_problems[0].message.contains("pins dim `lead`, which step `pinned` runs over"), "{graph_problems:?}");
    let mut error = error;
    error.extend(graph_problems);
    assert_eq!(error.diagnostics.len(), 2);
    assert!(error.diagnostics.windows(2).all(|w| w[0].loc <= w[1].loc), "in file order");
}

#[test]
fn a_step_that_misspells_over_is_not_sound() {
    let error = compile(
        "recipe: r\ndims:\n  member: 3\nsteps:\n  f:\n    plugin: synth\n    ovr: [member]\n    args: {ny: 1, nx: 1, wet_fraction: 0.1, seed: \"{member}\"}\n",
    )
    .unwrap_err();
    assert_eq!(messages(&error), ["unknown key `ovr` in step `f`"]);
    assert!(error.sound_part().is_none());
}

/// A plugin whose check panics.
struct Panicky;

impl Plugin for Panicky {
    fn name(&self) -> &'static str {
        "panicky"
    }
    fn about(&self) -> &'static str {
        "panics in check"
    }
    fn args(&self) -> &'static [ArgSpec] {
        const ARGS: &[ArgSpec] = &[ArgSpec::optional("n", "0", "anything")];
        ARGS
    }
    fn check(&self, args: &Args) -> Result<(), ArgError> {
        let n = args.u64_or("n", 0)?;
        let table = [1, 2, 3];
        assert!(table.get(n as usize).is_some(), "index {n} out of the table");
        Ok(())
    }
    fn run(&self, _: &TaskContext, _: &Args, _: &Inputs) -> Result<Value, TaskError> {
        Ok(Value::None)
    }
}

#[test]
fn a_plugin_that_panics_in_check_is_a_located_error() {
    let registry = Registry::new([Arc::new(Panicky) as Arc<dyn Plugin>]);
    let text = "recipe: p\nsteps:\n  ok:\n    plugin: panicky\n  bad:\n    plugin: panicky\n    args: {n: 7}\n";
    let error = parse(Path::new("p.yaml"), text.to_string(), &options("C1"), &registry).unwrap_err();
    assert_eq!(error.diagnostics.len(), 1, "{error}");
    let d = &error.diagnostics[0];
    assert_eq!((d.loc.line, d.loc.column), (5, 3));
    assert!(
        d.message
            .starts_with("plugin `panicky` panicked checking the args of step `bad`: index 7 out of the table (at "),
        "{}",
        d.message
    );
    assert!(d.message.contains("src/recipe/tests.rs:"), "{}", d.message);
}

#[test]
fn cycle_ids_are_checked_with_the_recipe() {
    let error =
        parse(Path::new("c.yaml"), "recipe: c\nsteps: {a: {plugin: noop}}\n".into(), &options("../up"), &standard())
            .unwrap_err();
    assert_eq!(messages(&error), ["cycle id `../up` has `/` at character 3"]);
    assert_eq!(error.diagnostics[0].loc, Loc::default());
}

#[test]
fn numbers_out_of_range_say_so() {
    let error = compile(
        "recipe: n\ndims:\n  a: 18446744073709551615\n  b: {start: 0, stop: 9223372036854775808}\nsteps:\n  s:\n    plugin: noop\n    memory: 18446744073709551616\n",
    )
    .unwrap_err();
    let all = messages(&error).join("\n");
    for says in [
        "the count of dim `a` is 18446744073709551615: out of range",
        "`stop` of dim `b` is 9223372036854775808: out of range",
        "`memory` of step `s`: 1.8446744073709552e19 bytes: out of range",
    ] {
        assert!(all.contains(says), "lacks {says:?}:\n{all}");
    }
}
