//! Fuzzes the Zarr metadata the standard plugins read back from the store they build: the
//! documents of a store (`zarr.json` for v3; `.zgroup`, `.zattrs`, `.zarray`, `.zmetadata` for
//! v2; of the root and of the arrays `sst`, `time`, `lat`, `lon`) are written as the input says,
//! then `write_zarr` writes its chunk into the store (it opens the data array as its metadata
//! says and grows it) and `zarr_finalize` finishes it (the concat coordinate written, the data
//! array opened, resized and its metadata rewritten, the metadata consolidated from every
//! document), both with the description a real `zarr_create` made of that store. Errors are
//! fine; a panic, an abort, a hang or memory beyond libFuzzer's limit is a crash.
//!
//! The input is text: a first line `v2` for a v2 store (anything else: v3), then documents, each
//! after a line `=== KEY` (`=== sst/zarr.json`); a key outside those above is skipped.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{Args, Array, DimValue, Host, Input, Inputs, Plugin, TaskContext, Value};
use runner_std_plugins::zarr::{WriteZarr, ZarrCreate, ZarrFinalize};

/// A folder per process (in memory when /dev/shm exists) holding the store.
static DIR: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    dir.join(format!("runner-fuzz-zarr-{}", std::process::id()))
});

static STORE: LazyLock<PathBuf> = LazyLock::new(|| DIR.join("s.zarr"));

/// `zarr_create`'s description of the store, v3 and v2, made once by the plugin itself.
static SPECS: LazyLock<[Arc<Value>; 2]> = LazyLock::new(|| [Arc::new(create(3)), Arc::new(create(2))]);

const ARRAYS: [&str; 4] = ["sst", "time", "lat", "lon"];
const DOCS: [&str; 5] = ["zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"];

struct FuzzHost;

impl Host for FuzzHost {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        Ok(DIR.clone())
    }

    fn will_allocate(&self, _bytes: u64) {}
}

/// A 2 × 3 field on day `day`, as `read_netcdf` describes one.
fn field(day: i64) -> Value {
    let mut a = Array::from_vec(vec![1, 2, 3], vec![day as f32; 6]).expect("a 1 × 2 × 3 array");
    let attrs = a.attrs_mut();
    attrs.insert("variable".into(), json!("sst"));
    attrs.insert("dims".into(), json!(["time", "lat", "lon"]));
    attrs.insert("attrs".into(), json!({"units": "Celsius"}));
    attrs.insert("global_attrs".into(), json!({"title": "fuzz"}));
    attrs.insert(
        "coords".into(),
        json!({
            "time": {"dims": ["time"], "dtype": "f32", "values": [1339 + day], "attrs": {"units": "days since 1978-01-01 12:00:00"}},
            "lat": {"dims": ["lat"], "dtype": "f32", "values": [-1.0, 1.0], "attrs": {"units": "degrees_north"}},
            "lon": {"dims": ["lon"], "dtype": "f64", "values": [0.0, 1.0], "attrs": {}}
        }),
    );
    Value::Array(a)
}

fn args(doc: Json) -> Args {
    let Json::Object(map) = doc else { unreachable!("a JSON object literal") };
    Args::new(map)
}

/// Runs `plugin` as a task over `index`, with `inputs` (name, gathered, values).
fn run(
    plugin: &dyn Plugin,
    a: Json,
    index: &[(&str, DimValue)],
    inputs: &[(&str, bool, Vec<Arc<Value>>)],
) -> Option<Value> {
    let host = FuzzHost;
    let ctx = TaskContext::new("fuzz", "", "cycle", index, 0, &host);
    let list: Vec<Input<'_>> = inputs.iter().map(|(n, g, v)| Input::new(n, *g, v)).collect();
    plugin.run(&ctx, &args(a), &Inputs::new(&list)).ok()
}

fn create(format: u64) -> Value {
    let _ = std::fs::remove_dir_all(&*DIR);
    let a = json!({"store": &*STORE, "chunk": 2, "concat_dim": "time", "zarr_format": format});
    let spec =
        run(&ZarrCreate, a, &[], &[("first", false, vec![Arc::new(field(0))])]).expect("zarr_create makes a store");
    let _ = std::fs::remove_dir_all(&*DIR);
    spec
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let spec = SPECS[usize::from(first.trim() == "v2")].clone();
    let _ = std::fs::remove_dir_all(&*DIR);
    if std::fs::create_dir_all(&*STORE).is_err() {
        return;
    }
    for doc in rest.split("=== ").skip(1) {
        let (key, body) = doc.split_once('\n').unwrap_or((doc, ""));
        let (array, name) = key.trim().rsplit_once('/').unwrap_or(("", key.trim()));
        if !DOCS.contains(&name) || !(array.is_empty() || ARRAYS.contains(&array)) {
            continue;
        }
        let _ = std::fs::create_dir_all(STORE.join(array));
        let _ = std::fs::write(STORE.join(array).join(name), body);
    }
    let fields = vec![Arc::new(field(0)), Arc::new(field(1))];
    let written = run(
        &WriteZarr,
        json!({}),
        &[("chunk", DimValue::Int(0))],
        &[("fields", true, fields), ("store", false, vec![spec.clone()])],
    )
    .unwrap_or_else(|| {
        Value::Json(json!({"zarr_written": "sst", "block": 0, "positions": [0, 1], "coords": [1339.0, 1340.0]}))
    });
    let _ =
        run(&ZarrFinalize, json!({}), &[], &[("written", true, vec![Arc::new(written)]), ("store", false, vec![spec])]);
});
