//! `alloc`: a synthetic task for testing the scheduler's memory accounting. It allocates `bytes`
//! and writes into every 4 KiB page of them (so the resident set really grows), holds them for
//! `hold_ms` milliseconds, frees them, and returns a u8 array of `output_bytes`.
//!
//! Output pattern (tests rely on it): with `h` the 64-bit FNV-1a hash of the UTF-8 bytes of the
//! task's key (`ctx.key()`, e.g. `member=3,lead=12`; offset basis 0xcbf29ce484222325, prime
//! 0x100000001b3), byte `i` of the output is `(h + i) mod 256` (wrapping add, then the low byte).
//! See [`alloc_pattern`].

use std::mem::MaybeUninit;
use std::time::Duration;

use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::fnv1a64;

/// Pages are touched at this stride; 4 KiB is the smallest page size of the platforms we run on.
const PAGE: usize = 4096;

const ARGS: &[ArgSpec] = &[
    ArgSpec::required("bytes", "bytes to allocate and touch, e.g. 400MiB"),
    ArgSpec::optional("hold_ms", "0", "milliseconds to hold the allocation before freeing it"),
    ArgSpec::optional("output_bytes", "0", "length of the returned u8 array"),
    ArgSpec::optional("estimate", "bytes + output_bytes", "what the plugin's estimate reports"),
    ArgSpec::optional(
        "announce",
        "true",
        "announce the allocation to the memory ledger first (`ctx.will_allocate`); false allocates unannounced, like a plain `vec!`",
    ),
];

pub struct Alloc;

/// The arguments, parsed and checked.
struct Plan {
    bytes: u64,
    hold_ms: u64,
    output_bytes: u64,
    estimate: u64,
    announce: bool,
}

impl Plan {
    fn from_args(args: &Args) -> Result<Plan, ArgError> {
        let bytes = args.size("bytes")?;
        let hold_ms = args.u64_or("hold_ms", 0)?;
        let output_bytes = args.size_or("output_bytes", 0)?;
        let default_estimate = bytes.checked_add(output_bytes).ok_or_else(|| {
            ArgError::new("output_bytes", "`bytes` + `output_bytes` is larger than any machine's memory")
        })?;
        let estimate = args.size_or("estimate", default_estimate)?;
        let announce = match args.str_or("announce", "true")?.as_str() {
            "true" => true,
            "false" => false,
            other => return Err(ArgError::new("announce", format!("`announce` must be true or false, got {other}"))),
        };
        // Sizes must fit this machine's address space before anything tries to allocate them.
        for (name, value) in [("bytes", bytes), ("output_bytes", output_bytes)] {
            if usize::try_from(value).is_err() {
                return Err(ArgError::new(name, format!("`{name}` of {value} bytes does not fit in memory")));
            }
        }
        Ok(Plan { bytes, hold_ms, output_bytes, estimate, announce })
    }
}

/// The bytes `alloc` returns for a task with key `key`: byte `i` is `(fnv1a64(key) + i) mod 256`.
pub fn alloc_pattern(key: &str, len: usize) -> Vec<u8> {
    let start = fnv1a64(key.as_bytes()) as u8;
    (0..len).map(|i| start.wrapping_add(i as u8)).collect()
}

impl Plugin for Alloc {
    fn name(&self) -> &'static str {
        "alloc"
    }

    fn about(&self) -> &'static str {
        "allocates and touches `bytes`, holds them `hold_ms`, returns `output_bytes` of a key-derived pattern"
    }

    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        Plan::from_args(args).map(|_| ())
    }

    fn output(&self, args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let plan = Plan::from_args(args)?;
        Ok(ValueMeta::Array { dtype: DType::U8, shape: vec![plan.output_bytes as usize] })
    }

    /// Exact unless the recipe sets `estimate` to something else on purpose.
    fn estimate_is_exact(&self, args: &Args) -> bool {
        !args.contains("estimate")
    }

    fn estimate(&self, args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        // `check` has already accepted the arguments; 0 is only a fallback for an engine that skips it.
        Plan::from_args(args).map(|plan| plan.estimate).unwrap_or(0)
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let plan = Plan::from_args(args).map_err(|e| TaskError::msg(e.message))?;
        if plan.announce {
            ctx.will_allocate(plan.bytes);
        }
        hold_touched(plan.bytes as usize, Duration::from_millis(plan.hold_ms))?;
        let len = plan.output_bytes as usize;
        if plan.announce {
            ctx.will_allocate(len as u64);
        }
        let array = Array::from_vec(vec![len], alloc_pattern(ctx.key(), len)).map_err(TaskError::msg)?;
        Ok(Value::Array(array))
    }
}

/// Allocates `bytes`, writes a non-zero byte into each page, and holds them for `hold`.
fn hold_touched(bytes: usize, hold: Duration) -> Result<(), TaskError> {
    let mut buffer: Vec<u8> = Vec::new();
    // A failed reservation becomes a task error instead of aborting the whole process.
    buffer.try_reserve_exact(bytes).map_err(|e| TaskError::msg(format!("cannot allocate {bytes} bytes: {e}")))?;
    // Writing to the spare capacity touches the pages without a memset of the whole buffer.
    let pages: &mut [MaybeUninit<u8>] = &mut buffer.spare_capacity_mut()[..bytes];
    for page in pages.chunks_mut(PAGE) {
        page[0].write(1);
    }
    // The writes are otherwise dead (the buffer is freed unread); make them observable.
    std::hint::black_box(pages);
    std::thread::sleep(hold);
    drop(buffer);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{plan, run, run_keyed};
    use runner_plugin::serde_json::json;

    /// The documented rule, written out independently of `alloc_pattern`.
    fn expected_pattern(key: &str, len: usize) -> Vec<u8> {
        let mut hash: u64 = 0xcbf29ce484222325;
        for byte in key.bytes() {
            hash ^= byte as u64;
            hash = hash.wrapping_mul(0x100000001b3);
        }
        (0..len as u64).map(|i| (hash.wrapping_add(i) % 256) as u8).collect()
    }

    #[test]
    fn output_follows_the_documented_pattern_of_the_key() {
        for key in ["", "member=3,lead=12", "a"] {
            let value = run_keyed(&Alloc, key, json!({"bytes": "1MiB", "output_bytes": 1000}), &[]).unwrap();
            let array = value.as_array().unwrap();
            assert_eq!(array.dtype(), DType::U8);
            assert_eq!(array.shape(), &[1000]);
            assert_eq!(array.bytes(), expected_pattern(key, 1000).as_slice(), "key {key:?}");
        }
        // FNV-1a("a") = 0xaf63dc4c8601ec8c, so the pattern of key "a" starts at 0x8c.
        assert_eq!(alloc_pattern("a", 3), vec![0x8c, 0x8d, 0x8e]);
    }

    #[test]
    fn zero_output_bytes_is_an_empty_array() {
        let value = run(&Alloc, json!({"bytes": 10_000}), &[]).unwrap();
        let array = value.as_array().unwrap();
        assert_eq!((array.dtype(), array.shape()), (DType::U8, &[0usize][..]));
    }

    #[test]
    fn holds_for_hold_ms() {
        let start = std::time::Instant::now();
        run(&Alloc, json!({"bytes": "64KiB", "hold_ms": "30"}), &[]).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn estimate_defaults_to_bytes_plus_output_and_can_be_overridden() {
        let (meta, estimate) = plan(&Alloc, json!({"bytes": "1MiB", "output_bytes": 100}), &[]).unwrap();
        assert_eq!(meta, ValueMeta::Array { dtype: DType::U8, shape: vec![100] });
        assert_eq!(estimate, (1 << 20) + 100);
        let (_, estimate) = plan(&Alloc, json!({"bytes": "1MiB", "estimate": "2KiB"}), &[]).unwrap();
        assert_eq!(estimate, 2048);
    }

    #[test]
    fn bad_arguments_are_rejected_naming_the_argument() {
        for (bad, arg) in [
            (json!({"bytes": "lots"}), "bytes"),
            (json!({"bytes": -5}), "bytes"),
            (json!({"bytes": 1, "hold_ms": "soon"}), "hold_ms"),
            (json!({"bytes": 1, "output_bytes": "3 parsecs"}), "output_bytes"),
            (json!({"bytes": 1, "estimate": [1]}), "estimate"),
            (json!({}), "bytes"),
        ] {
            let err = Alloc.check(&crate::testing::args(bad.clone())).unwrap_err();
            assert_eq!(err.arg.as_deref(), Some(arg), "{bad}: {err}");
            assert!(err.message.contains(arg), "{bad}: {err}");
        }
    }
}
