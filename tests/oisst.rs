//! The OISST dataset build end to end through `runner run`: synthetic inputs made by a recipe
//! (`synth_sst` + `write_netcdf`) or by netCDF4-python, read by `read_netcdf`, stacked into a
//! Zarr store by `zarr_create` → `write_zarr` → `zarr_finalize`, and checked with xarray
//! (`open_zarr` against `open_mfdataset` of the inputs). Also: a layout whose tasks would share
//! a chunk is a recipe error; a build killed mid-way leaves no torn chunk and a rerun gives the
//! bytes of an uninterrupted build; a missing input.
//!
//! The recipes here run over integer days; `recipes/oisst.yaml` says the same over a date dim.
//! Python checks need `numpy netCDF4 xarray zarr dask` (CI installs them) and fail, saying so,
//! when they are missing.

mod common;

use common::runner;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// Runs `tests/python/oisst_check.py`, failing clearly when the Python stack is missing.
fn python(args: &[&str]) -> Output {
    let probe = Command::new("python3").args(["-c", "import numpy, netCDF4, xarray, zarr, dask"]).output();
    match probe {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "these tests need Python 3 with numpy, netCDF4, xarray, zarr and dask: pip install numpy netCDF4 xarray zarr dask"
        ),
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/oisst_check.py");
    Command::new("python3").arg(script).args(args).output().expect("running python3")
}

fn inputs_recipe(days: u64, ny: u64, nx: u64) -> String {
    format!(
        r#"recipe: oisst-inputs-test
dims:
  day: {{start: 0, stop: {last}}}
  variable: [sst, anom, err, ice]
vars: {{input_dir: input, ny: {ny}, nx: {nx}}}
steps:
  field:
    plugin: synth_sst
    over: [day, variable]
    args: {{variable: "{{variable}}", day: "{{day}}", ny: "{{ny}}", nx: "{{nx}}"}}
  file:
    plugin: write_netcdf
    over: [day]
    inputs: {{fields: field}}
    args: {{path: "{{input_dir}}/oisst-avhrr-v02r01.{{day:05}}.nc", deflate: 1}}
"#,
        last = days - 1
    )
}

/// The OISST build over integer days; `extra` goes into the read step (e.g. `on_missing`).
fn build_recipe(days: u64, chunk: u64, create_chunk: u64, format: u64, extra: &str) -> String {
    format!(
        r#"recipe: oisst-test
dims:
  day: {{start: 0, stop: {last}}}
  chunk: {{group: day, size: {chunk}}}
vars: {{input_dir: input, store: out/oisst.zarr}}
steps:
  read:
    plugin: read_netcdf
    over: [day]
    args: {{path: "{{input_dir}}/oisst-avhrr-v02r01.{{day:05}}.nc", variable: sst}}
{extra}
  prepare_target:
    plugin: zarr_create
    inputs: {{first: {{step: read, select: {{day: 0}}}}}}
    args: {{store: "{{store}}", concat_dim: time, chunk: {create_chunk}, zarr_format: {format}}}
  store_chunk:
    plugin: write_zarr
    over: [chunk]
    inputs: {{fields: read, store: prepare_target}}
  finalize_target:
    plugin: zarr_finalize
    inputs: {{written: store_chunk, store: prepare_target}}
"#,
        last = days - 1
    )
}

fn make_inputs(dir: &Path, days: u64, ny: u64, nx: u64) {
    std::fs::write(dir.join("inputs.yaml"), inputs_recipe(days, ny, nx)).unwrap();
    ok(&runner(dir, &["run", "inputs.yaml", "--no-record"]), "making the inputs");
}

fn build(dir: &Path, recipe: &str, extra_args: &[&str]) -> Output {
    std::fs::write(dir.join("build.yaml"), recipe).unwrap();
    let mut args = vec!["run", "build.yaml", "--no-record"];
    args.extend_from_slice(extra_args);
    runner(dir, &args)
}

fn compare(dir: &Path) -> String {
    let store = dir.join("out/oisst.zarr");
    let out = python(&["compare", store.to_str().unwrap(), dir.join("input").to_str().unwrap(), "sst"]);
    ok(&out, "comparing the store with xarray.open_mfdataset of the inputs");
    text(&out.stdout)
}

#[test]
fn the_built_store_is_what_xarray_makes_of_the_inputs_in_v3_and_v2() {
    let dir = tempfile::tempdir().unwrap();
    // 23 days: the last chunk holds 3.
    make_inputs(dir.path(), 23, 18, 36);
    for format in [3, 2] {
        ok(&build(dir.path(), &build_recipe(23, 5, 5, format, ""), &[]), "the build");
        let summary = compare(dir.path());
        assert!(summary.contains("\"shape\": [23, 1, 18, 36]"), "{summary}");
        assert!(summary.contains("\"chunks\": [5, 1, 18, 36]"), "{summary}");
        assert!(summary.contains("1981-09-01T12:00"), "{summary}");
        let consolidated = match format {
            3 => std::fs::read_to_string(dir.path().join("out/oisst.zarr/zarr.json")).unwrap(),
            _ => std::fs::read_to_string(dir.path().join("out/oisst.zarr/.zmetadata")).unwrap(),
        };
        for name in ["sst", "time", "lat", "lon", "zlev"] {
            assert!(consolidated.contains(&format!("\"{name}")), "{name} missing from the consolidated metadata");
        }
        assert!(!consolidated.contains("_zarrs"), "zarrs' own metadata leaked into the store");
        let chunks = python(&["chunks", dir.path().join("out/oisst.zarr").to_str().unwrap(), "sst"]);
        ok(&chunks, "checking the chunks");
        assert_eq!(text(&chunks.stdout).trim(), "5");
    }
}

#[test]
fn files_written_by_netcdf4_python_build_the_store_xarray_makes_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    ok(&python(&["write_inputs", input.to_str().unwrap(), "12", "10", "20"]), "writing inputs with netCDF4-python");
    ok(&build(dir.path(), &build_recipe(12, 5, 5, 3, ""), &[]), "the build");
    let summary = compare(dir.path());
    assert!(summary.contains("\"shape\": [12, 1, 10, 20]"), "{summary}");

    // A misspelt variable: the message names the files (one line for the twelve alike), and
    // what they hold.
    let recipe = build_recipe(12, 5, 5, 3, "").replace("variable: sst", "variable: sstt");
    let out = build(dir.path(), &recipe, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(
        all.contains(
            "read[day=0..11] (12 tasks): no variable `sstt` in input/oisst-avhrr-v02r01.000{00..11}.nc; \
             the file has: anom, err, ice, sst (did you mean `sst`?)"
        ),
        "{all}"
    );
}

#[test]
fn a_layout_whose_tasks_would_share_a_chunk_is_a_recipe_error() {
    let dir = tempfile::tempdir().unwrap();
    // Blocks of 5 days but chunks of 10: two tasks would write each chunk.
    let out = build(dir.path(), &build_recipe(20, 5, 10, 3, ""), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("build.yaml:16:3: plugin `write_zarr` rejects the layout of step `store_chunk`: each task of step `store_chunk` writes a block of 5 `day` values, but step `prepare_target` makes chunks of 10: several tasks would write each chunk"),
        "{stderr}"
    );
    assert!(!dir.path().join("out").exists(), "nothing may run for a rejected recipe");

    // One task per day into chunks of 5.
    let per_day = build_recipe(20, 5, 5, 3, "").replace("over: [chunk]", "over: [day]");
    let out = build(dir.path(), &per_day, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("runs one task per `day` value, but step `prepare_target` makes chunks of 5 values: 5 tasks would write each chunk"), "{}", text(&out.stderr));
}

#[test]
fn a_missing_input_fails_its_read_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    make_inputs(dir.path(), 10, 6, 12);
    std::fs::remove_file(dir.path().join("input/oisst-avhrr-v02r01.00007.nc")).unwrap();
    // `on_missing: error` is the default (the key itself is not parsed yet in this branch).
    let out = build(dir.path(), &build_recipe(10, 5, 5, 3, ""), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(all.contains("no file input/oisst-avhrr-v02r01.00007.nc"), "{all}");
}

/// The 14k-file build with 3 inputs missing finishes, the gaps reported and filled with NaN.
/// Needs the engine's `on_missing: ignore` (SPEC, "Step keys"): the read plugin already reports
/// `FailureKind::MissingInput`.
#[test]
fn a_build_with_three_missing_inputs_finishes_with_the_gaps_as_nan() {
    let dir = tempfile::tempdir().unwrap();
    let days = 14_006;
    make_inputs(dir.path(), days, 4, 8);
    let missing = [17u64, 5_000, 14_005];
    for day in missing {
        std::fs::remove_file(dir.path().join(format!("input/oisst-avhrr-v02r01.{day:05}.nc"))).unwrap();
    }
    let out = build(dir.path(), &build_recipe(days, 5, 5, 3, "    on_missing: ignore"), &["--summary", "s.json"]);
    ok(&out, "the build with missing inputs");
    let summary = std::fs::read_to_string(dir.path().join("s.json")).unwrap();
    assert!(summary.contains("\"status\": \"ok\"") || summary.contains("\"status\":\"ok\""), "{summary}");
    // Every present day is what xarray reads from its file; the missing ones are NaN, and the
    // last day being missing shortens the store by one.
    let check = format!(
        "import xarray as xr, numpy as np\nds = xr.open_zarr('out/oisst.zarr')\nassert ds.sst.shape[0] == {days} - 1, ds.sst.shape\nfor d in [17, 5000]:\n    assert np.isnan(ds.sst[d].values).all(), d\nassert not np.isnan(ds.sst[18].values).all()\n"
    );
    let out = Command::new("python3").args(["-c", &check]).current_dir(dir.path()).output().unwrap();
    ok(&out, "checking the gaps");
}

/// Every file under `root` by relative path, with its bytes.
fn tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn a_build_killed_mid_way_leaves_no_torn_chunk_and_a_rerun_gives_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let days = 400;
    make_inputs(dir.path(), days, 180, 360);
    let recipe = build_recipe(days, 5, 5, 3, "");
    std::fs::write(dir.path().join("build.yaml"), &recipe).unwrap();

    // The reference: an uninterrupted build, moved aside.
    ok(&build(dir.path(), &recipe, &["--workers", "1"]), "the uninterrupted build");
    let reference = tree(&dir.path().join("out/oisst.zarr"));
    std::fs::remove_dir_all(dir.path().join("out")).unwrap();

    // Killed once some chunks are written, before the end.
    let mut child = common::runner_command(dir.path(), &[])
        .args(["run", "build.yaml", "--no-record", "--workers", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let chunks = dir.path().join("out/oisst.zarr/sst/c");
    let started = Instant::now();
    loop {
        let written = std::fs::read_dir(&chunks).map(|d| d.count()).unwrap_or(0);
        if written >= 3 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "no chunk was written in 2 minutes");
        assert!(child.try_wait().unwrap().is_none(), "the build ended before it could be killed");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let root = std::fs::read_to_string(dir.path().join("out/oisst.zarr/zarr.json")).unwrap();
    assert!(!root.contains("consolidated_metadata"), "the build had finished before the kill");
    let check = python(&["chunks", dir.path().join("out/oisst.zarr").to_str().unwrap(), "sst"]);
    ok(&check, "checking the chunks the killed build left");

    ok(&build(dir.path(), &recipe, &["--workers", "2"]), "the rerun");
    let rerun = tree(&dir.path().join("out/oisst.zarr"));
    assert_eq!(rerun.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>());
    for (path, bytes) in &reference {
        assert!(rerun[path] == *bytes, "{} differs from the uninterrupted build's", path.display());
    }
}
