//! The out-of-tree plugin example (plugins/example) builds as its own crate with a one-line
//! `main`, offers its plugin next to the standard ones, and runs a recipe that uses it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the example binary with the same cargo and profile as this test, next to `runner`.
fn build_example() -> PathBuf {
    let runner = Path::new(env!("CARGO_BIN_EXE_runner"));
    let bin_dir = runner.parent().expect("the runner binary lives in a directory");
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "--quiet", "-p", "runner-example-plugin", "--bin", "runner-example"]);
    if bin_dir.ends_with("release") {
        cargo.arg("--release");
    }
    let status = cargo.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("running cargo");
    assert!(status.success(), "building the example plugin failed");
    bin_dir.join("runner-example")
}

#[test]
fn out_of_tree_plugin_builds_and_runs() {
    let example = build_example();
    let listing = Command::new(&example).arg("plugins").output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("scale ") && listing.contains("factor"), "{listing}");
    assert!(listing.contains("nbhood"), "the standard plugins are offered too: {listing}");

    let work = tempfile::tempdir().unwrap();
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/example/recipe.yaml");
    let out = Command::new(&example).arg("run").arg(&recipe).current_dir(work.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let written = std::fs::read(work.path().join("out/scaled/member1.npy")).unwrap();
    // 20×30 f32 after a 128-byte header; scaled rain is ≥ 0 and somewhere positive.
    assert_eq!(written.len(), 128 + 20 * 30 * 4);
    let values: Vec<f32> = written[128..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert!(values.iter().all(|v| *v >= 0.0) && values.iter().any(|v| *v > 0.0));
}
