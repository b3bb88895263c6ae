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
//! Cost: the blobs are separable, so each is added as an outer product of two 1-D profiles over
//! its 3.5σ support, and the threshold is found by a two-pass radix selection; no per-cell
//! `exp`, no sort.

use runner_plugin::serde_json::json;
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{fnv1a64, positive_whole, shown};

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
/// Radix selection splits a float's 32 bits into two 16-bit digits.
const DIGIT_VALUES: usize = 1 << 16;

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

    /// The field is built in the output itself; the two radix histograms are the only extra.
    fn estimate(&self, args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        let Ok(settings) = Settings::from_args(args) else {
            return 0;
        };
        let histograms = 2 * DIGIT_VALUES * std::mem::size_of::<u32>();
        let profiles = 2 * (settings.ny + settings.nx) * std::mem::size_of::<f32>();
        (settings.cells() * std::mem::size_of::<f32>() + histograms + profiles) as u64
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let settings = Settings::from_args(args).map_err(|e| TaskError::msg(e.message))?;
        let mut field = ctx.zeros::<f32>(&[settings.ny, settings.nx]);
        let cells = field.as_slice_mut().expect("a new array is in C order");
        synthesise(cells, settings.ny, settings.nx, settings.wet_fraction, &settings.seed);
        let array = Array::from_ndarray(field)
            .with_attr("units", "mm/h")
            .with_attr("wet_fraction", json!(settings.wet_fraction))
            .with_attr("seed", settings.seed);
        Ok(Value::Array(array))
    }
}

/// Fills `out` (`ny × nx`, C order, zero on entry) with the field for these arguments.
pub(crate) fn synthesise(out: &mut [f32], ny: usize, nx: usize, wet_fraction: f64, seed: &str) {
    let cells = ny * nx;
    let wet_cells = ((wet_fraction * cells as f64).round() as usize).min(cells);
    if wet_cells == 0 {
        return;
    }
    let storm = Storm::draw(&mut SplitMix64(fnv1a64(seed.as_bytes())));
    let shape = storm.shape(ny, nx, wet_fraction);
    out.fill(BASE);
    for blob in &storm.blobs {
        add_blob(out, ny, nx, &shape.place(blob));
    }
    apply_envelope(out, nx, &shape);
    // Exactly `wet_cells` values lie above the value ranked just below them (ties aside).
    let threshold = if wet_cells == cells { -1.0 } else { select(out, cells - wet_cells - 1) };
    to_rain_rate(out, threshold, storm.peak_rate);
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

/// Adds a Gaussian blob over its support as the outer product of its row and column profiles.
fn add_blob(out: &mut [f32], ny: usize, nx: usize, blob: &PlacedBlob) {
    let reach = BLOB_SUPPORT_SIGMAS * blob.sigma;
    let (Some(rows), Some(cols)) = (support(blob.y, reach, ny), support(blob.x, reach, nx)) else {
        return;
    };
    // The Gaussian less its value at the cut-off, so the blob fades to exactly 0 at the edge of
    // its support: a jump there, however small, would show as a straight edge of the rain.
    let edge = (-0.5 * BLOB_SUPPORT_SIGMAS * BLOB_SUPPORT_SIGMAS).exp();
    let profile = |centre: f64, range: std::ops::Range<usize>| -> Vec<f32> {
        let scale = -0.5 / (blob.sigma * blob.sigma);
        range.map(|i| (((i as f64 - centre).powi(2) * scale).exp() - edge).max(0.0) as f32).collect()
    };
    let across_rows = profile(blob.y, rows.clone());
    let across_cols = profile(blob.x, cols.clone());
    let amplitude = blob.amplitude as f32;
    for (y, &row_weight) in rows.zip(&across_rows) {
        let weight = amplitude * row_weight;
        let row = &mut out[y * nx + cols.start..y * nx + cols.end];
        for (cell, &col_weight) in row.iter_mut().zip(&across_cols) {
            *cell += weight * col_weight;
        }
    }
}

/// Grid indices within `reach` of `centre`, if any.
fn support(centre: f64, reach: f64, len: usize) -> Option<std::ops::Range<usize>> {
    let start = (centre - reach).ceil().max(0.0);
    let end = ((centre + reach).floor() + 1.0).min(len as f64);
    (start < end).then_some(start as usize..end as usize)
}

/// Multiplies each cell by the storm's envelope `1 / (1 + q)³`, with `q` the squared elliptical
/// distance from the centre (1 on the ellipse). Positive everywhere, so every cell is ranked.
fn apply_envelope(out: &mut [f32], nx: usize, shape: &StormShape) {
    let (cos, sin) = (shape.cos as f32, shape.sin as f32);
    let (inv_major, inv_minor) = ((1.0 / shape.major) as f32, (1.0 / shape.minor) as f32);
    for (y, row) in out.chunks_exact_mut(nx).enumerate() {
        let dy = (y as f64 - shape.centre_y) as f32;
        let dx0 = -shape.centre_x as f32;
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

/// The value at ascending rank `rank` (0-based) of non-negative `values`, by radix selection on
/// the bit patterns (which order like the values for non-negative floats).
fn select(values: &[f32], rank: usize) -> f32 {
    let mut counts = vec![0u32; DIGIT_VALUES];
    for v in values {
        counts[(v.to_bits() >> 16) as usize] += 1;
    }
    let (high, below) = bucket_of_rank(&counts, rank);
    counts.fill(0);
    for v in values {
        let bits = v.to_bits();
        if bits >> 16 == high {
            counts[(bits & 0xffff) as usize] += 1;
        }
    }
    let (low, _) = bucket_of_rank(&counts, rank - below);
    f32::from_bits(high << 16 | low)
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
/// square of the height above the threshold to `peak_rate` at the field's maximum.
fn to_rain_rate(field: &mut [f32], threshold: f32, peak_rate: f32) {
    let max = field.iter().copied().fold(f32::MIN, f32::max);
    if max <= threshold {
        field.fill(0.0);
        return;
    }
    let scale = 1.0 / (max - threshold);
    let span = peak_rate - EDGE_RATE;
    for cell in field.iter_mut() {
        let height = (*cell - threshold) * scale;
        *cell = if *cell > threshold { EDGE_RATE + span * height * height } else { 0.0 };
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
