//! `synth`: a deterministic synthetic precipitation-rate field, f32 `[ny, nx]` in mm/h, standing
//! in for model output in tests and benchmarks.
//!
//! The field is made of one weather system: an elliptical envelope around a seeded centre, sized
//! so its area is a multiple of the requested wet area, multiplied by a smooth random field of a
//! few dozen Gaussian blobs placed in the ellipse's own coordinates (so the system scales with
//! `wet_fraction` and keeps its look). A quantile threshold of that product picks exactly
//! `round(wet_fraction · ny · nx)` wet cells (ties aside), so the wet fraction is as requested and
//! the wet region's bounding box grows with it. Dry cells are exactly 0; wet cells rise smoothly
//! from a light 0.05 mm/h at the edge of the rain to the system's seeded peak rate (10–40 mm/h).
//!
//! Everything random comes from a splitmix64 generator seeded with the FNV-1a hash of `seed`, and
//! every draw is made whatever the other arguments are, so the same seed gives the same system
//! at any size and wet fraction, and the same arguments give the same bytes.
//!
//! Cost: the blobs are separable, so each is an outer product of two 1-D profiles over its 3.5σ
//! support, computed once per blob (in parallel). The field is then built a band of rows at a
//! time, in parallel: each row gets its floor, every blob that reaches it and the envelope while
//! it is in L1, and its high radix digits are counted there too. The threshold is found by radix
//! selection (the low digits are counted only for the cells of the one high bucket that holds the
//! wanted rank), and a last parallel pass turns the field into rain. No per-cell `exp`, no sort,
//! three passes over the field; every cell sees the same operations in the same order as in a
//! blob-by-blob build, so the bytes do not depend on the bands.

use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use runner_plugin::ndarray::ArrayD;
use runner_plugin::serde_json::json;
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{ChunkWriter, fnv1a64, has_avx2, positive_whole, shown, written_array};

const ARGS: &[ArgSpec] = &[
    ArgSpec::required("ny", "rows of the field"),
    ArgSpec::required("nx", "columns of the field"),
    ArgSpec::required("wet_fraction", "fraction of cells with rain, 0 to 1"),
    ArgSpec::optional("seed", "0", "any text; the same seed gives the same weather"),
];

/// Blobs making up the smooth random field.
const BLOBS: usize = 48;
/// The envelope ellipse covers this many times the wet area, leaving room for dry gaps.
const ENVELOPE_PER_WET_AREA: f64 = 1.6;
/// The field's floor between blobs, so the envelope alone still orders the cells.
const BASE: f32 = 0.05;
/// Blobs are cut off this many standard deviations from their centre (the profiles are shifted to reach 0 there).
const BLOB_SUPPORT_SIGMAS: f64 = 3.5;
/// Rain rate at the edge of the wet region, mm/h.
const EDGE_RATE: f32 = 0.05;
/// Radix selection splits a float's 32 bits into a high digit (sign, exponent and the top 6
/// mantissa bits), counted per band while the field is built, and a 17-bit low digit, counted once
/// for the few cells of the wanted high bucket. The split keeps the per-band tables small (128 KiB)
/// and lets indices into both tables be in bounds by construction.
const LOW_BITS: u32 = 17;
const HIGH_VALUES: usize = 1 << (32 - LOW_BITS);
const LOW_VALUES: usize = 1 << LOW_BITS;
/// The field is built in at most this many bands, each with its own high-digit counts: enough to
/// share the work between a few threads, few enough to bound the counts' memory on any machine.
const MAX_BANDS: usize = 4;
/// Bands have at least this many rows, so that small fields are built in one go.
const MIN_BAND_ROWS: usize = 64;
/// Cells tested at once for the wanted high digit: a branch-free test of a fixed-size chunk
/// vectorises, and only the rare chunks holding such a cell are looked at cell by cell.
const SCAN_CHUNK: usize = 32;

pub struct Synth;

/// The arguments, parsed and checked.
struct Settings {
    ny: usize,
    nx: usize,
    wet_fraction: f64,
    seed: String,
}

impl Settings {
    fn from_args(args: &Args) -> Result<Settings, ArgError> {
        let ny = positive_whole(args, "ny")?;
        let nx = positive_whole(args, "nx")?;
        // Radix selection counts cells in u32.
        match ny.checked_mul(nx) {
            Some(cells) if cells <= u64::from(u32::MAX) && usize::try_from(cells).is_ok() => {}
            _ => {
                return Err(ArgError::new(
                    "nx",
                    format!("`ny` × `nx` = {ny} × {nx} cells is too many (at most {})", u32::MAX),
                ));
            }
        }
        let wet_fraction = args.f64("wet_fraction")?;
        if !(0.0..=1.0).contains(&wet_fraction) {
            return Err(ArgError::new(
                "wet_fraction",
                format!("`wet_fraction` must be between 0 and 1, got {}", shown(args.get("wet_fraction"))),
            ));
        }
        let seed = args.str_or("seed", "0")?;
        Ok(Settings { ny: ny as usize, nx: nx as usize, wet_fraction, seed })
    }

    fn cells(&self) -> usize {
        self.ny * self.nx
    }
}

impl Plugin for Synth {
    fn name(&self) -> &'static str {
        "synth"
    }

    fn about(&self) -> &'static str {
        "deterministic synthetic precipitation field f32 [ny, nx] in mm/h, rain in one weather system"
    }

    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        Settings::from_args(args).map(|_| ())
    }

    fn output(&self, args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let settings = Settings::from_args(args)?;
        Ok(ValueMeta::Array { dtype: DType::F32, shape: vec![settings.ny, settings.nx] })
    }

    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    /// The field is written into the output once. Besides it: the blobs' profiles (exact: the
    /// storm is drawn from the seed here too), a row and the high-digit counts of each band being
    /// built and their total, then that total and the low-digit counts.
    fn estimate(&self, args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        let Ok(settings) = Settings::from_args(args) else {
            return 0;
        };
        let field = settings.cells() * size_of::<f32>();
        let profiles = profile_bytes(settings.ny, settings.nx, settings.wet_fraction, &settings.seed);
        let bands = (MAX_BANDS + 1) * HIGH_VALUES * size_of::<u32>() + MAX_BANDS * settings.nx * size_of::<f32>();
        let select = (HIGH_VALUES + LOW_VALUES) * size_of::<u32>();
        (field + profiles + bands.max(select)) as u64
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let settings = Settings::from_args(args).map_err(|e| TaskError::msg(e.message))?;
        let field = synthesise(ctx, settings.ny, settings.nx, settings.wet_fraction, &settings.seed);
        let array = Array::from_ndarray(field)
            .with_attr("units", "mm/h")
            .with_attr("wet_fraction", json!(settings.wet_fraction))
            .with_attr("seed", settings.seed);
        Ok(Value::Array(array))
    }
}

/// The field for these arguments, `[ny, nx]`.
pub(crate) fn synthesise(ctx: &TaskContext, ny: usize, nx: usize, wet_fraction: f64, seed: &str) -> ArrayD<f32> {
    let cells = ny * nx;
    let wet_cells = ((wet_fraction * cells as f64).round() as usize).min(cells);
    if wet_cells == 0 {
        return ctx.zeros(&[ny, nx]);
    }
    let storm = Storm::draw(&mut SplitMix64(fnv1a64(seed.as_bytes())));
    let shape = storm.shape(ny, nx, wet_fraction);
    let blobs: Vec<BlobProfiles> = ctx
        .par_map(storm.blobs.len(), |i| BlobProfiles::new(&shape.place(&storm.blobs[i]), ny, nx))
        .into_iter()
        .flatten()
        .collect();
    let envelope = Envelope::new(&shape);
    let band_rows = ny.div_ceil(MAX_BANDS).max(MIN_BAND_ROWS);

    let total = Mutex::new(FieldSummary::new());
    let mut field = written_array(ctx, &[ny, nx], band_rows * nx, |band, out| {
        let summary = build_rows_fastest(out, band * band_rows, nx, &blobs, &envelope);
        total.lock().unwrap_or_else(PoisonError::into_inner).merge(&summary);
    });
    let total = total.into_inner().unwrap_or_else(PoisonError::into_inner);
    let out = field.as_slice_mut().expect("a new array is in C order");

    // Exactly `wet_cells` values lie above the value ranked just below them (ties aside).
    let threshold = if wet_cells == cells { -1.0 } else { select_counted(out, &total.high, cells - wet_cells - 1) };
    if total.max <= threshold {
        out.fill(0.0);
    } else {
        let rain = RainRate::new(threshold, total.max, storm.peak_rate);
        ctx.par_chunks_mut(out, band_rows * nx, |_, cells| rain.apply_fastest(cells));
    }
    field
}

/// [`build_rows`], compiled for AVX2 when the CPU has it (see [`has_avx2`]).
fn build_rows_fastest(
    out: &mut ChunkWriter<'_, f32>,
    first_row: usize,
    nx: usize,
    blobs: &[BlobProfiles],
    envelope: &Envelope,
) -> FieldSummary {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        #[target_feature(enable = "avx2")]
        fn avx2(
            out: &mut ChunkWriter<'_, f32>,
            first_row: usize,
            nx: usize,
            blobs: &[BlobProfiles],
            envelope: &Envelope,
        ) -> FieldSummary {
            build_rows(out, first_row, nx, blobs, envelope)
        }
        // SAFETY: the CPU has AVX2, as just checked; that is all `avx2` requires.
        return unsafe { avx2(out, first_row, nx, blobs, envelope) };
    }
    build_rows(out, first_row, nx, blobs, envelope)
}

/// Writes the grid rows from `first_row` on that `out` holds, each built in a row that stays in
/// L1: the floor, every blob that reaches it in the blobs' order (as a blob-by-blob build would
/// add them to each cell), then the envelope; and sums up what the rain needs to know of them.
#[inline(always)]
fn build_rows(
    out: &mut ChunkWriter<'_, f32>,
    first_row: usize,
    nx: usize,
    blobs: &[BlobProfiles],
    envelope: &Envelope,
) -> FieldSummary {
    let mut summary = FieldSummary::new();
    let mut row = vec![BASE; nx];
    for y in first_row..first_row + out.remaining() / nx {
        row.fill(BASE);
        for blob in blobs {
            blob.add_to_row(&mut row, y);
        }
        envelope.apply(&mut row, y);
        summary.add(&row);
        out.write_slice(&row);
    }
    summary
}

/// Bytes of the profiles of the blobs that reach the grid, as [`synthesise`] makes them.
fn profile_bytes(ny: usize, nx: usize, wet_fraction: f64, seed: &str) -> usize {
    let storm = Storm::draw(&mut SplitMix64(fnv1a64(seed.as_bytes())));
    let shape = storm.shape(ny, nx, wet_fraction);
    let floats: usize = storm
        .blobs
        .iter()
        .filter_map(|blob| {
            let (rows, cols) = shape.place(blob).support(ny, nx)?;
            Some(rows.len() + cols.len())
        })
        .sum();
    floats * size_of::<f32>() + storm.blobs.len() * size_of::<BlobProfiles>()
}

/// splitmix64 (Steele, Lea & Flood 2014): tiny, fast, and good enough for placing weather.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * unit
    }
}

/// One blob of the smooth field, in the storm's normalised coordinates.
struct Blob {
    /// Position along the major and minor axes, in units of the semi-axes.
    along: f64,
    across: f64,
    /// Standard deviation in units of the geometric-mean semi-axis.
    size: f64,
    amplitude: f64,
}

/// A weather system independent of the grid size and wet fraction.
struct Storm {
    /// Centre as fractions of the grid's height and width.
    centre_y: f64,
    centre_x: f64,
    /// Direction of the major axis, radians from the x axis.
    angle: f64,
    /// Major over minor semi-axis.
    aspect: f64,
    peak_rate: f32,
    blobs: Vec<Blob>,
}

impl Storm {
    fn draw(rng: &mut SplitMix64) -> Storm {
        let centre_y = rng.uniform(0.3, 0.7);
        let centre_x = rng.uniform(0.3, 0.7);
        let angle = rng.uniform(0.0, std::f64::consts::PI);
        let aspect = rng.uniform(1.3, 2.2);
        let peak_rate = rng.uniform(10.0, 40.0) as f32;
        let blobs = (0..BLOBS)
            .map(|_| {
                // Uniform over a disc a little wider than the ellipse.
                let radius = 1.2 * rng.uniform(0.0, 1.0).sqrt();
                let bearing = rng.uniform(0.0, std::f64::consts::TAU);
                Blob {
                    along: radius * bearing.cos(),
                    across: radius * bearing.sin(),
                    size: rng.uniform(0.05, 0.18),
                    amplitude: rng.uniform(0.3, 1.0),
                }
            })
            .collect();
        Storm { centre_y, centre_x, angle, aspect, peak_rate, blobs }
    }

    /// The storm laid out on a grid, sized for `wet_fraction`.
    fn shape(&self, ny: usize, nx: usize, wet_fraction: f64) -> StormShape {
        let area = ENVELOPE_PER_WET_AREA * wet_fraction * (ny * nx) as f64;
        let major = (area * self.aspect / std::f64::consts::PI).sqrt().max(0.5);
        StormShape {
            centre_y: self.centre_y * (ny as f64 - 1.0),
            centre_x: self.centre_x * (nx as f64 - 1.0),
            cos: self.angle.cos(),
            sin: self.angle.sin(),
            major,
            minor: (major / self.aspect).max(0.5),
        }
    }
}

/// A storm's ellipse in grid cells.
struct StormShape {
    centre_y: f64,
    centre_x: f64,
    cos: f64,
    sin: f64,
    major: f64,
    minor: f64,
}

/// A blob in grid cells.
struct PlacedBlob {
    y: f64,
    x: f64,
    sigma: f64,
    amplitude: f64,
}

impl StormShape {
    fn place(&self, blob: &Blob) -> PlacedBlob {
        let (along, across) = (blob.along * self.major, blob.across * self.minor);
        PlacedBlob {
            x: self.centre_x + along * self.cos - across * self.sin,
            y: self.centre_y + along * self.sin + across * self.cos,
            sigma: (blob.size * (self.major * self.minor).sqrt()).max(0.5),
            amplitude: blob.amplitude,
        }
    }
}

impl PlacedBlob {
    /// The grid rows and columns within the blob's cut-off, if it reaches the grid at all.
    fn support(&self, ny: usize, nx: usize) -> Option<(Range<usize>, Range<usize>)> {
        let reach = BLOB_SUPPORT_SIGMAS * self.sigma;
        Some((support(self.y, reach, ny)?, support(self.x, reach, nx)?))
    }
}

/// Grid indices within `reach` of `centre`, if any.
fn support(centre: f64, reach: f64, len: usize) -> Option<Range<usize>> {
    let start = (centre - reach).ceil().max(0.0);
    let end = ((centre + reach).floor() + 1.0).min(len as f64);
    (start < end).then_some(start as usize..end as usize)
}

/// A Gaussian blob over its support as the outer product of a row and a column profile: cell
/// `(y, x)` gets `row_weights[y − rows.start] · col_weights[x − cols.start]`.
struct BlobProfiles {
    rows: Range<usize>,
    cols: Range<usize>,
    /// The amplitude times the profile across the rows.
    row_weights: Vec<f32>,
    col_weights: Vec<f32>,
}

impl BlobProfiles {
    fn new(blob: &PlacedBlob, ny: usize, nx: usize) -> Option<BlobProfiles> {
        let (rows, cols) = blob.support(ny, nx)?;
        // The Gaussian less its value at the cut-off, so the blob fades to exactly 0 at the edge of
        // its support: a jump there, however small, would show as a straight edge of the rain.
        let edge = (-0.5 * BLOB_SUPPORT_SIGMAS * BLOB_SUPPORT_SIGMAS).exp();
        let scale = -0.5 / (blob.sigma * blob.sigma);
        let profile = |centre: f64, i: usize| (((i as f64 - centre).powi(2) * scale).exp() - edge).max(0.0) as f32;
        let amplitude = blob.amplitude as f32;
        Some(BlobProfiles {
            row_weights: rows.clone().map(|y| amplitude * profile(blob.y, y)).collect(),
            col_weights: cols.clone().map(|x| profile(blob.x, x)).collect(),
            rows,
            cols,
        })
    }

    /// Adds the blob to grid row `y`, if it reaches it.
    #[inline(always)]
    fn add_to_row(&self, row: &mut [f32], y: usize) {
        let Some(&weight) = y.checked_sub(self.rows.start).and_then(|i| self.row_weights.get(i)) else {
            return;
        };
        for (cell, &col_weight) in row[self.cols.clone()].iter_mut().zip(&self.col_weights) {
            *cell += weight * col_weight;
        }
    }
}

/// The storm's envelope `1 / (1 + q)³`, with `q` the squared elliptical distance from the centre
/// (1 on the ellipse). Positive everywhere, so every cell is ranked.
struct Envelope {
    centre_y: f64,
    /// Where column 0 is, relative to the centre.
    dx0: f32,
    cos: f32,
    sin: f32,
    inv_major: f32,
    inv_minor: f32,
}

impl Envelope {
    fn new(shape: &StormShape) -> Envelope {
        Envelope {
            centre_y: shape.centre_y,
            dx0: -shape.centre_x as f32,
            cos: shape.cos as f32,
            sin: shape.sin as f32,
            inv_major: (1.0 / shape.major) as f32,
            inv_minor: (1.0 / shape.minor) as f32,
        }
    }

    /// Multiplies each cell of grid row `y` by the envelope.
    #[inline(always)]
    fn apply(&self, row: &mut [f32], y: usize) {
        let Envelope { dx0, cos, sin, inv_major, inv_minor, .. } = *self;
        let dy = (y as f64 - self.centre_y) as f32;
        // Coordinates along and across the major axis are linear along a row.
        let along0 = dx0 * cos + dy * sin;
        let across0 = -dx0 * sin + dy * cos;
        // An i32 column index converts to f32 in vector registers; a usize one does not.
        for (cell, x) in row.iter_mut().zip(0i32..) {
            let x = x as f32;
            let along = (along0 + x * cos) * inv_major;
            let across = (across0 - x * sin) * inv_minor;
            let t = 1.0 / (1.0 + along * along + across * across);
            *cell *= t * t * t;
        }
    }
}

/// What the rain needs to know of the whole field: its high radix digits and its maximum.
struct FieldSummary {
    high: Box<[u32; HIGH_VALUES]>,
    max: f32,
}

impl FieldSummary {
    fn new() -> FieldSummary {
        FieldSummary { high: zeroed_counts(), max: f32::MIN }
    }

    /// Counts the high digits of `values` (non-negative) and takes in their maximum.
    #[inline(always)]
    fn add(&mut self, values: &[f32]) {
        count_high_digits(values, &mut self.high);
        self.max = self.max.max(max_of(values));
    }

    fn merge(&mut self, other: &FieldSummary) {
        for (count, &more) in self.high.iter_mut().zip(other.high.iter()) {
            *count += more;
        }
        self.max = self.max.max(other.max);
    }
}

/// A zeroed counts table on the heap (too large for a stack).
fn zeroed_counts<const N: usize>() -> Box<[u32; N]> {
    vec![0u32; N].into_boxed_slice().try_into().expect("a slice of N counts")
}

#[inline(always)]
fn count_high_digits(values: &[f32], counts: &mut [u32; HIGH_VALUES]) {
    for v in values {
        // A u32 shifted by LOW_BITS is below HIGH_VALUES: no bounds check.
        counts[(v.to_bits() >> LOW_BITS) as usize] += 1;
    }
}

/// The largest of `values` (none NaN), or `f32::MIN` for none. Kept in independent lanes so the
/// comparisons vectorise; the maximum does not depend on the order they are made in.
#[inline(always)]
fn max_of(values: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::MIN; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder().iter().copied().fold(f32::MIN, f32::max);
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    lanes.into_iter().fold(rest, f32::max)
}

/// The value at ascending rank `rank` (0-based) of non-negative `values`, by radix selection on
/// the bit patterns (which order like the values for non-negative floats).
#[cfg(test)]
fn select(values: &[f32], rank: usize) -> f32 {
    let mut high = zeroed_counts();
    count_high_digits(values, &mut high);
    select_counted(values, &high, rank)
}

/// [`select`], given the counts of the high digits of `values`.
fn select_counted(values: &[f32], high_counts: &[u32; HIGH_VALUES], rank: usize) -> f32 {
    let (high, below) = bucket_of_rank(high_counts, rank);
    let mut low_counts = zeroed_counts::<LOW_VALUES>();
    let in_bucket = |v: &f32| v.to_bits() >> LOW_BITS == high;
    let chunks = values.chunks_exact(SCAN_CHUNK);
    let rest = chunks.remainder();
    for chunk in chunks.chain([rest]) {
        if chunk.iter().fold(false, |any, v| any | in_bucket(v)) {
            for v in chunk.iter().filter(|v| in_bucket(v)) {
                low_counts[v.to_bits() as usize & (LOW_VALUES - 1)] += 1;
            }
        }
    }
    let (low, _) = bucket_of_rank(&low_counts[..], rank - below);
    f32::from_bits(high << LOW_BITS | low)
}

/// The bucket holding the element of ascending `rank`, and how many elements lie below it.
fn bucket_of_rank(counts: &[u32], rank: usize) -> (u32, usize) {
    let mut below = 0usize;
    for (bucket, &count) in counts.iter().enumerate() {
        if rank < below + count as usize {
            return (bucket as u32, below);
        }
        below += count as usize;
    }
    unreachable!("rank {rank} is within the {below} values counted")
}

/// Turns the field into rain: 0 at or below `threshold`, else rising from `EDGE_RATE` with the
/// square of the height above the threshold to `peak_rate` at the field's maximum `max`.
struct RainRate {
    threshold: f32,
    scale: f32,
    span: f32,
}

impl RainRate {
    /// For a field whose maximum lies above `threshold`.
    fn new(threshold: f32, max: f32, peak_rate: f32) -> RainRate {
        RainRate { threshold, scale: 1.0 / (max - threshold), span: peak_rate - EDGE_RATE }
    }

    /// [`RainRate::apply`], compiled for AVX2 when the CPU has it (see [`has_avx2`]).
    fn apply_fastest(&self, cells: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            #[target_feature(enable = "avx2")]
            fn avx2(rain: &RainRate, cells: &mut [f32]) {
                rain.apply(cells);
            }
            // SAFETY: the CPU has AVX2, as just checked; that is all `avx2` requires.
            return unsafe { avx2(self, cells) };
        }
        self.apply(cells);
    }

    #[inline(always)]
    fn apply(&self, cells: &mut [f32]) {
        let RainRate { threshold, scale, span } = *self;
        for cell in cells {
            let height = (*cell - threshold) * scale;
            *cell = if *cell > threshold { EDGE_RATE + span * height * height } else { 0.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, ndarray_of, plan, run};
    use runner_plugin::serde_json::json;

    fn field(ny: usize, nx: usize, wet: f64, seed: &str) -> Vec<f32> {
        let value = run(&Synth, json!({"ny": ny, "nx": nx, "wet_fraction": wet, "seed": seed}), &[]).unwrap();
        let array = ndarray_of::<f32>(&value);
        assert_eq!(array.shape(), &[ny, nx]);
        array.iter().copied().collect()
    }

    fn wet_fraction_of(cells: &[f32]) -> f64 {
        cells.iter().filter(|&&v| v > 0.0).count() as f64 / cells.len() as f64
    }

    /// Rows and columns spanned by the wet cells: (first row, last row, first col, last col).
    fn wet_box(cells: &[f32], nx: usize) -> (usize, usize, usize, usize) {
        let mut b = (usize::MAX, 0, usize::MAX, 0);
        for (i, _) in cells.iter().enumerate().filter(|(_, v)| **v > 0.0) {
            let (y, x) = (i / nx, i % nx);
            b = (b.0.min(y), b.1.max(y), b.2.min(x), b.3.max(x));
        }
        b
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_field() {
        let a = field(97, 104, 0.3, "2026-11-01T00Z/3/12");
        let b = field(97, 104, 0.3, "2026-11-01T00Z/3/12");
        let c = field(97, 104, 0.3, "2026-11-01T00Z/4/12");
        let bits = |f: &[f32]| f.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        assert_ne!(bits(&a), bits(&c));
    }

    #[test]
    fn wet_fraction_is_as_requested_and_dry_cells_are_zero() {
        for seed in ["0", "a", "cycle/7/3"] {
            for wet in [0.02, 0.1, 0.3, 0.6, 1.0] {
                let cells = field(150, 170, wet, seed);
                let got = wet_fraction_of(&cells);
                assert!((got - wet).abs() <= 0.05, "seed {seed}: asked {wet}, got {got}");
                assert!(cells.iter().all(|&v| v >= 0.0 && v.is_finite()));
                // Rain starts at a light rate: no cell is "almost" dry.
                assert!(cells.iter().all(|&v| v == 0.0 || v >= EDGE_RATE * 0.999));
            }
        }
        assert!(field(50, 60, 0.0, "x").iter().all(|&v| v.to_bits() == 0));
    }

    #[test]
    fn wet_region_grows_with_wet_fraction() {
        for seed in ["0", "b", "cycle/1/1", "cycle/2/6"] {
            let areas: Vec<usize> = [0.02, 0.1, 0.3, 0.6]
                .iter()
                .map(|&wet| {
                    let (y0, y1, x0, x1) = wet_box(&field(120, 130, wet, seed), 130);
                    (y1 - y0 + 1) * (x1 - x0 + 1)
                })
                .collect();
            assert!(areas.windows(2).all(|w| w[0] < w[1] || w[0] == 120 * 130), "seed {seed}: {areas:?}");
            // One system: the smallest wet region is compact, not spread over the whole grid.
            assert!(areas[0] < 120 * 130 / 4, "seed {seed}: {areas:?}");
        }
    }

    #[test]
    fn rain_is_heavier_inside_the_system() {
        let cells = field(120, 120, 0.3, "peak");
        let max = cells.iter().copied().fold(0.0, f32::max);
        assert!((10.0..=40.0).contains(&max), "{max}");
        let wet: Vec<f32> = cells.iter().copied().filter(|&v| v > 0.0).collect();
        let mean = wet.iter().sum::<f32>() / wet.len() as f32;
        assert!(mean > 2.0 * EDGE_RATE && mean < max, "{mean}");
    }

    /// The bytes of fields of several shapes and wet fractions, pinned: faster kernels must not
    /// change what a seed gives (the hashes were taken from the straightforward kernel).
    #[test]
    fn field_bytes_are_pinned() {
        for (ny, nx, wet, seed, expected) in [
            (97, 104, 0.3, "2026-11-01T00Z/3/12", 10583158620679962312),
            (300, 257, 0.02, "pinned", 10176656061249716069),
            (300, 257, 0.6, "pinned", 8428035585344154552),
            (211, 1003, 1.0, "all wet", 10124021760852383920),
            (1, 5000, 0.5, "one row", 105462800531112377),
        ] {
            let bytes: Vec<u8> = field(ny, nx, wet, seed).iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(crate::fnv1a64(&bytes), expected, "{ny}×{nx}, wet {wet}, seed {seed}");
        }
    }

    #[test]
    fn radix_selection_matches_a_sort() {
        let mut rng = testing::TestRng::new(3);
        let values: Vec<f32> = (0..5000).map(|_| rng.unit() * rng.unit() * 100.0).collect();
        let mut sorted = values.clone();
        sorted.sort_by(f32::total_cmp);
        for rank in [0, 1, 17, 2500, 4998, 4999] {
            assert_eq!(select(&values, rank), sorted[rank], "rank {rank}");
        }
    }

    #[test]
    fn metadata_and_arguments() {
        let (meta, estimate) = plan(&Synth, json!({"ny": 970, "nx": "1042", "wet_fraction": "0.3"}), &[]).unwrap();
        assert_eq!(meta, ValueMeta::Array { dtype: DType::F32, shape: vec![970, 1042] });
        let field_bytes = 970 * 1042 * 4;
        assert!((field_bytes..field_bytes + (1 << 20)).contains(&estimate), "{estimate}");
        for (bad, arg) in [
            (json!({"ny": -1, "nx": 3, "wet_fraction": 0.1}), "ny"),
            (json!({"ny": 0, "nx": 3, "wet_fraction": 0.1}), "ny"),
            (json!({"ny": 3, "nx": "wide", "wet_fraction": 0.1}), "nx"),
            (json!({"ny": 3, "nx": 3, "wet_fraction": 1.5}), "wet_fraction"),
            (json!({"ny": 3, "nx": 3, "wet_fraction": "-0.1"}), "wet_fraction"),
            (json!({"ny": 3, "nx": 3}), "wet_fraction"),
            (json!({"ny": 100000, "nx": 100000, "wet_fraction": 0.1}), "nx"),
        ] {
            let err = Synth.check(&testing::args(bad.clone())).unwrap_err();
            assert_eq!(err.arg.as_deref(), Some(arg), "{bad}: {err}");
            assert!(err.message.contains(&format!("`{arg}`")), "{err}");
        }
        let err = Synth.check(&testing::args(json!({"ny": -1, "nx": 3, "wet_fraction": 0}))).unwrap_err();
        assert_eq!(err.message, "`ny` must be a positive whole number, got -1");
    }
}
