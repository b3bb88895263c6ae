//! The bounds a recipe must keep, so that every check and every expansion stays within a known
//! cost whatever the input. The graph and the scheduler rely on the same figures.

/// Most dims one step may run over (coordinates live in fixed arrays on the hot path).
pub const MAX_DIMS: usize = 8;

/// Most tasks one step may have, so that task counts and indices never overflow.
pub const MAX_TASKS: u64 = 1 << 48;
