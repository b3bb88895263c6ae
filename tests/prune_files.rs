//! `runner prune` removes, beside the runs it deletes, the files of the cycles no run is left
//! of: their commands' logs (`runner-logs/`) and kept values (`runner-cache/`).

mod common;

use common::runner;
use std::process::Output;

const RECIPE: &str = r#"
recipe: pruned
steps:
  field:
    plugin: synth
    args: {ny: 8, nx: 8, wet_fraction: 0.3}
    cache: true
  say:
    plugin: exec
    args:
      command: [echo, hello]
"#;

fn assert_ok(out: &Output) {
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn pruning_the_last_run_of_a_cycle_removes_its_logs_and_kept_values() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), RECIPE).unwrap();
    for cycle in ["2026-12-01T00Z", "2026-12-01T06Z"] {
        assert_ok(&runner(dir.path(), &["run", "r.yaml", "--cycle", cycle]));
        assert!(dir.path().join(format!("runner-logs/pruned/{cycle}/say")).is_dir(), "{cycle}: a log");
        assert!(dir.path().join(format!("runner-cache/pruned/{cycle}/field")).is_dir(), "{cycle}: a kept value");
    }
    let out = runner(dir.path(), &["prune", "--keep", "1"]);
    assert_ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("removed 2 folders of logs and kept values"), "{said}");
    for kind in ["runner-logs", "runner-cache"] {
        assert!(!dir.path().join(format!("{kind}/pruned/2026-12-01T00Z")).exists(), "{kind} of the pruned cycle");
        assert!(dir.path().join(format!("{kind}/pruned/2026-12-01T06Z")).is_dir(), "{kind} of the kept cycle");
    }
}
