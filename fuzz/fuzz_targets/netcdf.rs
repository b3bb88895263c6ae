//! Fuzzes the netCDF reader of the standard plugins (`read_netcdf`) as the plugin calls it: the
//! bytes are written to a file, which is opened (`read::open`); then for each of its first
//! variables, what the plugin does at plan time (`output`: the variable looked up, its decoding
//! chosen, its shape; then `estimate`) and at run time (`read::read_within`: the values read
//! whole and decoded, with their metadata and coordinates), with and without `mask_and_scale`.
//! Errors are fine; a panic, an abort, a hang or an allocation beyond libFuzzer's limit is a
//! crash.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{Args, Host, InputsForEstimate, Plugin, TaskContext, ValueMeta};
use runner_std_plugins::netcdf::{ReadNetcdf, read};

/// One file per process, rewritten for every input (in memory when /dev/shm exists).
static FILE: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    dir.join(format!("runner-fuzz-netcdf-{}.nc", std::process::id()))
});

/// Variables read per input: enough for a data variable and its coordinates.
const VARIABLES: usize = 8;

/// The most a read may allocate here. A netCDF-4 file of a few hundred bytes may rightly
/// declare a variable of gigabytes (chunks never written read as the fill value), which `read`
/// reads on a machine with the memory for it; with this limit such a variable is refused as on
/// a small machine, and what the reader allocates beyond it is a bug libFuzzer's
/// `-rss_limit_mb` catches.
const MAX_BYTES: u64 = 64 << 20;

/// The engine's side of a task, as little of it as the reader uses.
struct FuzzHost;

impl Host for FuzzHost {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> {
        Ok(std::env::temp_dir())
    }

    fn will_allocate(&self, _bytes: u64) {}
}

fn args(variable: &str, mask_and_scale: bool) -> Args {
    let Json::Object(map) = json!({"path": &*FILE, "variable": variable, "mask_and_scale": mask_and_scale}) else {
        unreachable!("a JSON object literal")
    };
    Args::new(map)
}

fuzz_target!(|data: &[u8]| {
    if std::fs::write(&*FILE, data).is_err() {
        return;
    }
    let Ok(file) = read::open(&FILE) else { return };
    let Ok(variables) = file.variables() else { return };
    let names: Vec<String> = variables.iter().take(VARIABLES).map(|v| v.name().to_string()).collect();
    let host = FuzzHost;
    let ctx = TaskContext::new("fuzz", "", "", &[], 0, &host);
    for name in &names {
        for mask_and_scale in [true, false] {
            let args = args(name, mask_and_scale);
            let Ok(meta) = ReadNetcdf.output(&args, &[]) else { continue };
            ReadNetcdf.estimate(&args, InputsForEstimate::Plan(&[]), &meta);
            let read = read::read_within(&ctx, &FILE, name, mask_and_scale, MAX_BYTES);
            if let (ValueMeta::Array { dtype, shape }, Ok(array)) = (&meta, &read) {
                assert_eq!(array.shape(), shape.as_slice(), "variable `{name}` reads in the shape `output` said");
                assert_eq!(array.dtype(), *dtype, "variable `{name}` reads in the dtype `output` said");
            }
        }
    }
});
