//! The order promise, measured from outside the process: adding steps downstream of a pipeline
//! (a terminal gather of its written paths, several levels of gathers) never raises its peak
//! resident memory by more than one task's footprint, and under a budget that a good order
//! fits nothing spills.

mod common;

use common::{MIB, allowed, assert_ok, run_measured};

/// 8 members × 12 leads of 1000×1000 fields: synth → threshold → nbhood → mean over members →
/// write, with `tail` appended to the steps.
fn weather(tail: &str) -> String {
    format!(
        "recipe: order\ndims:\n  member: 8\n  lead: 12\nsteps:\n  field:\n    plugin: synth\n    over: [member, lead]\n    \
         args: {{ny: 1000, nx: 1000, wet_fraction: 0.3, seed: \"{{member}}/{{lead}}\"}}\n  exceed:\n    plugin: threshold\n    \
         over: [member, lead]\n    inputs: {{field: field}}\n    args: {{thresholds: [1.0]}}\n  smooth:\n    plugin: nbhood\n    \
         over: [member, lead]\n    inputs: {{field: exceed}}\n    args: {{radius: 4}}\n  probability:\n    plugin: mean\n    \
         over: [lead]\n    inputs: {{members: smooth}}\n  save:\n    plugin: write_npy\n    over: [lead]\n    \
         inputs: {{array: probability}}\n    args: {{path: \"out/p{{lead}}.npy\"}}\n{tail}"
    )
}

const FINALIZE: &str = "  finalize:\n    plugin: noop\n    inputs: {paths: save}\n";

/// One 1000×1000 f32 field, about what one task of the pipeline holds beyond its inputs.
const ONE_TASK: u64 = 4 * MIB;

/// The least peak RSS of three runs of `recipe` on two workers. One run's peak also holds what
/// the allocator had not yet given back when the next task grew: the same recipe peaks
/// anywhere from 69 to 84 MiB on a loaded machine, more than one task's footprint apart.
fn least_peak_rss(recipe: &str) -> u64 {
    let runs = (0..3).map(|_| run_measured(recipe, &["--workers", "2", "--no-record"]));
    runs.map(|m| {
        assert_ok(&m);
        m.peak_rss
    })
    .min()
    .unwrap()
}

#[test]
fn a_terminal_gather_does_not_raise_the_peak() {
    let (a, b) = (least_peak_rss(&weather("")), least_peak_rss(&weather(FINALIZE)));
    assert!(b <= a + a / 10 + ONE_TASK, "peak RSS {} MiB with a terminal gather, {} MiB without", b / MIB, a / MIB);
}

#[test]
fn three_levels_of_gathers_finish_what_they_start() {
    // model × member × lead: a mean over members, then a blend over models, then a collect over
    // leads. All 2 × 6 × 12 smoothed fields held at once would be 576 MiB.
    let recipe = |tail: &str| {
        format!(
            "recipe: levels\ndims:\n  model: 2\n  member: 6\n  lead: 12\nsteps:\n  field:\n    plugin: synth\n    \
             over: [model, member, lead]\n    args: {{ny: 1000, nx: 1000, wet_fraction: 0.3, seed: \"{{model}}/{{member}}/{{lead}}\"}}\n  \
             exceed:\n    plugin: threshold\n    over: [model, member, lead]\n    inputs: {{field: field}}\n    \
             args: {{thresholds: [1.0]}}\n  members:\n    plugin: mean\n    over: [model, lead]\n    inputs: {{values: exceed}}\n  \
             blend:\n    plugin: mean\n    over: [lead]\n    inputs: {{values: members}}\n{tail}"
        )
    };
    let collect = "  collect:\n    plugin: noop\n    inputs: {blends: blend}\n";
    let (a, b) = (least_peak_rss(&recipe("")), least_peak_rss(&recipe(collect)));
    assert!(b <= a + a / 10 + 12 * ONE_TASK, "peak RSS {} MiB with the collect, {} MiB without", b / MIB, a / MIB);
    assert!(b < 250 * MIB, "peak RSS {} MiB: gathers were not finished before new sources started", b / MIB);
}

#[test]
fn a_budget_a_good_order_fits_never_spills() {
    let budget = 128 * MIB;
    let m = run_measured(&weather(FINALIZE), &["--workers", "2", "--no-record", "--budget", "128MiB"]);
    assert_ok(&m);
    assert_eq!(m.summary["spilled_bytes"], 0, "{}", m.summary);
    assert!(m.peak_rss <= allowed(budget), "peak RSS {} MiB", m.peak_rss / MIB);
}
