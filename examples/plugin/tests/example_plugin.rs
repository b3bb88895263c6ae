//! The out-of-tree plugin example builds as its own crate with a one-line `main`, offers its
//! plugin next to the standard ones, and runs a recipe that uses it. (The binary is the one
//! `cargo test` builds for this crate, with the workspace's features: building it here with
//! `cargo build -p` would compile the dependencies again under other features.)

use std::path::Path;
use std::process::Command;

#[test]
fn out_of_tree_plugin_builds_and_runs() {
    let example = Path::new(env!("CARGO_BIN_EXE_runner-example"));
    let listing = Command::new(example).arg("plugins").output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("scale ") && listing.contains("factor"), "{listing}");
    assert!(listing.contains("nbhood"), "the standard plugins are offered too: {listing}");

    let work = tempfile::tempdir().unwrap();
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipe.yaml");
    let out = Command::new(example).arg("run").arg(&recipe).current_dir(work.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let written = std::fs::read(work.path().join("out/scaled/member1.npy")).unwrap();
    // 20×30 f32 after a 128-byte header; scaled rain is ≥ 0 and somewhere positive.
    assert_eq!(written.len(), 128 + 20 * 30 * 4);
    let values: Vec<f32> = written[128..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert!(values.iter().all(|v| *v >= 0.0) && values.iter().any(|v| *v > 0.0));
}
