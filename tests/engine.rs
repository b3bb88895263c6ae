//! The engine end to end with plugins defined here: input matching (match, gather, group-gather,
//! broadcast, select, list form), values passed in order, failures that skip only dependants,
//! and panics that fail only their task.

use std::path::Path;
use std::sync::{Arc, Mutex};

use runner::Compiled;
use runner::plugin::{ArgSpec, Args, Inputs, Plugin, TaskContext, TaskError, Value};
use runner::recipe::CompileOptions;
use runner::registry::Registry;
use runner::scheduler::{self, Progress, RunOptions, RunReport};
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
    let options = CompileOptions { cycle: "C1".into(), set: vec![] };
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
    let options = CompileOptions { cycle: "C1".into(), set: vec![] };
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
