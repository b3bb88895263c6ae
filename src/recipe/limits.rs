//! The bounds a recipe must keep, so that every check and every expansion stays within a known
//! cost whatever the input. The graph and the scheduler rely on the same figures.

/// Most dims one step may run over (coordinates live in fixed arrays on the hot path).
pub const MAX_DIMS: usize = 8;

/// Most tasks one step may have, so that task counts and indices never overflow.
pub const MAX_TASKS: u64 = 1 << 48;

/// Most YAML nodes (mappings, lists, scalars) in a recipe: room for a list dim of 10⁶ values
/// written inline. Longer lists belong in a file (`dim: {file: values.txt}`).
pub const MAX_YAML_NODES: usize = 2_500_000;

/// Deepest nesting of lists and mappings in a recipe.
pub const MAX_YAML_DEPTH: usize = 64;

/// Most bytes of scalar text in a recipe (after anchors and aliases expand).
pub const MAX_YAML_TEXT_BYTES: usize = 64 << 20;

/// Most nodes that aliases may expand to, over the whole recipe.
pub const MAX_ALIAS_EXPANSION: usize = 1_000_000;

/// Largest recipe file: far above any hand-written recipe, small enough to hold in memory
/// with its tree. Longer lists of values belong in a list file.
pub const MAX_RECIPE_BYTES: u64 = 64 << 20;

/// Largest list file of a dim (`dim: {file: values.txt}`).
pub const MAX_LIST_FILE_BYTES: u64 = 256 << 20;

/// Most bytes one arg of one task may expand to once its templates are filled in (checked
/// before anything is expanded, from the longest value each reference can take).
pub const MAX_ARG_BYTES: usize = 16 << 20;

/// Most `retries:` of a step.
pub const MAX_RETRIES: u64 = 100;

/// Longest cycle id.
pub const MAX_CYCLE_LEN: usize = 64;

/// Most values of one dim whose formatted output paths are compared to find two tasks that
/// would write the same file (beyond it the run-time check still catches them).
pub const MAX_PATH_VALUES_COMPARED: u64 = 100_000;

/// Most problems printed for one file; the count of the rest follows.
pub const MAX_PROBLEMS_SHOWN: usize = 100;
