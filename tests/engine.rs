//! The engine end to end with plugins defined here: input matching (match, gather, group-gather,
//! broadcast, select, list form), values passed in order, failures that skip only dependants,
//! and panics that fail only their task.

use std::path::Path;
use std::sync::{Arc, Mutex};

use runner::plugin::{ArgSpec, Args, Inputs, Plugin, TaskContext, TaskError, Value};
use runner::testing::plan::Compiled;
use runner::testing::recipe::CompileOptions;
use runner::testing::registry::Registry;
use runner::testing::scheduler::{self, Progress, RunOptions, RunReport, TaskReport, TaskSink};
use serde_json::{Value as Json, json};

/// Returns its key as JSON, plus whatever its inputs carried: `{"key": ..., "in": {...}}`.
/// Fails on the key given in `fail_on`, panics on `panic_on`. Records every output it makes.
struct Echo {
    seen: Arc<Mutex<Vec<(String, Json)>>>,
}

impl Plugin for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn about(&self) -> &'static str {
        "test plugin"
    }
    fn args(&self) -> &'static [ArgSpec] {
        const ARGS: &[ArgSpec] = &[
            ArgSpec::optional("fail_on", "none", "key to fail on"),
            ArgSpec::optional("panic_on", "none", "key to panic on"),
            ArgSpec::optional("label", "none", "a templated label"),
        ];
        ARGS
    }
    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        if args.str_or("fail_on", "\u{0}")? == ctx.key() {
            return Err(TaskError::msg(format!("asked to fail at {}", ctx.key())));
        }
        if args.str_or("panic_on", "\u{0}")? == ctx.key() {
            panic!("asked to panic at {}", ctx.key());
        }
        let mut ins = serde_json::Map::new();
        for input in inputs.iter() {
            let values: Vec<Json> = input
                .values()
                .map(|v| match v {
                    Value::Json(j) => j["key"].clone(),
                    other => Json::String(other.kind().into()),
                })
                .collect();
            let value = if input.is_gathered() { Json::Array(values) } else { values[0].clone() };
            ins.insert(input.name().to_string(), value);
        }
        let mut out = json!({"key": ctx.key(), "in": ins});
        if let Some(label) = args.get("label") {
            out["label"] = label.clone();
        }
        self.seen.lock().unwrap().push((format!("{}[{}]", ctx.step(), ctx.key()), out.clone()));
        Ok(Value::Json(out))
    }
}

struct Outcome {
    report: RunReport,
    seen: Vec<(String, Json)>,
}

impl Outcome {
    fn output(&self, task: &str) -> &Json {
        &self.seen.iter().find(|(t, _)| t == task).unwrap_or_else(|| panic!("{task} did not run: {:?}", self.seen)).1
    }
    fn ran(&self, task: &str) -> bool {
        self.seen.iter().any(|(t, _)| t == task)
    }
}

fn run(yaml: &str, workers: usize) -> Outcome {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let registry = Registry::new([Arc::new(Echo { seen: seen.clone() }) as Arc<dyn Plugin>]);
    let options = CompileOptions { cycle: "C1".into(), ..CompileOptions::default() };
    let compiled =
        Compiled::from_text(Path::new("test.yaml"), yaml, &options, &registry).unwrap_or_else(|e| panic!("{e}"));
    let work_dir = tempfile::tempdir().unwrap();
    let options = RunOptions::new(workers, 1 << 30, work_dir.path().join("run"));
    let report =
        scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), None);
    let seen = seen.lock().unwrap().clone();
    Outcome { report, seen }
}

#[test]
fn matches_gathers_and_broadcasts() {
    let out = run(
        r#"
recipe: shapes
dims:
  member: 3
  lead: [1, 6]
steps:
  field:
    plugin: echo
    over: [member, lead]
  mean:
    plugin: echo
    over: [lead]
    inputs: {members: field}
  calib:
    plugin: echo
  apply:
    plugin: echo
    over: [member, lead]
    inputs: {field: field, mean: mean, calib: calib}
"#,
        2,
    );
    assert_eq!(out.report.total(|s| s.ok), 6 + 2 + 1 + 6);
    assert_eq!(
        out.output("mean[lead=6]")["in"]["members"],
        json!(["member=0,lead=6", "member=1,lead=6", "member=2,lead=6"])
    );
    let apply = &out.output("apply[member=2,lead=1]")["in"];
    assert_eq!(apply["field"], "member=2,lead=1");
    assert_eq!(apply["mean"], "lead=1");
    assert_eq!(apply["calib"], "");
}

#[test]
fn group_gather_and_select_and_list_form() {
    let out = run(
        r#"
recipe: groups
dims:
  hour: {start: 0, stop: 12, step: 1}
  chunk: {group: hour, size: 5}
  member: [a, b]
steps:
  cache:
    plugin: echo
    over: [hour]
  write:
    plugin: echo
    over: [chunk]
    inputs: {hours: cache}
  control:
    plugin: echo
    over: [member]
  pick:
    plugin: echo
    inputs: {only_b: {step: control, select: {member: b}}}
  both:
    plugin: echo
    inputs: [write, control]
"#,
        2,
    );
    assert_eq!(out.output("write[chunk=0]")["in"]["hours"], json!(["hour=0", "hour=1", "hour=2", "hour=3", "hour=4"]));
    // 13 hours in blocks of 5: the last block is partial.
    assert_eq!(out.output("write[chunk=2]")["in"]["hours"], json!(["hour=10", "hour=11", "hour=12"]));
    assert_eq!(out.output("pick[]")["in"]["only_b"], "member=b");
    assert_eq!(out.output("both[]")["in"]["write"], json!(["chunk=0", "chunk=1", "chunk=2"]));
    assert_eq!(out.output("both[]")["in"]["control"], json!(["member=a", "member=b"]));
}

#[test]
fn templates_fill_dims_vars_and_cycle() {
    let out = run(
        r#"
recipe: templates
dims:
  lead: [3, 12]
vars:
  name: prob
steps:
  save:
    plugin: echo
    over: [lead]
    args: {label: "out/{cycle}/{name}_T{lead:03}.npy"}
"#,
        1,
    );
    assert_eq!(out.output("save[lead=12]")["label"], "out/C1/prob_T012.npy");
    assert_eq!(out.output("save[lead=3]")["label"], "out/C1/prob_T003.npy");
}

#[test]
fn a_failure_skips_only_its_dependants() {
    let out = run(
        r#"
recipe: failing
dims:
  member: 4
steps:
  load:
    plugin: echo
    over: [member]
    args: {fail_on: "member=1"}
  smooth:
    plugin: echo
    over: [member]
    inputs: {field: load}
  mean:
    plugin: echo
    inputs: {members: smooth}
  other:
    plugin: echo
    over: [member]
    args: {panic_on: "member=3"}
"#,
        2,
    );
    let r = &out.report;
    assert_eq!(r.total(|s| s.failed), 2, "{:?}", r.failures);
    // smooth[member=1] and mean are skipped; smooth for members 0, 2, 3 still run.
    assert_eq!(r.total(|s| s.skipped), 2);
    assert!(out.ran("smooth[member=0]") && out.ran("smooth[member=3]"));
    assert!(!out.ran("mean[]"));
    assert!(out.ran("other[member=2]"));
    let failures: Vec<(String, String, String)> =
        r.failures.iter().map(|f| (f.step.clone(), f.key.clone(), f.error.clone())).collect();
    assert_eq!(failures[0], ("load".into(), "member=1".into(), "asked to fail at member=1".into()));
    assert_eq!(failures[1].0, "other");
    assert!(failures[1].2.contains("panicked: asked to panic at member=3"), "{failures:?}");
}

#[test]
fn many_tasks_on_many_workers_finish_exactly_once() {
    let out = run(
        r#"
recipe: wide
dims:
  file: 2000
  chunk: {group: file, size: 7}
steps:
  cache:
    plugin: echo
    over: [file]
  write:
    plugin: echo
    over: [chunk]
    inputs: {files: cache}
  finalise:
    plugin: echo
    inputs: {chunks: write}
"#,
        4,
    );
    assert_eq!(out.seen.len(), 2000 + 286 + 1);
    let mut keys: Vec<&str> = out.seen.iter().map(|(t, _)| t.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), out.seen.len(), "a task ran twice");
    assert_eq!(out.output("finalise[]")["in"]["chunks"].as_array().unwrap().len(), 286);
}

/// Panics describing its output, or estimating, as its `args` say.
struct Broken;

impl Plugin for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn about(&self) -> &'static str {
        "test plugin that panics at plan time"
    }
    fn args(&self) -> &'static [ArgSpec] {
        const ARGS: &[ArgSpec] = &[ArgSpec::required("where", "output or estimate")];
        ARGS
    }
    fn output(
        &self,
        args: &Args,
        _inputs: &[runner::plugin::InputMeta],
    ) -> Result<runner::plugin::ValueMeta, runner::plugin::ArgError> {
        if args.str("where").unwrap() == "output" {
            panic!("no output for you");
        }
        Ok(runner::plugin::ValueMeta::None)
    }
    fn estimate(
        &self,
        args: &Args,
        _inputs: runner::plugin::InputsForEstimate<'_>,
        _output: &runner::plugin::ValueMeta,
    ) -> u64 {
        if args.str("where").unwrap() == "estimate" {
            panic!("no estimate either");
        }
        0
    }
    fn run(&self, _ctx: &TaskContext, _args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        Ok(Value::None)
    }
}

#[test]
fn a_plugin_panicking_at_plan_time_is_a_located_recipe_error() {
    let registry = Registry::new([Arc::new(Broken) as Arc<dyn Plugin>]);
    let options = CompileOptions { cycle: "C1".into(), ..CompileOptions::default() };
    let yaml = "recipe: broken\nsteps:\n  a:\n    plugin: broken\n    args: {where: output}\n  b:\n    plugin: broken\n    args: {where: estimate}\n";
    let error = Compiled::from_text(Path::new("broken.yaml"), yaml, &options, &registry).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("broken.yaml:3:3: plugin `broken` panicked describing the output of step `a`: no output for you"),
        "{text}"
    );
    assert!(
        text.contains("broken.yaml:6:3: plugin `broken` panicked estimating a task of step `b`: no estimate either"),
        "{text}"
    );
}

/// Fails its first `fail_first` attempts at each task (counted across attempts), sleeps
/// `sleep_ms`, reports its input missing for the keys listed in `missing`, and returns its key.
struct Flaky {
    attempts: Mutex<std::collections::HashMap<String, u32>>,
    /// What each task that succeeded returned.
    outputs: Arc<Mutex<std::collections::HashMap<String, Json>>>,
}

impl Plugin for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn about(&self) -> &'static str {
        "test plugin for retries, timeouts and missing inputs"
    }
    fn args(&self) -> &'static [ArgSpec] {
        const ARGS: &[ArgSpec] = &[
            ArgSpec::optional("fail_first", "0", "attempts that fail"),
            ArgSpec::optional("sleep_ms", "0", "how long an attempt takes"),
            ArgSpec::optional("missing", "[]", "keys whose input is missing"),
        ];
        ARGS
    }
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }
    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap();
            let n = attempts.entry(format!("{}[{}]", ctx.step(), ctx.key())).or_insert(0);
            *n += 1;
            *n
        };
        std::thread::sleep(std::time::Duration::from_millis(args.u64_or("sleep_ms", 0)?));
        let missing = args.get("missing").and_then(Json::as_array).cloned().unwrap_or_default();
        if missing.iter().any(|k| k.as_str() == Some(ctx.key())) {
            return Err(TaskError::missing(format!("no input file for {}", ctx.key())));
        }
        if u64::from(attempt) <= args.u64_or("fail_first", 0)? {
            return Err(TaskError::msg(format!("attempt {attempt} failed")));
        }
        let gathered: Vec<Json> = inputs
            .iter()
            .flat_map(|i| i.values())
            .map(|v| match v {
                Value::Json(j) => j.clone(),
                _ => Json::Null,
            })
            .collect();
        let out = json!({"key": ctx.key(), "attempt": attempt, "in": gathered});
        self.outputs.lock().unwrap().insert(format!("{}[{}]", ctx.step(), ctx.key()), out.clone());
        Ok(Value::Json(out))
    }
}

/// Compiles `yaml` with the flaky plugin, lets `edit` set step keys, runs it on 2 workers.
fn run_flaky(yaml: &str, edit: impl FnOnce(&mut Compiled)) -> RunReport {
    run_flaky_seeing(yaml, edit).0
}

/// What each skipped task was recorded with, by `step[key]`.
#[derive(Default)]
struct SkipReasons(Mutex<std::collections::BTreeMap<String, String>>);

impl TaskSink for SkipReasons {
    fn record(&self, task: &TaskReport<'_>) {
        if task.outcome == scheduler::Outcome::Skipped {
            let why = task.error.unwrap_or_default().to_string();
            self.0.lock().unwrap().insert(format!("{}[{}]", task.step, task.key), why);
        }
    }
}

/// [`run_flaky`], with what each task that succeeded returned.
fn run_flaky_seeing(
    yaml: &str,
    edit: impl FnOnce(&mut Compiled),
) -> (RunReport, std::collections::HashMap<String, Json>) {
    run_flaky_into(yaml, edit, None)
}

/// [`run_flaky_seeing`], each task reported to `sink` when one is given.
fn run_flaky_into(
    yaml: &str,
    edit: impl FnOnce(&mut Compiled),
    sink: Option<&dyn TaskSink>,
) -> (RunReport, std::collections::HashMap<String, Json>) {
    let outputs = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let flaky = Flaky { attempts: Mutex::default(), outputs: outputs.clone() };
    let registry = Registry::new([Arc::new(flaky) as Arc<dyn Plugin>]);
    let options = CompileOptions { cycle: "C1".into(), ..CompileOptions::default() };
    let mut compiled = Compiled::from_text(Path::new("flaky.yaml"), yaml, &options, &registry).unwrap();
    edit(&mut compiled);
    let dir = tempfile::tempdir().unwrap();
    let options = RunOptions::new(2, 1 << 30, dir.path().join("run"));
    let report =
        scheduler::run(&compiled.recipe, &compiled.graph, &compiled.plan, &options, &Progress::default(), sink);
    let outputs = outputs.lock().unwrap().clone();
    (report, outputs)
}

#[test]
fn retries_run_a_failed_task_again() {
    let yaml = "recipe: r\ndims:\n  i: 4\nsteps:\n  a:\n    plugin: flaky\n    over: [i]\n    args: {fail_first: 2}\n";
    let failed = run_flaky(yaml, |c| c.recipe.steps[0].retries = 1);
    assert_eq!(failed.total(|s| s.failed), 4, "one retry is not enough for two failures");
    assert!(failed.failures[0].error.contains("attempt 2 failed"), "{:?}", failed.failures[0]);
    let ok = run_flaky(yaml, |c| c.recipe.steps[0].retries = 2);
    assert_eq!((ok.total(|s| s.ok), ok.total(|s| s.failed)), (4, 0), "{:?}", ok.failures);
}

#[test]
fn an_in_process_task_past_its_timeout_fails_once_it_returns() {
    let yaml = "recipe: r\ndims:\n  i: 2\nsteps:\n  slow:\n    plugin: flaky\n    over: [i]\n    args: {sleep_ms: 300}\n  after:\n    plugin: flaky\n    over: [i]\n    inputs: {x: slow}\n";
    let report = run_flaky(yaml, |c| c.recipe.steps[0].timeout = Some(std::time::Duration::from_millis(100)));
    assert_eq!(report.total(|s| s.failed), 2);
    assert!(report.failures.iter().all(|f| f.error.starts_with("timed out: it ran 0.3 s")), "{:?}", report.failures);
    assert_eq!(report.total(|s| s.skipped), 2, "dependants of timed-out tasks are skipped");
}

#[test]
fn a_task_with_a_failed_and_a_missing_input_is_skipped_for_the_failure_whichever_came_first() {
    // 200 consumers of each: one failed or missing task can skip many at once.
    for (fail_ms, missing_ms) in [(0, 150), (150, 0)] {
        let yaml = format!(
            "recipe: r\ndims:\n  i: 200\nsteps:\n  fails:\n    plugin: flaky\n    args: {{fail_first: 9, sleep_ms: {fail_ms}}}\n  \
             missing:\n    plugin: flaky\n    args: {{missing: [\"\"], sleep_ms: {missing_ms}}}\n  both:\n    plugin: flaky\n    \
             over: [i]\n    inputs: {{a: fails, b: missing}}\n  only_missing:\n    plugin: flaky\n    over: [i]\n    \
             inputs: {{b: missing}}\n"
        );
        let sink = SkipReasons::default();
        let missing_skips = |c: &mut Compiled| c.recipe.steps[1].on_missing = runner::testing::recipe::OnMissing::Skip;
        let (report, _) = run_flaky_into(&yaml, missing_skips, Some(&sink));
        assert_eq!((report.failures.len(), report.missing.len()), (1, 1), "{:?} {:?}", report.failures, report.missing);
        assert_eq!((report.steps[2].skipped, report.steps[3].skipped), (200, 200));
        let reasons = sink.0.into_inner().unwrap();
        assert_eq!(reasons.len(), 1 + 400, "the task that found its input missing is skipped too");
        assert!(reasons["missing[]"].contains("no input file"), "{:?}", reasons["missing[]"]);
        for i in [0, 199] {
            let case = format!("failing after {fail_ms} ms, missing after {missing_ms} ms");
            assert_eq!(reasons[&format!("both[i={i}]")], "an input failed", "{case}");
            assert_eq!(reasons[&format!("only_missing[i={i}]")], "an input is missing", "{case}");
        }
    }
}

#[test]
fn on_missing_decides_what_a_missing_input_means() {
    let yaml = "recipe: r\ndims:\n  day: 6\n  chunk: {group: day, size: 3}\nsteps:\n  read:\n    plugin: flaky\n    over: [day]\n    \
                args: {missing: [\"day=1\", \"day=3\", \"day=4\", \"day=5\"]}\n  store:\n    plugin: flaky\n    over: [chunk]\n    \
                inputs: {days: read}\n  each:\n    plugin: flaky\n    over: [day]\n    inputs: {one: read}\n";
    use runner::testing::recipe::OnMissing;
    let error = run_flaky(yaml, |_| {});
    assert_eq!(error.total(|s| s.failed), 4, "on_missing: error (the default) fails the task");
    assert!(error.failures.iter().all(|f| f.error.contains("no input file")));

    let skip = run_flaky(yaml, |c| c.recipe.steps[0].on_missing = OnMissing::Skip);
    assert_eq!(skip.total(|s| s.failed), 0, "{:?}", skip.failures);
    assert_eq!(skip.missing.len(), 4, "the gaps are reported");
    assert_eq!(skip.missing[0].key, "day=1");
    // Skipped downstream: both chunks (each holds a missing day) and the 4 `each` tasks.
    assert_eq!(skip.total(|s| s.skipped), 4 + 2 + 4);

    let (ignore, outputs) = run_flaky_seeing(yaml, |c| c.recipe.steps[0].on_missing = OnMissing::Ignore);
    assert_eq!(ignore.total(|s| s.failed), 0, "{:?}", ignore.failures);
    // Chunk 0 gathers days 0 and 2 (day 1 dropped) and runs; chunk 1's days are all missing:
    // a gather left empty is skipped. `each` over a missing day is skipped.
    let store = &ignore.steps[1];
    assert_eq!((store.ok, store.skipped), (1, 1));
    let gathered: Vec<&Json> = outputs["store[chunk=0]"]["in"].as_array().unwrap().iter().map(|j| &j["key"]).collect();
    assert_eq!(gathered, [&json!("day=0"), &json!("day=2")], "the missing day is left out of the gather");
    let each = &ignore.steps[2];
    assert_eq!((each.ok, each.skipped), (2, 4));
}
