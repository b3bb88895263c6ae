//! The standard plugins through the public API only, as the engine sees them: the registry's
//! names and argument lists (which are contract), and a precipitation pipeline end to end.

use std::path::PathBuf;
use std::sync::Arc;

use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{
    Args, DType, DimValue, Host, Input, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, Value, ValueMeta,
};

struct TestHost(tempfile::TempDir);

impl Host for TestHost {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        Ok(self.0.path().to_path_buf())
    }

    fn will_allocate(&self, _bytes: u64) {}
}

fn plugin(name: &str) -> Arc<dyn Plugin> {
    runner_std_plugins::all().into_iter().find(|p| p.name() == name).unwrap_or_else(|| panic!("no plugin `{name}`"))
}

fn args(json: Json) -> Args {
    Args::new(json.as_object().unwrap().clone())
}

/// Checks, plans and runs one task of `name` with single-valued inputs, as the engine would.
fn run_task(name: &str, arg_json: Json, inputs: &[(&str, bool, Vec<Arc<Value>>)]) -> Value {
    let plugin = plugin(name);
    let args = args(arg_json);
    plugin.check(&args).unwrap();
    let metas: Vec<InputMeta> = inputs
        .iter()
        .map(|(name, gathered, values)| InputMeta {
            name: name.to_string(),
            gathered: gathered.then_some(values.len()),
            item: values[0].meta(),
        })
        .collect();
    let planned = plugin.output(&args, &metas).unwrap();
    let list: Vec<Input<'_>> =
        inputs.iter().map(|(name, gathered, values)| Input::new(name, *gathered, values)).collect();
    let inputs = Inputs::new(&list);
    let estimate = plugin.estimate(&args, InputsForEstimate::Dispatch(inputs), &planned);
    let host = TestHost(tempfile::tempdir().unwrap());
    let index = [("lead", DimValue::Int(3))];
    let ctx = TaskContext::new(name, "lead=3", "test", &index, 0, &host);
    let value = plugin.run(&ctx, &args, &inputs).unwrap();
    if planned != ValueMeta::Unknown {
        assert_eq!(value.meta(), planned, "{name}: output differs from its plan");
    }
    assert!(estimate >= value.buffer_bytes(), "{name}: estimate below its output");
    value
}

/// An argument's name and its default (`None` when required).
type ArgDescription = (String, Option<String>);

#[test]
fn registry_holds_the_contracted_plugins_and_arguments() {
    let mut described: Vec<(String, Vec<ArgDescription>)> = Vec::new();
    for plugin in runner_std_plugins::all() {
        assert!(!plugin.about().is_empty() && !plugin.about().contains('\n'), "{}", plugin.name());
        for spec in plugin.args() {
            assert!(!spec.about.is_empty(), "{}.{}", plugin.name(), spec.name);
        }
        let args = plugin.args().iter().map(|a| (a.name.to_string(), a.default.map(str::to_string))).collect();
        described.push((plugin.name().to_string(), args));
    }
    let required = |name: &str| (name.to_string(), None);
    let optional = |name: &str, default: &str| (name.to_string(), Some(default.to_string()));
    let expected = vec![
        ("noop".to_string(), vec![]),
        (
            "alloc".into(),
            vec![
                required("bytes"),
                optional("hold_ms", "0"),
                optional("output_bytes", "0"),
                optional("estimate", "bytes + output_bytes"),
                optional("announce", "true"),
            ],
        ),
        ("synth".into(), vec![required("ny"), required("nx"), required("wet_fraction"), optional("seed", "0")]),
        (
            "synth_sst".into(),
            vec![
                required("variable"),
                required("day"),
                optional("ny", "720"),
                optional("nx", "1440"),
                optional("seed", "0"),
            ],
        ),
        ("threshold".into(), vec![required("thresholds"), optional("fuzzy_factor", "none")]),
        ("nbhood".into(), vec![required("radius"), optional("shape", "square")]),
        ("mean".into(), vec![]),
        ("read_npy".into(), vec![required("path")]),
        ("write_npy".into(), vec![required("path")]),
        (
            "exec".into(),
            vec![required("command"), optional("output", "none"), optional("env", "{}"), optional("reads", "[]")],
        ),
        (
            "python".into(),
            vec![
                required("call"),
                optional("init", "none"),
                optional("args", "the inputs in order"),
                optional("kwargs", "{}"),
                optional("python", "$RUNNER_PYTHON or python3"),
                optional("pythonpath", "[]"),
                optional("env", "{}"),
                optional("output", "none"),
                optional("isolate", "false"),
                optional("fork", "true"),
                optional("max_resident", "none"),
            ],
        ),
        ("read_netcdf".into(), vec![required("path"), required("variable"), optional("mask_and_scale", "true")]),
        (
            "write_netcdf".into(),
            vec![
                required("path"),
                optional("variable", "the input's `variable` attribute"),
                optional("deflate", "4"),
                optional("shuffle", "true"),
                optional("chunks", "1 per leading dim, whole last two dims"),
                optional("pack", "true"),
            ],
        ),
        (
            "zarr_create".into(),
            vec![
                required("store"),
                optional("array", "the input's `variable` attribute"),
                optional("concat_dim", "the input's first dim"),
                required("chunk"),
                optional("zarr_format", "3"),
                optional("level", "1"),
                optional("coord_step", "1"),
            ],
        ),
        ("write_zarr".into(), vec![optional("block", "the step's only dim")]),
        ("zarr_finalize".into(), vec![]),
    ];
    assert_eq!(described, expected);
}

#[test]
fn precipitation_pipeline_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<Arc<Value>> = (0..3)
        .map(|member| {
            let field = run_task(
                "synth",
                json!({"ny": 60, "nx": 80, "wet_fraction": "0.3", "seed": format!("c/{member}/3")}),
                &[],
            );
            let field = vec![Arc::new(field)];
            let exceed = run_task(
                "threshold",
                json!({"thresholds": [0.5, 2.0], "fuzzy_factor": 0.8}),
                &[("field", false, field)],
            );
            let smooth = run_task(
                "nbhood",
                json!({"radius": 3, "shape": "circle"}),
                &[("field", false, vec![Arc::new(exceed)])],
            );
            Arc::new(smooth)
        })
        .collect();
    let probability = run_task("mean", json!({}), &[("members", true, members)]);
    let array = probability.as_array().unwrap();
    assert_eq!((array.dtype(), array.shape()), (DType::F32, &[2, 60, 80][..]));
    let view = array.view::<f32>().unwrap();
    assert!(view.iter().all(|&p| (0.0..=1.0).contains(&p)));
    // Probabilities of exceeding the higher threshold are nowhere larger.
    for y in 0..60 {
        for x in 0..80 {
            assert!(view[[1, y, x]] <= view[[0, y, x]] + 1e-6);
        }
    }
    assert!(view.iter().any(|&p| p > 0.0) && view.iter().any(|&p| p == 0.0));

    let path = dir.path().join("out/prob_T003.npy");
    let written = run_task("write_npy", json!({"path": path}), &[("array", false, vec![Arc::new(probability)])]);
    assert!(matches!(&written, Value::Path(p) if *p == path));
    let read = run_task("read_npy", json!({"path": path}), &[]);
    let original = std::fs::read(&path).unwrap();
    assert_eq!(read.as_array().unwrap().bytes(), &original[original.len() - 2 * 60 * 80 * 4..]);

    let held = run_task("alloc", json!({"bytes": "2MiB", "output_bytes": 16}), &[]);
    assert_eq!(held.as_bytes().unwrap(), runner_std_plugins::alloc::alloc_pattern("lead=3", 16).as_slice());
    assert!(matches!(run_task("noop", json!({}), &[]), Value::None));
}
