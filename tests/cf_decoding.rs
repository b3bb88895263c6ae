//! CF decoding against xarray: a netCDF file written by netCDF4-python with `_Unsigned`,
//! packing, fill values and `valid_*` attributes, read by `read_netcdf` and written as `.npy`,
//! must hold exactly what `xarray.open_dataset` decodes. Needs `python3` with numpy, netCDF4 and
//! xarray (CI installs them); fails saying so without them.

use std::path::Path;
use std::process::{Command, Output};

mod common;

fn python(args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/cf_decoding.py");
    let probe = Command::new("python3").args(["-c", "import numpy, netCDF4, xarray"]).output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "this test needs Python 3 with numpy, netCDF4 and xarray: pip install numpy netCDF4 xarray"
    );
    Command::new("python3").arg(script).args(args).output().expect("running python3")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn unsigned_packed_and_valid_range_variables_read_as_xarray_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let written = python(&["write", dir_arg]);
    assert!(written.status.success(), "writing with netCDF4-python: {}", text(&written.stderr));
    let names: Vec<String> = serde_json::from_slice(&written.stdout).unwrap();
    let mut recipe = String::from("recipe: cf\nsteps:\n");
    for name in &names {
        recipe.push_str(&format!(
            "  read_{name}:\n    plugin: read_netcdf\n    args: {{path: cf.nc, variable: {name}}}\n  \
             save_{name}:\n    plugin: write_npy\n    inputs: [read_{name}]\n    args: {{path: out/{name}.npy}}\n"
        ));
    }
    std::fs::write(dir.path().join("cf.yaml"), recipe).unwrap();
    let run = common::runner(dir.path(), &["run", "cf.yaml", "--cycle", "C1", "--no-record", "--db", "none.db"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let checked = python(&["check", dir_arg]);
    assert!(checked.status.success(), "{}{}", text(&checked.stdout), text(&checked.stderr));
}
