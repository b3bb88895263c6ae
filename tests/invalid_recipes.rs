//! A corpus of invalid recipes (`tests/invalid_recipes/*.yaml`, one problem each unless the name
//! says otherwise), run through the `runner` binary as a user would. Every one must fail before
//! anything runs, with exit code 2, each problem at its exact `file:line:column`, saying what is
//! wrong and what was expected, and never a panic.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What `runner plan FILE` must report: one row per problem, in the order they are printed (by
/// location). Line and column are 1-based; 0:0 is a problem of the whole file. The strings must
/// all appear in that problem's first line (`PATH:LINE:COL: MESSAGE; expected EXPECTATION`).
#[rustfmt::skip]
const CASES: &[(&str, u32, u32, &[&str])] = &[
    // YAML syntax.
    ("yaml_unclosed_bracket.yaml", 4, 6, &["illegal placement of ':'", "expected a closing `]` for the `[` at line 3, column 11"]),
    ("yaml_bad_indentation.yaml", 5, 10, &["mapping values are not allowed", "expected", "indentation"]),
    ("yaml_tab_indentation.yaml", 4, 2, &["tabs disallowed", "expected spaces for indentation"]),
    ("yaml_unclosed_quote.yaml", 5, 18, &["unclosed quote", "expected a closing quote"]),
    ("duplicate_top_level_key.yaml", 5, 1, &["duplicate key `recipe`", "expected each key at most once"]),
    ("duplicate_step_name.yaml", 5, 3, &["duplicate key `load`", "expected each key at most once"]),
    ("multiple_documents.yaml", 6, 1, &["more than one YAML document", "expected one recipe per file"]),
    ("empty_file.yaml", 0, 0, &["the recipe file is empty", "expected a mapping with at least `recipe:` and `steps:`"]),
    // Shape of the recipe: keys and types.
    ("top_level_list.yaml", 1, 1, &["the recipe is a list", "expected a mapping with at least `recipe:` and `steps:`"]),
    ("unknown_top_level_key.yaml", 2, 1, &["unknown key `dimz`", "expected one of: recipe, description, dims, vars, steps", "did you mean `dims`?"]),
    ("unknown_step_key.yaml", 5, 5, &["unknown key `ovr`", "expected one of: plugin, description, over, inputs, args, memory", "did you mean `over`?"]),
    ("missing_recipe.yaml", 1, 1, &["no `recipe:` name", "expected a `recipe: NAME` entry"]),
    ("missing_steps.yaml", 1, 1, &["no `steps:`", "expected a `steps:` mapping"]),
    ("empty_recipe_name.yaml", 1, 9, &["the recipe name is empty", "expected a name"]),
    ("missing_plugin.yaml", 5, 3, &["step `b` has no `plugin`", "expected `plugin: NAME` with one of:", "noop"]),
    ("steps_as_list.yaml", 3, 3, &["`steps` is a list", "expected a mapping of step names to steps"]),
    ("args_as_list.yaml", 5, 11, &["`args` of step `field` is a list", "expected a mapping of arg names to args"]),
    ("over_as_string.yaml", 7, 11, &["`over` of step `a` is the string \"member\"", "expected a list of dims"]),
    ("inputs_as_string.yaml", 8, 13, &["`inputs` of step `exceed` is the string \"field\"", "expected inputs as a map", "or a list of steps"]),
    ("select_without_step.yaml", 11, 14, &["input `first` of step `use` has no `step`", "expected `{step: NAME, select: {DIM: VALUE}}`"]),
    // Dims.
    ("dim_float.yaml", 3, 11, &["dim `member` is the number `2.5`", "expected a dim: a count", "a list", "a range", "a date range", "a group", "a list file"]),
    ("dim_count_zero.yaml", 3, 11, &["dim `member` has a count of 0", "expected a count of at least 1"]),
    ("list_dim_empty.yaml", 3, 9, &["dim `lead` is an empty list", "expected at least one value"]),
    ("list_dim_duplicate_value.yaml", 3, 19, &["dim `lead` lists `2` twice", "expected distinct values"]),
    ("list_dim_float_value.yaml", 3, 15, &["dim `threshold` lists the number `0.5`", "expected integers or strings"]),
    ("range_stop_before_start.yaml", 3, 27, &["dim `hour` stops (3) before it starts (10)", "expected `stop` ≥ `start`"]),
    ("range_step_zero.yaml", 3, 36, &["dim `hour` has step 0", "expected a step of at least 1"]),
    ("range_unknown_key.yaml", 3, 30, &["unknown key `stride` in dim `hour`", "expected one of: start, stop, step"]),
    ("range_of_every_i64.yaml", 3, 6, &["dim `n` has 18446744073709551616 values", "expected at most 281474976710656 values (2^48)"]),
    ("group_of_unknown_dim.yaml", 4, 18, &["group dim `chunk` groups unknown dim `houre`", "expected a dim, one of: hour", "did you mean `hour`?"]),
    ("group_of_group.yaml", 5, 18, &["group dim `block` groups `chunk`, which is itself a group", "expected a group of a count, list, range or date dim"]),
    ("group_size_zero.yaml", 4, 30, &["group dim `chunk` has size 0", "expected a size of at least 1"]),
    ("group_without_size.yaml", 4, 10, &["group dim `chunk` has no `size`", "expected `{group: DIM, size: N}`"]),
    ("dim_named_like_a_var.yaml", 5, 3, &["dim `lead` has the name of a var", "expected dim names distinct from var names"]),
    // Steps: plugins, `over`, inputs.
    ("unknown_plugin.yaml", 4, 13, &["unknown plugin `synht` in step `field`", "expected a plugin, one of:", "did you mean `synth`?"]),
    ("unknown_dim_in_over.yaml", 8, 20, &["unknown dim `leed` in `over` of step `a`", "expected a dim of the recipe, one of: member, lead", "did you mean `lead`?"]),
    // One problem, one message: what refers to the misspelt or rejected dim is not reported again.
    ("unknown_dim_in_over_hides_its_references.yaml", 8, 20, &["unknown dim `leed` in `over` of step `a`", "did you mean `lead`?"]),
    ("rejected_dim_hides_its_references.yaml", 3, 13, &["dim `lead` lists the number `2.5`", "expected integers or strings"]),
    ("dim_twice_in_over.yaml", 8, 26, &["step `a` lists dim `member` twice in `over`", "expected each dim once"]),
    ("over_group_and_base.yaml", 8, 11, &["step `a` runs over both `chunk` and `hour`", "expected either the group `chunk` or `hour`, not both"]),
    ("over_nine_dims.yaml", 6, 11, &["step `a` runs over 9 dims", "expected at most 8"]),
    ("too_many_tasks.yaml", 10, 11, &["step `everything` would run 1.000e24 tasks", "expected at most 281474976710656 tasks per step"]),
    ("unknown_step_in_inputs.yaml", 8, 21, &["input `field` of step `exceed` names unknown step `feild`", "expected a step of the recipe", "did you mean `field`?"]),
    ("duplicate_input_name_in_list.yaml", 7, 17, &["step `b` has two inputs named `a`", "expected distinct input names"]),
    ("cycle_two_steps.yaml", 12, 17, &["steps `a`, `b` depend on each other in a cycle", "expected a DAG"]),
    ("cycle_self_loop.yaml", 7, 24, &["step `b` reads its own output", "expected a DAG"]),
    ("select_unknown_dim.yaml", 11, 37, &["names unknown dim `membr`", "expected a dim, one of: member", "did you mean `member`?"]),
    ("select_dim_producer_lacks.yaml", 12, 37, &["pins dim `lead`, but step `field` does not run over it", "expected a dim of step `field`: member"]),
    ("select_value_not_in_dim.yaml", 13, 43, &["pins dim `lead` to `4`, which is not one of its values", "expected one of: 1, 2, 3"]),
    ("select_dim_consumer_matches.yaml", 13, 37, &["pins dim `lead`, which step `use` runs over", "expected `select` only on producer dims the consumer does not run over"]),
    ("producer_group_consumer_base.yaml", 12, 21, &["input `block` of step `per_hour` cannot be matched", "runs over `chunk` (blocks of `hour`)", "expected step `per_hour` to run over `chunk` too, or not over `hour`"]),
    // Templates in args.
    ("template_unknown_name.yaml", 8, 53, &["arg `seed` of step `field`", "unknown name `{membr}`", "expected a dim of the step, a var or `cycle`", "did you mean `member`?"]),
    ("template_unclosed_brace.yaml", 8, 53, &["arg `seed`", "unclosed `{` at character 3", "expected a `}` after the name, or `{{` for a literal brace"]),
    ("template_stray_close_brace.yaml", 12, 13, &["arg `seed`", "unmatched `}` at character 9", "expected a `{` before it, or `}}` for a literal brace"]),
    ("template_empty_braces.yaml", 5, 53, &["arg `seed`", "empty `{}`", "expected a dim, var or `cycle` name inside the braces"]),
    ("template_bad_format.yaml", 13, 18, &["arg `path` of step `save`", "bad format `zz` in `{lead:zz}`", "expected a format like `03`"]),
    ("template_bracket_without_index.yaml", 10, 51, &["arg `seed` of step `smooth`", "`{radii[}` is not a reference", "a lookup `{var[dim]}`"]),
    ("template_width_too_large.yaml", 8, 53, &["bad format `0999999999999`", "width or precision too large", "expected at most 255"]),
    ("template_numeric_format_on_string_dim.yaml", 13, 18, &["`{model}` has a numeric format but dim `model` has string values", "expected `{model}` or a width alone"]),
    ("template_dim_not_in_over.yaml", 9, 53, &["`{lead}` refers to dim `lead`, but step `field` does not run over it", "expected a dim the step runs over (member), a var or `cycle`"]),
    // Memory hints.
    ("memory_bad_unit.yaml", 5, 13, &["`memory` of step `a`: invalid size `12 parsecs`", "expected a number of bytes or a number with a unit"]),
    ("memory_zero.yaml", 5, 13, &["`memory` of step `a` is 0 bytes", "expected a size above 0"]),
    ("memory_negative.yaml", 5, 13, &["`memory` of step `a`: invalid size `-5`", "cannot be negative", "expected a number of bytes"]),
    // Args.
    ("unknown_arg.yaml", 5, 28, &["unknown arg `wet_fractoin` in step `field`", "expected an arg of plugin `synth`, one of: ny, nx, wet_fraction, seed", "did you mean `wet_fraction`?"]),
    ("arg_for_plugin_without_args.yaml", 5, 12, &["unknown arg `bytes` in step `a`", "expected no args: plugin `noop` takes none"]),
    ("missing_required_arg.yaml", 3, 3, &["step `field` lacks required arg `nx` of plugin `synth`", "expected `nx`: columns of the field"]),
    ("nbhood_negative_radius.yaml", 9, 20, &["plugin `nbhood` rejects the args of step `smooth`", "`radius` must be a positive whole number, got -1"]),
    ("nbhood_unknown_shape.yaml", 9, 30, &["plugin `nbhood` rejects the args of step `smooth`", "`shape` must be \"square\" or \"circular\" (IMPROVER's names; \"circle\" too), got \"hexagon\""]),
    ("threshold_fuzzy_factor_too_big.yaml", 13, 50, &["plugin `threshold` rejects the args of step `exceed`", "`fuzzy_factor` must be between 0 and 1", "got 1.5"]),
    ("synth_wet_fraction_too_big.yaml", 5, 42, &["plugin `synth` rejects the args of step `field`", "`wet_fraction` must be between 0 and 1, got 2"]),
    // Inputs a plugin rejects when the plan is made.
    ("mean_without_inputs.yaml", 5, 3, &["plugin `mean` rejects step `average`", "needs an input: a gathered list of arrays"]),
    ("write_npy_of_nothing.yaml", 7, 21, &["plugin `write_npy` rejects step `save`", "needs an array", "input `array` is nothing"]),
    // Step keys and the recipe's `paths`.
    ("retries_out_of_range.yaml", 5, 14, &["`retries` of step `a` is 1000: out of range", "expected at most 100"]),
    ("timeout_without_unit.yaml", 5, 14, &["`timeout` of step `a` is the integer `30`", "expected a duration with a unit, e.g. `30s`, `10m` or `2h`"]),
    ("timeout_zero.yaml", 5, 14, &["`timeout` of step `a` is 0", "above 0"]),
    ("on_missing_unknown.yaml", 5, 17, &["`on_missing` of step `a` is `ignored`", "expected one of: error, skip, ignore", "did you mean `ignore`?"]),
    ("cache_not_bool.yaml", 5, 12, &["`cache` of step `a` is the string \"true\"", "expected `true` or `false`"]),
    ("paths_unknown_key.yaml", 2, 9, &["unknown key `allow_outsid` in `paths`", "expected one of: allow_outside", "did you mean `allow_outside`?"]),
    ("allow_outside_not_bool.yaml", 3, 18, &["`allow_outside` of `paths` is the string \"sometimes\"", "expected `true` or `false`"]),
    // Date and time dims, list files, numbers out of range.
    ("date_start_not_a_date.yaml", 3, 16, &["`start` of dim `day` is \"1981-02-30\"", "expected an integer, or a date or date-time in UTC such as 1981-09-01, 2026-11-01T00Z"]),
    ("date_step_without_unit.yaml", 3, 52, &["`step` of date dim `day` is the integer `1`", "expected a duration such as `1d`, `6h`"]),
    ("date_stop_before_start.yaml", 3, 39, &["date dim `hour` stops before it starts", "expected `stop` at or after `start`"]),
    ("date_format_on_integer_dim.yaml", 8, 51, &["`{lead}` has a date format but dim `lead` has integer values", "expected a date dim"]),
    ("numeric_format_on_date_dim.yaml", 8, 51, &["`{day}` has a numeric format but dim `day` has date values", "or a date format such as `{day:%Y%m%d}`"]),
    ("date_format_on_a_plain_var.yaml", 7, 51, &["`{when}`: the date format `%Y%m%d` needs a date or date-time, but the value is `soon`", "expected a date or date-time"]),
    ("select_date_not_in_dim.yaml", 11, 45, &["`select` pins dim `day` to `1981-10-01`, which is not one of its values", "expected one of: 1981-09-01, 1981-09-02"]),
    ("list_file_missing.yaml", 3, 16, &["dim `file`: list file `lists/no_such_list.txt` cannot be read", "expected a UTF-8 text file with one value a line"]),
    ("list_file_duplicate.yaml", 3, 16, &["list file `lists/duplicate.txt` lists `b.nc` twice (lines 2 and 5)", "expected distinct values"]),
    ("group_size_out_of_range.yaml", 4, 30, &["the size of group dim `chunk` is 18446744073709551615: out of range", "expected at most 281474976710656"]),
    ("count_out_of_range.yaml", 3, 11, &["the count of dim `member` is 1e23: out of range", "expected at most 281474976710656 values"]),
    // Lookups per dim value, date-time arithmetic, dims relative to the cycle.
    ("lookup_missing_value.yaml", 10, 51, &["`{radii[lead]}`: var `radii` has no entry for lead `3`; its keys are: 1, 2", "expected a key for every value of dim `lead` (1, 2, 3)"]),
    ("lookup_list_too_short.yaml", 10, 51, &["var `radii` lists 2 items but dim `lead` has 3 values", "expected one item per value of `lead`, in its order (1, 2, 3)"]),
    ("lookup_by_a_dim_not_in_over.yaml", 11, 51, &["`{radii[member]}` indexes var `radii` by `member`, which is a dim that step `smooth` does not run over", "expected a dim the step runs over (lead)"]),
    ("time_arithmetic_on_a_string_dim.yaml", 8, 51, &["`{cycle + model h}`: `model h` needs a number before the unit, but dim `model` has string values", "expected an integer dim"]),
    ("relative_dim_refers_to_a_dim.yaml", 4, 18, &["`start` of dim `valid` (\"{cycle + lead h}\") refers to `lead`", "expected only the cycle and vars in a dim's `start` and `stop`"]),
    // Paths that tasks write.
    ("output_path_omits_dim.yaml", 13, 18, &["arg `path` of step `save` does not depend on dim `member`: the 4 tasks over `member` would all write `out/x.npy`", "expected `{member}` in the path"]),
    ("output_path_merges_days.yaml", 13, 18, &["would write `out/198109.npy` for both day 1981-09-01 and day 1981-09-02", "e.g. `{day:%Y%m%d}`"]),
    ("output_path_escapes.yaml", 13, 18, &["writes `out/../../elsewhere/x.npy` for name `../../elsewhere`, outside the working directory", "`paths: {allow_outside: true}`"]),
    ("output_path_absolute_from_var.yaml", 11, 18, &["writes `/tmp/x.npy`, outside the working directory", "an absolute path written in the recipe itself"]),
    // Unknown keys at every level, each reported; a misspelt key hides only what depends on it.
    ("unknown_keys_everywhere.yaml", 2, 1, &["unknown key `pahts` at the top level", "did you mean `paths`?"]),
    ("unknown_keys_everywhere.yaml", 5, 30, &["unknown key `stpe` in dim `hour`", "did you mean `step`?"]),
    ("unknown_keys_everywhere.yaml", 11, 5, &["unknown key `memroy` in step `field`", "did you mean `memory`?"]),
    ("unknown_keys_everywhere.yaml", 14, 31, &["unknown key `selct` in input `f` of step `first`", "did you mean `select`?"]),
    ("unknown_keys_everywhere.yaml", 17, 5, &["unknown key `retires` in step `other`", "did you mean `retries`?"]),
    ("over_misspelt_hides_nothing_else.yaml", 7, 5, &["unknown key `ovr` in step `field`", "did you mean `over`?"]),
    ("over_misspelt_hides_nothing_else.yaml", 11, 12, &["unknown dim `membr` in `over` of step `mean`", "did you mean `member`?"]),
    // Eight independent mistakes, all in one report.
    ("eight_problems.yaml", 2, 1, &["unknown key `descripton` at the top level", "did you mean `description`?"]),
    ("eight_problems.yaml", 11, 51, &["arg `seed` of step `field`", "unknown name `{membr}`", "did you mean `member`?"]),
    ("eight_problems.yaml", 13, 13, &["unknown plugin `treshold` in step `exceed`", "did you mean `threshold`?"]),
    ("eight_problems.yaml", 21, 14, &["`retries` of step `smooth` is -1", "expected a whole number from 0 to 100"]),
    ("eight_problems.yaml", 26, 14, &["`timeout` of step `mean`: invalid duration `10 minutes`", "expected a number with a unit (ms, s, m, h, d)"]),
    ("eight_problems.yaml", 32, 17, &["`on_missing` of step `save` is `skipp`", "did you mean `skip`?"]),
    ("eight_problems.yaml", 36, 12, &["`cache` of step `daily` is the string \"yes\"", "expected `true` or `false`"]),
    ("eight_problems.yaml", 39, 5, &["unknown key `ovr` in step `other`", "did you mean `over`?"]),
    // Problems the front end finds and the graph or the plan finds, in one report.
    ("every_stage.yaml", 8, 51, &["arg `seed` of step `field`", "unknown name `{membr}`"]),
    ("every_stage.yaml", 21, 21, &["plugin `nbhood` rejects step `smooth`"]),
    ("front_end_and_graph.yaml", 8, 51, &["arg `seed` of step `field`", "unknown name `{membr}`"]),
    ("front_end_and_graph.yaml", 11, 17, &["steps `ping`, `pong` depend on each other in a cycle"]),
    // Several problems at once, reported in file order.
    ("several_problems.yaml", 8, 20, &["unknown dim `leed`", "did you mean `lead`?"]),
    ("several_problems.yaml", 11, 13, &["unknown plugin `treshold`", "did you mean `threshold`?"]),
    ("several_problems.yaml", 17, 18, &["`{lead}` refers to dim `lead`, but step `save` does not run over it", "expected a dim the step runs over (member)"]),
];

/// Corpus files also run with `runner run`: each has a valid branch that would write a file.
const RUN_CASES: &[&str] = &[
    "cycle_two_steps.yaml",
    "threshold_fuzzy_factor_too_big.yaml",
    "write_npy_of_nothing.yaml",
    "template_bad_format.yaml",
    "several_problems.yaml",
    "yaml_unclosed_bracket.yaml",
];

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("invalid_recipes")
}

fn corpus_file(name: &str) -> PathBuf {
    corpus_dir().join(name)
}

fn plan(path: &Path, extra: &[&str]) -> Output {
    let output =
        common::runner_command(Path::new("."), &[]).arg("plan").arg(path).args(extra).output().expect("start runner");
    assert_never_panics(path, &output);
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_never_panics(path: &Path, output: &Output) {
    let text = stderr(output);
    for word in ["panicked", "RUST_BACKTRACE"] {
        assert!(!text.contains(word), "{}: stderr mentions {word:?}:\n{text}", path.display());
    }
    assert!(output.status.code().is_some(), "{}: killed by a signal: {:?}", path.display(), output.status);
}

/// The problems `runner` reported for `path`: (line, column, first line of the problem).
fn reported(path: &Path, stderr: &str) -> Vec<(u32, u32, String)> {
    let prefix = format!("{}:", path.display());
    stderr
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix).map(|rest| (line, rest)))
        .map(|(line, rest)| {
            let mut parts = rest.splitn(3, ':');
            match (parts.next().map(str::parse), parts.next().map(str::parse), parts.next()) {
                (Some(Ok(l)), Some(Ok(c)), Some(_)) => (l, c, line.to_string()),
                _ => (0, 0, line.to_string()),
            }
        })
        .collect()
}

fn corpus_names() -> BTreeSet<String> {
    std::fs::read_dir(corpus_dir())
        .expect("read tests/invalid_recipes")
        .map(|entry| entry.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect()
}

#[test]
fn the_table_covers_the_whole_corpus() {
    let listed: BTreeSet<String> = CASES.iter().map(|(file, ..)| file.to_string()).collect();
    let on_disk = corpus_names();
    assert_eq!(listed, on_disk, "every corpus file needs a row in CASES, and every row a file");
    assert!(on_disk.len() >= 35, "only {} invalid recipes", on_disk.len());
    for file in RUN_CASES {
        assert!(on_disk.contains(*file), "{file} is not in the corpus");
    }
}

#[test]
fn every_invalid_recipe_is_reported_where_it_is_wrong() {
    let mut failures = Vec::new();
    let files: BTreeSet<&str> = CASES.iter().map(|(file, ..)| *file).collect();
    for file in files {
        let path = corpus_file(file);
        let output = plan(&path, &[]);
        let text = stderr(&output);
        let expected: Vec<_> = CASES.iter().filter(|(f, ..)| *f == file).collect();
        let got = reported(&path, &text);
        let mut problems = Vec::new();
        if output.status.code() != Some(2) {
            problems.push(format!("exit code {:?}, expected 2", output.status.code()));
        }
        if !output.stdout.is_empty() {
            problems.push(format!("printed a plan:\n{}", String::from_utf8_lossy(&output.stdout)));
        }
        if got.len() != expected.len() {
            problems.push(format!("{} problems reported, expected {}", got.len(), expected.len()));
        }
        for ((_, line, column, words), (got_line, got_column, message)) in expected.iter().zip(&got) {
            if (line, column) != (got_line, got_column) {
                problems.push(format!("reported at {got_line}:{got_column}, expected {line}:{column}: {message}"));
            }
            for word in *words {
                if !message.contains(word) {
                    problems.push(format!("message lacks {word:?}: {message}"));
                }
            }
        }
        if !problems.is_empty() {
            failures.push(format!("{file}:\n  {}\n--- stderr ---\n{text}", problems.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{} corpus files misreported:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn no_corpus_file_makes_runner_panic() {
    for name in corpus_names() {
        let path = corpus_file(&name);
        let output = plan(&path, &[]);
        assert_eq!(output.status.code(), Some(2), "{name}:\n{}", stderr(&output));
        let json = plan(&path, &["--format", "json"]);
        assert_eq!(json.status.code(), Some(2), "{name} --format json:\n{}", stderr(&json));
    }
}

/// A fresh working directory with a private temp dir, to see what a run leaves behind.
struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("tmp")).expect("create tmp");
        Sandbox { root }
    }

    fn command(&self) -> Command {
        let mut command = common::runner_command(self.root.path(), &[]);
        command.env("TMPDIR", self.root.path().join("tmp"));
        command
    }

    /// Every file and directory created, relative to the root (the empty `tmp` excepted).
    fn leftovers(&self) -> Vec<String> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("read dir") {
                let path = entry.expect("dir entry").path();
                out.push(path.strip_prefix(root).expect("under root").display().to_string());
                if path.is_dir() {
                    walk(&path, root, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root.path(), self.root.path(), &mut out);
        out.retain(|p| p != "tmp");
        out
    }
}

#[test]
fn run_rejects_invalid_recipes_before_anything_runs() {
    for file in RUN_CASES {
        let path = corpus_file(file);
        let sandbox = Sandbox::new();
        let output = sandbox
            .command()
            .args(["run", "--budget", "256MiB", "--workers", "1"])
            .arg(&path)
            .output()
            .expect("start runner");
        assert_never_panics(&path, &output);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{file}:\n{text}");
        let (_, line, column, _) = CASES.iter().find(|(f, ..)| f == file).expect("listed in CASES");
        let first = reported(&path, &text).into_iter().next().map(|(l, c, _)| (l, c));
        assert_eq!(first, Some((*line, *column)), "{file}:\n{text}");
        assert_eq!(
            sandbox.leftovers(),
            Vec::<String>::new(),
            "{file}: `run` left files behind (no store, no outputs, no scratch expected)"
        );
    }
}

const VALID_RECIPE: &str = "\
recipe: set-unknown-var
vars:
  wet: 0.3
steps:
  field:
    plugin: synth
    args: {ny: 4, nx: 4, wet_fraction: \"{wet}\"}
  save:
    plugin: write_npy
    inputs: {array: field}
    args: {path: out/field.npy}
";

#[test]
fn set_of_an_unknown_var_is_rejected() {
    let sandbox = Sandbox::new();
    let path = sandbox.root.path().join("recipe.yaml");
    std::fs::write(&path, VALID_RECIPE).expect("write recipe");

    // The recipe itself is fine...
    let ok = plan(&path, &["--set", "wet=0.5"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));

    // ...but there is no var `wte`: a problem of the command line, so no line and column.
    let output = plan(&path, &["--set", "wte=0.5"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(output.stdout.is_empty(), "printed a plan: {}", String::from_utf8_lossy(&output.stdout));
    let got = reported(&path, &text);
    assert_eq!(got.len(), 1, "{text}");
    let (line, column, message) = &got[0];
    assert_eq!((*line, *column), (0, 0), "{text}");
    for word in [
        "--set wte=0.5",
        "the recipe has no var `wte`",
        "expected a var of the recipe's `vars:`",
        "did you mean `wet`?",
    ] {
        assert!(message.contains(word), "lacks {word:?}: {text}");
    }

    std::fs::remove_file(&path).expect("remove recipe");
    let recipe = tempfile::NamedTempFile::new().expect("recipe file");
    std::fs::write(recipe.path(), VALID_RECIPE).expect("write recipe");
    let output = sandbox
        .command()
        .args(["run", "--budget", "256MiB", "--set", "wte=0.5"])
        .arg(recipe.path())
        .output()
        .expect("start runner");
    assert_never_panics(recipe.path(), &output);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert_eq!(sandbox.leftovers(), Vec::<String>::new(), "`run` left files behind");
}

#[test]
fn a_recipe_that_does_not_exist_is_a_usage_error() {
    let path = corpus_dir().join("no_such_recipe.yml");
    let output = plan(&path, &[]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(text.contains("cannot read the recipe"), "{text}");
}

/// Hostile recipes made on the fly (too large to keep in the corpus): each must be refused
/// with a bounded, clear answer.
struct Hostile {
    dir: tempfile::TempDir,
}

impl Hostile {
    fn new() -> Hostile {
        Hostile { dir: tempfile::tempdir().expect("tempdir") }
    }

    fn write(&self, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write recipe");
        path
    }
}

/// The first reported problem's line, or the whole stderr when there is none.
fn first_problem(path: &Path, output: &Output) -> String {
    let text = stderr(output);
    reported(path, &text).into_iter().next().map_or(text, |(_, _, line)| line)
}

#[test]
fn a_template_bomb_is_refused_before_anything_is_expanded() {
    let hostile = Hostile::new();
    let big = "x".repeat(1 << 20);
    let refs = "{big}".repeat(3000);
    let path = hostile.write(
        "bomb.yaml",
        format!("recipe: bomb\nvars:\n  big: {big}\nsteps:\n  save:\n    plugin: write_npy\n    args: {{path: \"{refs}\"}}\n"),
    );
    let output = plan(&path, &[]);
    assert_eq!(output.status.code(), Some(2));
    let problem = first_problem(&path, &output);
    for words in [
        "arg `path` of step `save`",
        "would expand to up to 2.93 GiB",
        "`{big}` can be 1.00 MiB and is used 3000 times",
        "expected at most 16.0 MiB per arg",
    ] {
        assert!(problem.contains(words), "lacks {words:?}: {problem}");
    }
    // The same through a list of lone references (each would be a copy of the var).
    let list = vec!["\"{big}\""; 3000].join(", ");
    let path = hostile.write(
        "bomb_list.yaml",
        format!("recipe: bomb\nvars:\n  big: {big}\nsteps:\n  s:\n    plugin: synth\n    args: {{ny: 1, nx: 1, wet_fraction: 0.1, seed: [{list}]}}\n"),
    );
    let problem = first_problem(&path, &plan(&path, &[]));
    assert!(problem.contains("arg `seed` of step `s`: would expand to up to 2.93 GiB"), "{problem}");
}

#[test]
fn yaml_bombs_and_deep_nesting_are_said_in_recipe_terms() {
    let hostile = Hostile::new();
    let mut bomb =
        String::from("recipe: bomb\nsteps: {a: {plugin: noop}}\nvars:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..9 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        bomb.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
    }
    let path = hostile.write("alias_bomb.yaml", bomb);
    let output = plan(&path, &[]);
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(text.contains("anchors and aliases") && text.contains("1000000"), "{text}");
    for internal in ["budget breached", "Budget", "{ ", "Nodes", "RecordedAnchorEvents"] {
        assert!(!text.contains(internal), "leaks {internal:?}: {text}");
    }

    let deep =
        format!("recipe: deep\nsteps: {{a: {{plugin: noop}}}}\nvars:\n  v: {}{}\n", "[".repeat(100), "]".repeat(100));
    let path = hostile.write("deep.yaml", deep);
    let text = stderr(&plan(&path, &[]));
    assert!(text.contains("the recipe is nested deeper than 64 levels"), "{text}");
    assert!(!text.contains("Depth {"), "{text}");
}

#[test]
fn long_lines_and_control_characters_are_shown_safely() {
    let hostile = Hostile::new();
    let line = "y".repeat(50 << 20);
    let path = hostile
        .write("long.yaml", format!("recipe: long\nsteps:\n  a:\n    plugin: nope\n    description: \"{line}\n"));
    let output = plan(&path, &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stderr.len() < 4096, "{} bytes of stderr", output.stderr.len());
    assert!(stderr(&output).contains('…'), "{}", stderr(&output));

    // Beyond the size limit the file is not even read whole.
    let path = hostile.write("huge.yaml", format!("recipe: huge\n# {}\n", "z".repeat(65 << 20)));
    let output = plan(&path, &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("the recipe is larger than 64.0 MiB"), "{}", stderr(&output));
    assert!(output.stderr.len() < 1024, "{} bytes of stderr", output.stderr.len());

    let path = hostile.write(
        "nul.yaml",
        b"recipe: nul\nsteps:\n  a:\n    plugin: \"no\\0op\"\n    over: [\"x\\u0001\"]\n".as_slice(),
    );
    let output = plan(&path, &[]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(!output.stderr.iter().any(|&b| b < 0x20 && b != b'\n'), "raw control bytes in: {text:?}");
    assert!(text.contains("unknown plugin `no\\0op`"), "{text}");
    assert!(text.contains("unknown dim `x\\u{1}`"), "{text}");
    let path = hostile.write("raw_nul.yaml", b"recipe: nul\nsteps:\n  a\x00b:\n    plugin: noop\n".as_slice());
    let output = plan(&path, &[]);
    assert!(!output.stderr.contains(&0), "NUL echoed: {:?}", stderr(&output));
    assert!(stderr(&output).contains("unexpected character `\\u{0}`"), "{}", stderr(&output));
}

#[test]
fn a_million_listed_values_plan_in_linear_time() {
    let hostile = Hostile::new();
    let n = 1_000_000;
    let lines: String = (0..n).map(|i| format!("data/{:04}/file_{i:07}.nc\n", i % 1000)).collect();
    hostile.write("inputs.txt", lines);
    let path = hostile.write(
        "million.yaml",
        "recipe: million\ndims:\n  file: {file: inputs.txt}\n  chunk: {group: file, size: 5}\nsteps:\n  cache:\n    plugin: noop\n    over: [file]\n  write:\n    plugin: noop\n    over: [chunk]\n    inputs: {files: cache}\n",
    );
    let output = plan(&path, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("2 steps, 1200000 tasks"), "{text}");

    // Inline, with a duplicate at the very end: found (a quadratic check took minutes at 200k).
    let mut values: Vec<String> = (0..200_000).map(|i| format!("f{i}")).collect();
    values.push("f7".to_string());
    let path = hostile.write(
        "inline.yaml",
        format!(
            "recipe: inline\ndims:\n  file: [{}]\nsteps:\n  a:\n    plugin: noop\n    over: [file]\n",
            values.join(", ")
        ),
    );
    let output = plan(&path, &[]);
    assert_eq!(output.status.code(), Some(2));
    let problem = first_problem(&path, &output);
    assert!(problem.contains("dim `file` lists `f7` twice (first at line 3, column "), "{problem}");
}

#[test]
fn cycle_ids_that_are_not_one_path_component_are_refused() {
    let sandbox = Sandbox::new();
    let recipe = tempfile::NamedTempFile::new().expect("recipe file");
    std::fs::write(recipe.path(), VALID_RECIPE).expect("write recipe");
    for (cycle, says) in [
        ("../../../escape", "cycle id `../../../escape` has `/` at character 3"),
        ("", "the cycle id is empty"),
        ("2026/11/01T00Z", "has `/` at character 5"),
        ("a..b", "contains `..`"),
    ] {
        let output = sandbox
            .command()
            .args(["run", "--budget", "256MiB", "--no-record", "--cycle", cycle])
            .arg(recipe.path())
            .output()
            .expect("start runner");
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{cycle:?}: {text}");
        assert!(text.contains(says) && text.contains("expected letters, digits"), "{cycle:?}: {text}");
        assert_eq!(sandbox.leftovers(), Vec::<String>::new(), "{cycle:?}: `run` left files behind");
    }
}
