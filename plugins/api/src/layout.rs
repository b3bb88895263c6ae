//! A step's index layout as a plugin may check it when a recipe is compiled: the dims the step
//! runs over (and which of them group another dim into blocks), and for each input how the
//! step's tasks read the producer's tasks (matched, pinned, a block of a grouped dim, or all).
//!
//! Most plugins never look at it. Those whose tasks share something outside the values they
//! return do: `write_zarr`'s tasks write chunks of one store, so it refuses a step whose tasks
//! would write the same chunk.

use crate::args::Args;

/// The index layout of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepLayout {
    /// The step's name.
    pub step: String,
    /// The dims of the step's `over`, in order.
    pub dims: Vec<LayoutDim>,
    /// The step's inputs, in the order the recipe lists them.
    pub inputs: Vec<InputLayout>,
}

/// One dim a step runs over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutDim {
    pub name: String,
    /// How many values it has (for a group dim: how many blocks).
    pub len: u64,
    /// For a group dim (`{group: day, size: 5}`): the dim it groups and the block size.
    pub group: Option<GroupOf>,
}

/// What a group dim groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOf {
    /// The grouped dim, e.g. `day`.
    pub dim: String,
    /// How many values the grouped dim has.
    pub dim_len: u64,
    /// Values per block; the last block may be shorter.
    pub size: u64,
}

/// One input of a step: which step produces it and how each of the producer's dims is read.
#[derive(Debug, Clone, PartialEq)]
pub struct InputLayout {
    /// The input's name in the recipe.
    pub name: String,
    /// The producer step's name.
    pub producer: String,
    /// The producer step's plugin, so that plugins made to work together (`zarr_create` and
    /// `write_zarr`) can check that their args agree.
    pub producer_plugin: String,
    /// The producer's args, as planning sees them (dim templates filled with each dim's first
    /// value).
    pub producer_args: Args,
    /// The producer's dims, in its `over` order, and how a consumer task reads each.
    pub producer_dims: Vec<ProducerDim>,
}

impl InputLayout {
    /// True when a consumer task reads a list of the producer's values.
    pub fn is_gathered(&self) -> bool {
        self.producer_dims.iter().any(|d| matches!(d.read, DimRead::Block { .. } | DimRead::All))
    }
}

/// One dim of a producer, as a consumer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerDim {
    pub name: String,
    pub len: u64,
    pub read: DimRead,
}

/// How a consumer task reads one producer dim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimRead {
    /// The consumer runs over the same dim: one value each, matched one-to-one.
    Matched,
    /// `select` pins the dim to the value at `position`.
    Pinned { position: u64 },
    /// The consumer runs over `group`, a group dim of this one: each task gathers one block of
    /// `size` values.
    Block { group: String, size: u64 },
    /// Every value is gathered.
    All,
}
