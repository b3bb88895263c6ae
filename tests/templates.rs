//! Templates for IMPROVER-style suites through the command line: a lookup per lead, validity
//! times and leads as ISO 8601 durations in file names, a date-time dim relative to the cycle;
//! and a misused lookup refused before anything runs, at its line and column.

mod common;

use common::{assert_ok, run_measured_in};

const SUITE: &str = r#"recipe: improver-templates
vars:
  radii: {1: 10000, 2: 20000, 3: 30000}
dims:
  lead: [1, 2, 3]
  valid: {start: "{cycle}", step: 1h, count: 2}
steps:
  nbhood:
    plugin: exec
    over: [lead]
    args:
      command: [sh, -c, 'echo "radius={radii[lead]}" > "$0"', "{output}"]
      output: "out/{cycle + lead h:%Y%m%dT%H%MZ}-{lead h:PT%4HH%MM}-air_temperature.txt"
  stamp:
    plugin: exec
    over: [valid]
    args:
      command: [sh, -c, 'echo "{valid - cycle:PT%4HH%MM} {valid}" > "$0"', "{output}"]
      output: "out/valid-{valid:%Y%m%dT%H%MZ}.txt"
"#;

#[test]
fn an_improver_style_suite_names_its_files_by_validity_time_and_lead() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), SUITE).unwrap();
    let run = run_measured_in(dir.path(), "r.yaml", &["--cycle", "2026-12-01T00Z", "--workers", "2"]);
    assert_ok(&run);
    assert_eq!(run.summary["tasks_ok"], 5, "{}", run.stderr);
    let read = |name: &str| {
        std::fs::read_to_string(dir.path().join("out").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert_eq!(read("20261201T0100Z-PT0001H00M-air_temperature.txt"), "radius=10000\n");
    assert_eq!(read("20261201T0300Z-PT0003H00M-air_temperature.txt"), "radius=30000\n");
    assert_eq!(read("valid-20261201T0000Z.txt"), "PT0000H00M 2026-12-01T00:00Z\n");
    assert_eq!(read("valid-20261201T0100Z.txt"), "PT0001H00M 2026-12-01T01:00Z\n");
    // The next cycle's files follow the cycle.
    let run = run_measured_in(dir.path(), "r.yaml", &["--cycle", "2026-12-01T06Z"]);
    assert_ok(&run);
    assert_eq!(read("20261201T0800Z-PT0002H00M-air_temperature.txt"), "radius=20000\n");
    assert_eq!(read("valid-20261201T0700Z.txt"), "PT0001H00M 2026-12-01T07:00Z\n");
}

#[test]
fn a_lookup_without_an_entry_for_a_lead_is_refused_where_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), SUITE.replace(", 3: 30000}", "}")).unwrap();
    let run = run_measured_in(dir.path(), "r.yaml", &["--cycle", "2026-12-01T00Z"]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "r.yaml:12:16: arg `command` of step `nbhood`: `{radii[lead]}`: var `radii` has no entry for lead `3`; \
             its keys are: 1, 2; expected a key for every value of dim `lead` (1, 2, 3)"
        ),
        "{}",
        run.stderr
    );
    assert!(!dir.path().join("out").exists(), "nothing ran");
    // A cycle that is not a date-time cannot start a date-time dim.
    let run = run_measured_in(dir.path(), "r.yaml", &["--cycle", "C1"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        run.stderr.contains("r.yaml:6:18: `start` of dim `valid` is \"{cycle}\", which is \"C1\""),
        "{}",
        run.stderr
    );
}

/// Values holding what looks like `exec`'s own references: each must reach the command as text.
const ONCE: &str = r#"recipe: expanded-once
vars:
  note: "plain"
  tags: {0: "{input.x}", 1: "a}b{"}
dims:
  i: 2
steps:
  make:
    plugin: exec
    args:
      command: [sh, -c, 'printf %s "$1" > "$0"', "{output}", "{note}"]
      output: "out/note.txt"
  each:
    plugin: exec
    over: [i]
    inputs: {x: make}
    args:
      command: [sh, -c, 'printf "%s|%s|%s|%s" "$1" "$2" "$3" "$NOTE" > "$0"', "{output}", "t={tags[i]}", "{{output}}", "{input.x}"]
      output: "out/each_{i}.txt"
      env: {NOTE: "{note}"}
"#;

#[test]
fn values_are_expanded_once_and_never_read_as_a_command_s_references() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), ONCE).unwrap();
    let run = run_measured_in(dir.path(), "r.yaml", &["--set", "note=\"{output}\""]);
    assert_ok(&run);
    let read = |name: &str| {
        std::fs::read_to_string(dir.path().join("out").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert_eq!(read("note.txt"), "{output}", "a --set value holding `{{output}}` is that text");
    assert_eq!(read("each_0.txt"), "t={input.x}|{output}|out/note.txt|{output}", "a lookup entry, `{{{{`, env");
    assert_eq!(read("each_1.txt"), "t=a}b{|{output}|out/note.txt|{output}", "lone braces in a value");
}
