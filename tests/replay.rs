//! CI replays recorded weather: 24 cycles of the IMPROVER-like recipe against one store, under
//! a budget tight enough that admission matters. It fails if any task fails, if peak RSS
//! exceeds budget + 5% + 64 MiB, or if, after the 3rd cycle, more than 2% of tasks are
//! under-estimated or the median slack exceeds 25%.

mod common;

use std::path::Path;

use serde_json::Value as Json;

#[test]
fn the_weather_replay_converges_within_budget() {
    let dir = tempfile::tempdir().unwrap();
    let cycles = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/cycles/weather.yaml");
    let out = common::runner_command(dir.path(), &[])
        .arg("replay")
        .arg(&cycles)
        .args(["--budget", "64MiB", "--workers", "2", "--db", "replay.db", "--summary", "replay.json"])
        .args(["--max-underestimate-rate", "0.02", "--max-median-slack", "0.25"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}\n{}", String::from_utf8_lossy(&out.stderr));

    let summary: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("replay.json")).unwrap()).unwrap();
    let cycles = summary["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 24);
    let budget = 64u64 << 20;
    let mut slacks = Vec::new();
    for (i, cycle) in cycles.iter().enumerate() {
        assert_eq!(cycle["status"], "ok", "{cycle}");
        assert_eq!(cycle["tasks_total"], 80);
        assert!(cycle["peak_rss_bytes"].as_u64().unwrap() <= budget + budget / 20 + (64 << 20), "{cycle}");
        if i >= 3 {
            assert!(cycle["underestimate_rate"].as_f64().unwrap() <= 0.02, "{cycle}");
            slacks.push(cycle["slack"].as_f64().unwrap());
        }
    }
    slacks.sort_by(f64::total_cmp);
    assert!(slacks[slacks.len() / 2] <= 0.25, "median slack {}", slacks[slacks.len() / 2]);
    // Every task of every cycle is in the store.
    let history = common::runner_command(dir.path(), &[])
        .args(["history", "--db", "replay.db", "--last", "24", "--format", "json"])
        .output()
        .unwrap();
    let rows: Json = serde_json::from_slice(&history.stdout).unwrap();
    let recorded: u64 = rows.as_array().unwrap().iter().map(|r| r["tasks"].as_u64().unwrap()).sum();
    assert_eq!(recorded, 24 * 80);
    // Every task of every cycle after the first was estimated from the store's history.
    let db = rusqlite::Connection::open(dir.path().join("replay.db")).unwrap();
    let sources: Vec<(String, i64)> = db
        .prepare(
            "SELECT estimate_source, count(*) FROM tasks \
             WHERE run_id > (SELECT min(run_id) FROM runs) GROUP BY estimate_source",
        )
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(sources, vec![("history".to_string(), 23 * 80)]);
}

#[test]
fn tasks_of_two_sizes_in_one_step_are_each_estimated_from_their_own_basis() {
    // Every step runs over two grid sizes and the threshold list changes between cycles: with
    // each task predicted from its own plugin estimate and input bytes, and learned per size
    // group, estimates stay tight for both sizes.
    let dir = tempfile::tempdir().unwrap();
    let cycles = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/cycles/mixed.yaml");
    let out = common::runner_command(dir.path(), &[])
        .arg("replay")
        .arg(&cycles)
        .args(["--budget", "64MiB", "--workers", "2", "--db", "mixed.db", "--summary", "mixed.json"])
        .args(["--warmup", "1", "--max-underestimate-rate", "0.005", "--max-median-slack", "0.10"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary: Json = serde_json::from_str(&std::fs::read_to_string(dir.path().join("mixed.json")).unwrap()).unwrap();
    assert_eq!(summary["cycles"].as_array().unwrap().len(), 16);
    // The two sizes really differ: the large grid's threshold tasks peak about 4× the small's.
    let db = rusqlite::Connection::open(dir.path().join("mixed.db")).unwrap();
    let (small, large): (i64, i64) = db
        .query_row(
            "SELECT max(CASE WHEN key LIKE '%grid=240%' THEN peak_bytes END), \
             max(CASE WHEN key LIKE '%grid=480%' THEN peak_bytes END) FROM tasks WHERE step = 'exceed'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert!(large > 3 * small, "large {large}, small {small}");
}

#[test]
fn a_warm_up_that_leaves_no_cycle_to_judge_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let cycles = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/cycles/mixed.yaml");
    let out = common::runner_command(dir.path(), &[])
        .arg("replay")
        .arg(&cycles)
        .args(["--db", "w.db", "--warmup", "16", "--max-median-slack", "0.0001"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("--warmup 16 leaves none of the 16 cycles") && text.contains("below 16"), "{text}");
    assert!(!dir.path().join("out").exists(), "no cycle ran");
}

#[test]
fn thresholds_that_could_never_be_crossed_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cycles = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/cycles/mixed.yaml");
    for (flag, value, expected) in [
        ("--max-underestimate-rate", "2", "expected a share of tasks from 0 to 1"),
        ("--max-underestimate-rate", "-0.1", "expected a share of tasks from 0 to 1"),
        ("--max-median-slack", "-1", "expected a fraction of at least 0"),
        ("--max-median-slack", "inf", "expected a fraction of at least 0"),
    ] {
        let given = format!("{flag}={value}");
        let out = common::runner_command(dir.path(), &[]).arg("replay").arg(&cycles).arg(&given).output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {text}");
        assert!(text.contains(expected) && text.contains(flag), "{flag} {value}: {text}");
    }
    assert!(!dir.path().join("runner.db").exists(), "no cycle ran");
}
