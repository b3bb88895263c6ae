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
    CompileOptions { cycle: cycle.to_string(), ..CompileOptions::default() }
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

fn compile_at(cycle: &str, text: &str) -> Result<Recipe, RecipeError> {
    parse(Path::new("improver.yaml"), text.to_string(), &options(cycle), &standard())
}

/// Each problem as `line:column: message`.
fn located(error: &RecipeError) -> Vec<String> {
    let expected = |d: &Diagnostic| d.expected.as_ref().map(|e| format!("; expected {e}")).unwrap_or_default();
    error.diagnostics.iter().map(|d| format!("{}:{}: {}{}", d.loc.line, d.loc.column, d.message, expected(d))).collect()
}

const IMPROVER: &str = "recipe: improver\n\
    vars:\n  radii: {1: 10000, 2: 20000, 3: 30000}\n  thresholds: [[273.15], [275.15, 280.15], [290.0]]\n  spin: 6\n\
    dims:\n  lead: [1, 2, 3]\n  valid: {start: \"{cycle}\", step: 1h, count: 3}\n  since: {start: \"{cycle - spin h}\", stop: \"{cycle}\", step: 3h}\n\
    steps:\n  per_lead:\n    plugin: synth\n    over: [lead]\n    args:\n      ny: 1\n      nx: 1\n      wet_fraction: 0.1\n      seed: \"{cycle + lead h:%Y%m%dT%H%MZ}-{lead h:PT%4HH%MM}-r{radii[lead]}-{thresholds[lead]}\"\n\
    \x20 per_valid:\n    plugin: synth\n    over: [valid]\n    args: {ny: 1, nx: 1, wet_fraction: 0.1, seed: \"{valid:%Y%m%dT%H%MZ}-{valid - cycle:PT%4HH%MM}\"}\n\
    \x20 typed:\n    plugin: threshold\n    over: [lead]\n    inputs: {field: per_lead}\n    args: {thresholds: \"{thresholds[lead]}\"}\n";

#[test]
fn improver_templates_render_per_task() {
    let recipe = compile_at("2026-12-01T00Z", IMPROVER).unwrap_or_else(|e| panic!("{e}"));
    let seed = |step: &str, i: u64| task_args(&recipe, step, &[i]).str("seed").unwrap();
    assert_eq!(seed("per_lead", 0), "20261201T0100Z-PT0001H00M-r10000-[273.15]");
    assert_eq!(seed("per_lead", 2), "20261201T0300Z-PT0003H00M-r30000-[290.0]");
    assert_eq!(seed("per_valid", 2), "20261201T0200Z-PT0002H00M");
    // A lone lookup keeps the entry's type: a list of thresholds per lead.
    assert_eq!(task_args(&recipe, "typed", &[1]).get("thresholds"), Some(&serde_json::json!([275.15, 280.15])));
    let valid = &recipe.dims[recipe.dims.iter().position(|d| d.name == "valid").unwrap()];
    assert_eq!((valid.len(), valid.value(0).to_string()), (3, "2026-12-01T00:00Z".to_string()));
    let since = &recipe.dims[recipe.dims.iter().position(|d| d.name == "since").unwrap()];
    let values: Vec<String> = (0..since.len()).map(|i| since.value(i).to_string()).collect();
    assert_eq!(values, ["2026-11-30T18:00Z", "2026-11-30T21:00Z", "2026-12-01T00:00Z"]);
    // The next cycle moves the dims relative to it.
    let next = compile_at("2026-12-01T06Z", IMPROVER).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(next.dims[1].value(0).to_string(), "2026-12-01T06:00Z");
}

#[test]
fn template_misuse_is_located() {
    let with = |vars: &str, dims: &str, seed: &str| {
        format!(
            "recipe: bad\nvars:\n{vars}dims:\n  lead: [1, 2, 3]\n  member: 2\n{dims}steps:\n  s:\n    plugin: synth\n    over: [lead]\n    args: {{ny: 1, nx: 1, wet_fraction: 0.1, seed: \"{seed}\"}}\n"
        )
    };
    let radii = "  radii: {1: 10000, 2: 20000}\n  list: [1, 2]\n  wet: 0.5\n";
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            radii,
            "",
            "{radius[lead]}",
            "13:51: arg `seed` of step `s`: `{radius[lead]}`: unknown var `radius`; expected a var that maps the values of `lead` to values, one of: radii, list, wet (did you mean `radii`?)",
        ),
        (
            radii,
            "",
            "{radii[lead]}",
            "13:51: arg `seed` of step `s`: `{radii[lead]}`: var `radii` has no entry for lead `3`; its keys are: 1, 2; expected a key for every value of dim `lead` (1, 2, 3)",
        ),
        (
            radii,
            "",
            "{list[lead]}",
            "13:51: arg `seed` of step `s`: `{list[lead]}`: var `list` lists 2 items but dim `lead` has 3 values; expected one item per value of `lead`, in its order (1, 2, 3)",
        ),
        (
            radii,
            "",
            "{radii[member]}",
            "13:51: arg `seed` of step `s`: `{radii[member]}` indexes var `radii` by `member`, which is a dim that step `s` does not run over; expected a dim the step runs over (lead)",
        ),
        (
            radii,
            "",
            "{radii[wet]}",
            "13:51: arg `seed` of step `s`: `{radii[wet]}` indexes var `radii` by `wet`, which is a var, not a dim; expected a dim the step runs over (lead)",
        ),
        (
            radii,
            "",
            "{cycle + lead}",
            "13:51: arg `seed` of step `s`: `{cycle + lead}`: it adds two date-times (cycle, lead); expected one date-time plus or minus durations, each with its unit (`lead h`, `6h`)",
        ),
        (
            radii,
            "",
            "{lead - 6h}",
            "13:51: arg `seed` of step `s`: `{lead - 6h}`: dim `lead` has integer values, which are not date-times; expected `lead h` (or `m`, `s`, `d`) for a duration of that many hours, or a date or date-time dim",
        ),
        (
            radii,
            "",
            "{cycle + member h}",
            "13:51: arg `seed` of step `s`: `{cycle + member h}`: `{member}` refers to dim `member`, but step `s` does not run over it",
        ),
        (
            radii,
            "",
            "{cycle + wet s}",
            "13:51: arg `seed` of step `s`: `{cycle + wet s}`: `wet s` is 0.5 seconds, not a whole number of seconds; expected whole seconds",
        ),
        (
            radii,
            "",
            "{cycle-6h}",
            "13:51: arg `seed` of step `s`: unknown name `{cycle-6h}` in a template (arithmetic needs spaces around `-`: `{cycle - 6h}`)",
        ),
        (
            radii,
            "  v: {start: \"{cycle}\", stop: \"{cycle + 1h}\", count: 2}\n",
            "{lead}",
            "9:54: range dim `v` has both `stop` and `count`",
        ),
        (
            radii,
            "  v: {start: \"{lead}\", count: 2}\n",
            "{lead}",
            "9:14: `start` of dim `v` (\"{lead}\") refers to `lead`; expected only the cycle and vars",
        ),
        (
            radii,
            "  v: {start: \"{wet}\", count: 2}\n",
            "{lead}",
            "9:14: `start` of dim `v` is \"{wet}\", which is \"0.5\"",
        ),
    ];
    let mut wrong = Vec::new();
    for (vars, dims, seed, says) in cases {
        let all = match compile_at("2026-12-01T00Z", &with(vars, dims, seed)) {
            Ok(_) => vec!["accepted".to_string()],
            Err(error) => located(&error),
        };
        if !all.iter().any(|line| line.starts_with(says)) {
            wrong.push(format!("{seed} / {dims}: wanted {says:?}, got {all:#?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The cycle must be a date-time where arithmetic or a dim's `start` needs one.
    let error = compile_at("C1", &with(radii, "", "{cycle + lead h}")).unwrap_err();
    assert!(
        located(&error).iter().any(|l| l.starts_with(
            "13:51: arg `seed` of step `s`: `{cycle + lead h}`: `cycle` is `C1`, which is not a date-time"
        )),
        "{error}"
    );
    let error = compile_at("C1", &with(radii, "  v: {start: \"{cycle}\", count: 2}\n", "{lead}")).unwrap_err();
    let all = located(&error);
    assert!(all.iter().any(|l| l.starts_with("9:14: `start` of dim `v` is \"{cycle}\", which is \"C1\"")), "{all:#?}");
    assert!(error.diagnostics.iter().any(|d| {
        d.expected.as_deref().is_some_and(|e| e.contains("the cycle id, `--cycle`, must then be a date-time"))
    }));
}

#[test]
fn lookups_in_output_paths_are_checked_like_any_value() {
    let writes = |vars: &str, path: &str| {
        format!(
            "recipe: out\nvars:\n{vars}dims:\n  lead: [1, 2]\nsteps:\n  f: {{plugin: synth, over: [lead], args: {{ny: 1, nx: 1, wet_fraction: 0.1}}}}\n  s:\n    plugin: write_npy\n    over: [lead]\n    inputs: {{array: f}}\n    args: {{path: \"{path}\"}}\n"
        )
    };
    compiled(&writes("  name: {1: a, 2: b}\n", "out/{name[lead]}.npy"));
    let error = compile(&writes("  name: {1: a, 2: a}\n", "out/{name[lead]}.npy")).unwrap_err();
    assert!(messages(&error)[0].contains("would write `out/a.npy` for both lead 1 and lead 2"), "{error}");
    let error = compile(&writes("  name: {1: a, 2: ../../up}\n", "out/{name[lead]}.npy")).unwrap_err();
    assert!(
        messages(&error)[0]
            .contains("writes `out/../../up.npy` for lead `2` (from var `name`), outside the working directory"),
        "{error}"
    );
    // Validity times tell leads apart; a format without the hour does not.
    compiled(&writes("", "out/{cycle + lead h:%Y%m%dT%H%MZ}-{lead h:PT%4HH%MM}.npy"));
    let error = compile(&writes("", "out/{cycle + lead h:%Y%m%d}.npy")).unwrap_err();
    assert!(messages(&error)[0].contains("for both lead 1 and lead 2"), "{error}");
}

#[test]
fn integer_ranges_take_a_count_too() {
    let recipe = compiled(
        "recipe: c\ndims:\n  hour: {start: 0, step: 3, count: 8}\nsteps:\n  a: {plugin: noop, over: [hour]}\n",
    );
    assert_eq!((recipe.dims[0].len(), recipe.dims[0].value(7)), (8, DimValue::Int(21)));
    let error = compile("recipe: c\ndims:\n  hour: {start: 0, count: 0}\nsteps:\n  a: {plugin: noop, over: [hour]}\n")
        .unwrap_err();
    assert!(messages(&error)[0].starts_with("`count` of dim `hour` is 0"), "{error}");
    let error = compile("recipe: c\ndims:\n  hour: {start: 0, step: 3}\nsteps:\n  a: {plugin: noop, over: [hour]}\n")
        .unwrap_err();
    assert_eq!(messages(&error), ["range dim `hour` has no `stop` or `count`"]);
}
