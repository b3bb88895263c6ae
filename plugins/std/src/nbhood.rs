//! `nbhood`: the neighbourhood mean of a field over a square or circular window of `radius`
//! cells on its last two axes, separately for each index of the leading axes. At the edges the
//! mean is over the window cells inside the grid.
//!
//! Trimming: fields such as exceedance probabilities are mostly one background value, 0 (dry)
//! or 1. Each 2-D slice is scanned for the bounding box of the cells that differ from whichever
//! background gives the smaller box; cells farther than the radius from that box have windows of
//! background only, so they are set to it exactly, and the work and the temporaries cover only
//! the box dilated by the radius. A slice of one value is copied through.
//!
//! Trimming never changes a value, because each output cell is computed from its window alone in
//! a fixed order: for every row of the window, a run sum `((v[x] + v[x-1]) + v[x+1]) + ...` out
//! to the row's half-width (the radius for a square, `⌊√(r² − dy²)⌋` for a circle), cells outside
//! the grid counting as 0; then those runs summed from the top row of the window down, starting
//! from 0; then divided by the number of window cells inside the grid. Nothing depends on where
//! the box starts. A window of background only gives exactly 0 or exactly 1 by this computation
//! too (sums of up to 2²⁴ ones are exact), so trimmed and untrimmed results agree bit for bit.
//!
//! Cost: O(radius) per cell (each row's runs for all half-widths are built by widening one run),
//! vectorisable inner loops over columns, one output allocation, and per worker a few rows of
//! temporaries as wide as the box.

use std::ops::Range;

use runner_plugin::ndarray::{ArrayD, ArrayViewD};
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{array_shape_of, expect_array, one_input_meta, one_input_value, positive_whole, shown};

const ARGS: &[ArgSpec] = &[
    ArgSpec::required("radius", "half-width of the window in cells, a positive whole number"),
    ArgSpec::optional("shape", "square", "window shape: square or circle"),
];

/// Far beyond any useful neighbourhood; it keeps the window tables small.
const MAX_RADIUS: u64 = 1_000_000;
/// Rows per parallel band are at least this many, so band overheads stay small.
const MIN_BAND_ROWS: usize = 16;

pub struct Nbhood;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowShape {
    Square,
    Circle,
}

/// The arguments, parsed and checked.
struct Settings {
    radius: usize,
    shape: WindowShape,
}

impl Settings {
    fn from_args(args: &Args) -> Result<Settings, ArgError> {
        let radius = positive_whole(args, "radius")?;
        if radius > MAX_RADIUS {
            return Err(ArgError::new("radius", format!("`radius` must be at most {MAX_RADIUS} cells, got {radius}")));
        }
        let shape = match args.str_or("shape", "square")?.as_str() {
            "square" => WindowShape::Square,
            "circle" => WindowShape::Circle,
            _ => {
                return Err(ArgError::new(
                    "shape",
                    format!("`shape` must be \"square\" or \"circle\", got {}", shown(args.get("shape"))),
                ));
            }
        };
        Ok(Settings { radius: radius as usize, shape })
    }
}

impl Plugin for Nbhood {
    fn name(&self) -> &'static str {
        "nbhood"
    }

    fn about(&self) -> &'static str {
        "neighbourhood mean over a square or circular window on the last two axes, trimmed to the wet area"
    }

    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        Settings::from_args(args).map(|_| ())
    }

    fn output(&self, args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        Settings::from_args(args)?;
        let input = one_input_meta(self.name(), inputs)?;
        match array_shape_of(self.name(), input, &[DType::F32])? {
            None => Ok(ValueMeta::Unknown),
            Some((_, shape)) if shape.len() < 2 => Err(ArgError::general(format!(
                "`nbhood` needs an array of at least 2 dimensions, but input `{}` is {}",
                input.name, input.item
            ))),
            Some((dtype, shape)) => Ok(ValueMeta::Array { dtype, shape }),
        }
    }

    /// The output plus each worker's temporaries. Planning assumes the whole field needs work;
    /// at dispatch the input is scanned for the widest trimmed box.
    fn estimate_follows_data(&self) -> bool {
        true
    }

    fn estimate(&self, args: &Args, inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        let Ok(settings) = Settings::from_args(args) else {
            return output.bytes().unwrap_or(0);
        };
        let dispatch_input = match inputs {
            InputsForEstimate::Dispatch(inputs) => one_input_value(self.name(), &inputs)
                .ok()
                .and_then(|(_, value)| value.as_array().ok())
                .filter(|array| array.dtype() == DType::F32 && array.shape().len() >= 2),
            InputsForEstimate::Plan(_) => None,
        };
        let shape = match (dispatch_input, output) {
            (Some(array), _) => array.shape().to_vec(),
            (None, ValueMeta::Array { shape, .. }) if shape.len() >= 2 => shape.clone(),
            _ => return output.bytes().unwrap_or(0),
        };
        let (ny, nx) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        let cells: usize = shape.iter().product();
        let output_bytes = (cells * std::mem::size_of::<f32>()) as u64;
        if ny == 0 || nx == 0 {
            return output_bytes;
        }
        let window = Window::new(settings.radius, settings.shape, ny, nx);
        let widest = match dispatch_input.and_then(|array| array.view::<f32>().ok()) {
            Some(view) => match view.as_slice() {
                Some(data) => data
                    .chunks_exact(ny * nx)
                    .map(|slice| match Content::of(slice, nx).work_area(&window, ny, nx) {
                        Some((_, cols)) => cols.len(),
                        None => 0,
                    })
                    .max()
                    .unwrap_or(0),
                None => nx,
            },
            None => nx,
        };
        let workers = rayon::current_num_threads() as u64;
        output_bytes + workers * window.temporary_bytes(widest)
    }

    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let settings = Settings::from_args(args).map_err(|e| TaskError::msg(e.message))?;
        let (name, value) = one_input_value(self.name(), inputs)?;
        let input = expect_array(self.name(), name, value, &[DType::F32])?;
        if input.shape().len() < 2 {
            return Err(TaskError::msg(format!(
                "`nbhood` needs an array of at least 2 dimensions, but input `{name}` is {}",
                value.meta()
            )));
        }
        let view = input.view::<f32>().map_err(TaskError::msg)?;
        let out = neighbourhood_mean(ctx, &view, settings.radius, settings.shape, true);
        let mut array = Array::from_ndarray(out);
        *array.attrs_mut() = input.attrs().clone();
        Ok(Value::Array(array))
    }
}

/// The neighbourhood mean of `input` (≥ 2 dims, C order) over its last two axes; with `trim`
/// the work is limited to the non-background box of each slice, with identical results.
pub(crate) fn neighbourhood_mean(
    ctx: &TaskContext,
    input: &ArrayViewD<'_, f32>,
    radius: usize,
    shape: WindowShape,
    trim: bool,
) -> ArrayD<f32> {
    let dims = input.shape();
    let (ny, nx) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let mut out = ctx.zeros::<f32>(dims);
    let plane = ny * nx;
    if plane == 0 || out.is_empty() {
        return out;
    }
    // Views of engine arrays are always in C order; anything else is copied once.
    let standard = input.as_standard_layout();
    let data = standard.as_slice().expect("standard layout is contiguous");
    let window = Window::new(radius, shape, ny, nx);
    let flat = out.as_slice_mut().expect("a new array is in C order");
    let workers = rayon::current_num_threads().max(1);
    let slices = flat.len() / plane;
    let content_of = |slice: &[f32]| {
        if trim { Content::of(slice, nx) } else { Content::Everything }
    };

    if slices >= workers {
        // Enough slices to keep every worker busy: one slice per piece of work.
        ctx.par_chunks_mut(flat, plane, |s, out_slice| {
            let slice = &data[s * plane..(s + 1) * plane];
            smooth_band(slice, out_slice, 0..ny, &window, &content_of(slice), ny, nx);
        });
    } else {
        // Few large slices: split each into bands of rows.
        let band_rows = ny.div_ceil(2 * workers).max(MIN_BAND_ROWS).max(4 * window.reach_y);
        for (slice, out_slice) in data.chunks_exact(plane).zip(flat.chunks_exact_mut(plane)) {
            let content = content_of(slice);
            ctx.par_chunks_mut(out_slice, band_rows * nx, |b, out_band| {
                let rows = b * band_rows..(b * band_rows + out_band.len() / nx);
                smooth_band(slice, out_band, rows, &window, &content, ny, nx);
            });
        }
    }
    out
}

/// The window on one grid, clamped to what the grid can hold: rows beyond the grid's height
/// and columns beyond its width only ever add zeros, so leaving them out changes nothing.
struct Window {
    /// Rows of the window above (and below) its centre: min(radius, ny − 1).
    reach_y: usize,
    /// Half-width of the window's row at offset `dy`, at index `dy + reach_y`; at most nx − 1.
    half_widths: Vec<usize>,
    /// For each row offset, the slot of its run sums among `distinct`.
    slots: Vec<usize>,
    /// The distinct half-widths, ascending.
    distinct: Vec<usize>,
}

impl Window {
    fn new(radius: usize, shape: WindowShape, ny: usize, nx: usize) -> Window {
        let reach_y = radius.min(ny.saturating_sub(1));
        let half_widths: Vec<usize> = (0..=2 * reach_y)
            .map(|i| {
                let dy = i.abs_diff(reach_y) as u64;
                let full = match shape {
                    WindowShape::Square => radius,
                    WindowShape::Circle => ((radius as u64).pow(2) - dy * dy).isqrt() as usize,
                };
                full.min(nx.saturating_sub(1))
            })
            .collect();
        let mut distinct = half_widths.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let slots =
            half_widths.iter().map(|w| distinct.binary_search(w).expect("every half-width is listed")).collect();
        Window { reach_y, half_widths, slots, distinct }
    }

    /// Half-width of the widest row.
    fn reach_x(&self) -> usize {
        self.distinct.last().copied().unwrap_or(0)
    }

    /// Bytes of temporaries one worker needs for a box `width` columns wide.
    fn temporary_bytes(&self, width: usize) -> u64 {
        if width == 0 {
            return 0;
        }
        let floats = (width + 2 * self.reach_x()) + (self.distinct.len() + 2) * width;
        (floats * std::mem::size_of::<f32>()) as u64
    }
}

/// What trimming found in one 2-D slice.
#[derive(Debug, Clone, PartialEq)]
enum Content {
    /// Trimming is off: every cell is worked on.
    Everything,
    /// Every cell is `value`, 0 or 1: so is every window mean.
    Uniform(f32),
    /// Cells other than `background` (0 or 1) lie within `rows` × `cols`.
    Patch { background: f32, rows: Range<usize>, cols: Range<usize> },
}

impl Content {
    fn of(slice: &[f32], nx: usize) -> Content {
        match (bounding_box(slice, nx, 0.0), bounding_box(slice, nx, 1.0)) {
            (None, _) => Content::Uniform(0.0),
            (_, None) => Content::Uniform(1.0),
            (Some(zero), Some(one)) => {
                let area = |(rows, cols): &(Range<usize>, Range<usize>)| rows.len() * cols.len();
                let (background, (rows, cols)) = if area(&zero) <= area(&one) { (0.0, zero) } else { (1.0, one) };
                Content::Patch { background, rows, cols }
            }
        }
    }

    /// The cells whose windows reach a non-background cell, and the background elsewhere;
    /// `None` when no cell needs work.
    fn work_area(&self, window: &Window, ny: usize, nx: usize) -> Option<(Range<usize>, Range<usize>)> {
        match self {
            Content::Everything => Some((0..ny, 0..nx)),
            Content::Uniform(_) => None,
            Content::Patch { rows, cols, .. } => Some((
                rows.start.saturating_sub(window.reach_y)..(rows.end + window.reach_y).min(ny),
                cols.start.saturating_sub(window.reach_x())..(cols.end + window.reach_x()).min(nx),
            )),
        }
    }

    fn background(&self) -> f32 {
        match self {
            Content::Everything => 0.0,
            Content::Uniform(value) => *value,
            Content::Patch { background, .. } => *background,
        }
    }
}

/// Rows and columns spanned by the cells that are not `background` (NaN counts as not).
fn bounding_box(slice: &[f32], nx: usize, background: f32) -> Option<(Range<usize>, Range<usize>)> {
    let mut found: Option<(Range<usize>, Range<usize>)> = None;
    for (y, row) in slice.chunks_exact(nx).enumerate() {
        let Some(first) = first_other(row, background) else {
            continue;
        };
        let last = last_other(row, background).unwrap_or(first);
        found = Some(match found {
            None => (y..y + 1, first..last + 1),
            Some((rows, cols)) => (rows.start..y + 1, cols.start.min(first)..cols.end.max(last + 1)),
        });
    }
    found
}

/// Cells compared at once when scanning for the background: a branch-free comparison of a
/// fixed-size chunk vectorises, where an early-exit search does not.
const SCAN_CHUNK: usize = 32;

/// Index of the first cell of `row` that is not `background`.
fn first_other(row: &[f32], background: f32) -> Option<usize> {
    let differs = |chunk: &[f32]| chunk.iter().fold(false, |any, &v| any | (v != background));
    let chunks = row.chunks_exact(SCAN_CHUNK);
    let tail = chunks.remainder();
    let chunk = chunks.enumerate().find(|(_, chunk)| differs(chunk));
    let (start, cells) = chunk.map_or((row.len() - tail.len(), tail), |(i, chunk)| (i * SCAN_CHUNK, chunk));
    cells.iter().position(|&v| v != background).map(|i| start + i)
}

/// Index of the last cell of `row` that is not `background`.
fn last_other(row: &[f32], background: f32) -> Option<usize> {
    let differs = |chunk: &[f32]| chunk.iter().fold(false, |any, &v| any | (v != background));
    let chunks = row.rchunks_exact(SCAN_CHUNK);
    let head = chunks.remainder();
    let chunk = chunks.enumerate().find(|(_, chunk)| differs(chunk));
    let (start, cells) = chunk.map_or((0, head), |(i, chunk)| (row.len() - (i + 1) * SCAN_CHUNK, chunk));
    cells.iter().rposition(|&v| v != background).map(|i| start + i)
}

/// Computes output rows `band` of one slice into `out_band` (those rows, full width).
fn smooth_band(
    slice: &[f32],
    out_band: &mut [f32],
    band: Range<usize>,
    window: &Window,
    content: &Content,
    ny: usize,
    nx: usize,
) {
    let background = content.background();
    let Some((rows, cols)) = content.work_area(window, ny, nx) else {
        out_band.fill(background);
        return;
    };
    let rows = rows.start.max(band.start)..rows.end.min(band.end);
    if background != 0.0 {
        out_band.fill(background);
    }
    for y in rows.clone() {
        // Window sums accumulate in place from +0.0, over any background filled in above.
        out_band[(y - band.start) * nx..][cols.clone()].fill(0.0);
    }
    if rows.is_empty() {
        return;
    }
    let mut out_rows = OutRows { data: out_band, first_row: band.start, nx, cols: cols.clone() };
    sum_windows(slice, &mut out_rows, rows.clone(), window, ny, nx);
    divide_by_counts(&mut out_rows, rows, window, ny, nx);
}

/// Mutable access to the `cols` of rows of the output, by grid row.
struct OutRows<'a> {
    data: &'a mut [f32],
    first_row: usize,
    nx: usize,
    cols: Range<usize>,
}

impl OutRows<'_> {
    fn row(&mut self, y: usize) -> &mut [f32] {
        let start = (y - self.first_row) * self.nx;
        &mut self.data[start + self.cols.start..start + self.cols.end]
    }
}

/// Adds to each cell of `rows` × `out.cols` the sum of its window, in the documented order.
fn sum_windows(slice: &[f32], out: &mut OutRows<'_>, rows: Range<usize>, window: &Window, ny: usize, nx: usize) {
    let cols = out.cols.clone();
    let width = cols.len();
    let pad = window.reach_x();
    // One input row over the box's columns plus `pad` either side, zero outside the grid.
    let mut padded = vec![0.0f32; width + 2 * pad];
    let mut run = vec![0.0f32; width];
    let mut runs = vec![0.0f32; window.distinct.len() * width];
    let grid_cols = cols.start.saturating_sub(pad)..(cols.end + pad).min(nx);
    let offset = grid_cols.start + pad - cols.start;

    let reach = window.reach_y;
    for source in rows.start.saturating_sub(reach)..(rows.end + reach).min(ny) {
        padded[offset..offset + grid_cols.len()].copy_from_slice(&slice[source * nx..][grid_cols.clone()]);
        row_runs(&padded, pad, &window.distinct, &mut run, &mut runs);
        // Output rows whose windows include this source row, each receiving it in top-down order.
        for y in source.saturating_sub(reach).max(rows.start)..(source + reach + 1).min(rows.end) {
            let slot = window.slots[source + reach - y];
            let sums = &runs[slot * width..(slot + 1) * width];
            for (cell, &sum) in out.row(y).iter_mut().zip(sums) {
                *cell += sum;
            }
        }
    }
}

/// Run sums of one padded row for every half-width in `distinct`: run `w` at column `x` is
/// `((v[x] + v[x-1]) + v[x+1]) + ... + v[x+w]`, built by widening the run one step at a time.
fn row_runs(padded: &[f32], pad: usize, distinct: &[usize], run: &mut [f32], runs: &mut [f32]) {
    let width = run.len();
    run.copy_from_slice(&padded[pad..pad + width]);
    let mut slots = distinct.iter().enumerate().peekable();
    for w in 0..=pad {
        if w > 0 {
            let left = &padded[pad - w..pad - w + width];
            let right = &padded[pad + w..pad + w + width];
            for ((sum, &l), &r) in run.iter_mut().zip(left).zip(right) {
                *sum = *sum + l + r;
            }
        }
        if let Some((slot, _)) = slots.next_if(|&(_, &half_width)| half_width == w) {
            runs[slot * width..(slot + 1) * width].copy_from_slice(run);
        }
    }
}

/// Divides each window sum by the number of the window's cells that lie inside the grid.
fn divide_by_counts(out: &mut OutRows<'_>, rows: Range<usize>, window: &Window, ny: usize, nx: usize) {
    let cols = out.cols.clone();
    let mut counts = vec![0.0f32; cols.len()];
    let mut counted_offsets = None;
    for y in rows {
        // Window rows inside the grid, as indices into `half_widths`; rows away from the top and
        // bottom edges share them, so their counts are computed once.
        let reach = window.reach_y;
        let offsets = reach.saturating_sub(y)..(reach + ny - y).min(2 * reach + 1);
        if counted_offsets.as_ref() != Some(&offsets) {
            fill_counts(&mut counts, &window.half_widths[offsets.clone()], cols.clone(), nx);
            counted_offsets = Some(offsets);
        }
        for (cell, &count) in out.row(y).iter_mut().zip(&counts) {
            *cell /= count;
        }
    }
}

/// For each column of `cols`, how many cells of rows with these half-widths lie inside the grid.
fn fill_counts(counts: &mut [f32], half_widths: &[usize], cols: Range<usize>, nx: usize) {
    let widest = half_widths.iter().copied().max().unwrap_or(0);
    let full: u64 = half_widths.iter().map(|&w| 2 * w as u64 + 1).sum();
    for (count, x) in counts.iter_mut().zip(cols) {
        let cells = if x >= widest && x + widest < nx {
            full
        } else {
            half_widths.iter().map(|&w| ((x + w).min(nx - 1) - x.saturating_sub(w) + 1) as u64).sum()
        };
        *count = cells as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{
        self, TestRng, array, estimate_at_dispatch, meta, ndarray_of, plan, run, single, with_context,
    };
    use runner_plugin::ndarray::IxDyn;
    use runner_plugin::serde_json::json;

    /// The definition, cell by cell: the mean of the window's cells inside the grid, in f64.
    fn brute_force(field: &ArrayD<f32>, radius: usize, shape: WindowShape) -> ArrayD<f64> {
        let r = radius as i64;
        let dims = field.shape().to_vec();
        let (ny, nx) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        let planes = field.len() / (ny * nx);
        let flat_in: Vec<f32> = field.iter().copied().collect();
        let mut flat_out = vec![0.0f64; field.len()];
        for p in 0..planes {
            for y in 0..ny as i64 {
                for x in 0..nx as i64 {
                    let (mut sum, mut count) = (0.0f64, 0u64);
                    for dy in -r..=r {
                        for dx in -r..=r {
                            let inside_window = match shape {
                                WindowShape::Square => true,
                                WindowShape::Circle => dy * dy + dx * dx <= r * r,
                            };
                            let (yy, xx) = (y + dy, x + dx);
                            if inside_window && (0..ny as i64).contains(&yy) && (0..nx as i64).contains(&xx) {
                                sum += f64::from(flat_in[p * ny * nx + yy as usize * nx + xx as usize]);
                                count += 1;
                            }
                        }
                    }
                    flat_out[p * ny * nx + y as usize * nx + x as usize] = sum / count as f64;
                }
            }
        }
        ArrayD::from_shape_vec(field.raw_dim(), flat_out).unwrap()
    }

    fn smoothed(field: &ArrayD<f32>, radius: usize, shape: WindowShape, trim: bool) -> ArrayD<f32> {
        with_context(|ctx| neighbourhood_mean(ctx, &field.view(), radius, shape, trim))
    }

    fn assert_close(got: &ArrayD<f32>, expected: &ArrayD<f64>, what: &str) {
        assert_eq!(got.shape(), expected.shape(), "{what}");
        for (i, (&g, &e)) in got.iter().zip(expected.iter()).enumerate() {
            assert!((f64::from(g) - e).abs() <= 1e-5, "{what}: cell {i}: {g} vs {e}");
        }
    }

    fn assert_bitwise_equal(a: &ArrayD<f32>, b: &ArrayD<f32>, what: &str) {
        let bits = |x: &ArrayD<f32>| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(b), "{what}");
    }

    /// A field of `background` with a patch of random values in rows `rows` and columns `cols`.
    fn patch_field(ny: usize, nx: usize, background: f32, rows: Range<usize>, cols: Range<usize>) -> ArrayD<f32> {
        let mut rng = TestRng::new(11);
        let mut field = ArrayD::from_elem(IxDyn(&[ny, nx]), background);
        for y in rows {
            for x in cols.clone() {
                // Mix exact 0s and 1s into the patch, as thresholded fields have.
                field[[y, x]] = match rng.next_u64() % 4 {
                    0 => 0.0,
                    1 => 1.0,
                    _ => rng.unit(),
                };
            }
        }
        field
    }

    const SHAPES: [WindowShape; 2] = [WindowShape::Square, WindowShape::Circle];

    #[test]
    fn matches_brute_force_on_random_fields_with_leading_axes() {
        let mut rng = TestRng::new(5);
        let field = rng.field(&[3, 23, 31]);
        for shape in SHAPES {
            for radius in [1, 2, 3, 5, 9] {
                let what = format!("{shape:?} radius {radius}");
                let expected = brute_force(&field, radius, shape);
                assert_close(&smoothed(&field, radius, shape, true), &expected, &what);
                assert_close(&smoothed(&field, radius, shape, false), &expected, &what);
            }
        }
    }

    #[test]
    fn one_large_slice_split_into_bands_matches_brute_force() {
        let field = TestRng::new(8).field(&[150, 40]);
        for shape in SHAPES {
            let expected = brute_force(&field, 4, shape);
            assert_close(&smoothed(&field, 4, shape, true), &expected, &format!("{shape:?}"));
        }
    }

    #[test]
    fn mostly_dry_and_mostly_wet_fields_match_brute_force_and_trimming_changes_no_bit() {
        let cases = [
            patch_field(60, 70, 0.0, 20..26, 30..41),
            patch_field(60, 70, 1.0, 40..44, 3..9),
            // Patches touching the edges.
            patch_field(30, 35, 0.0, 0..3, 30..35),
            patch_field(30, 35, 1.0, 27..30, 0..2),
        ];
        for (i, field) in cases.iter().enumerate() {
            for shape in SHAPES {
                for radius in [1, 3, 7] {
                    let what = format!("case {i} {shape:?} radius {radius}");
                    let trimmed = smoothed(field, radius, shape, true);
                    let untrimmed = smoothed(field, radius, shape, false);
                    assert_bitwise_equal(&trimmed, &untrimmed, &what);
                    assert_close(&trimmed, &brute_force(field, radius, shape), &what);
                }
            }
        }
    }

    #[test]
    fn trimming_changes_no_bit_on_random_fields_with_many_slices() {
        let mut rng = TestRng::new(21);
        let mut field = rng.field(&[4, 37, 29]);
        // Slice 1 mostly dry, slice 2 mostly wet, slice 3 all ones.
        for (slice, background) in [(1, 0.0f32), (2, 1.0), (3, 1.0)] {
            for y in 0..37 {
                for x in 0..29 {
                    if slice == 3 || !(10..14).contains(&y) || !(5..20).contains(&x) {
                        field[[slice, y, x]] = background;
                    }
                }
            }
        }
        for shape in SHAPES {
            for radius in [2, 6] {
                let what = format!("{shape:?} radius {radius}");
                assert_bitwise_equal(
                    &smoothed(&field, radius, shape, true),
                    &smoothed(&field, radius, shape, false),
                    &what,
                );
            }
        }
    }

    #[test]
    fn trimming_finds_the_smaller_box_of_either_background() {
        let dry = patch_field(20, 30, 0.0, 4..7, 10..12);
        let wet = patch_field(20, 30, 1.0, 15..20, 0..3);
        let (dry, wet) = (dry.as_slice().unwrap(), wet.as_slice().unwrap());
        // The random patch may start or end with a background value, so check containment.
        let Content::Patch { background, rows, cols } = Content::of(dry, 30) else { panic!("a patch") };
        assert_eq!(background, 0.0);
        assert!(rows.start >= 4 && rows.end <= 7 && cols.start >= 10 && cols.end <= 12, "{rows:?} {cols:?}");
        let Content::Patch { background, rows, cols } = Content::of(wet, 30) else { panic!("a patch") };
        assert_eq!(background, 1.0);
        assert!(rows.start >= 15 && rows.end <= 20 && cols.end <= 3, "{rows:?} {cols:?}");
        assert_eq!(Content::of(&[1.0; 6], 3), Content::Uniform(1.0));
        assert_eq!(Content::of(&[0.0, -0.0, 0.0], 3), Content::Uniform(0.0));
        let nan = Content::of(&[0.0, f32::NAN, 0.0, 0.0], 2);
        assert_eq!(nan, Content::Patch { background: 0.0, rows: 0..1, cols: 1..2 });
    }

    #[test]
    fn background_scans_find_the_first_and_last_other_cell() {
        for len in [0, 1, 31, 32, 33, 64, 100] {
            for spot in [0, 5, 31, 32, 40, 63, 99] {
                let mut row = vec![1.0f32; len];
                if spot < len {
                    row[spot] = 0.5;
                }
                let expected = (spot < len).then_some(spot);
                assert_eq!(first_other(&row, 1.0), expected, "len {len} spot {spot}");
                assert_eq!(last_other(&row, 1.0), expected, "len {len} spot {spot}");
            }
        }
        let row = [0.0, 2.0, 0.0, 0.0, 3.0, 0.0];
        assert_eq!((first_other(&row, 0.0), last_other(&row, 0.0)), (Some(1), Some(4)));
        let long: Vec<f32> = (0..100).map(|i| if i == 3 || i == 70 { f32::NAN } else { 0.0 }).collect();
        assert_eq!((first_other(&long, 0.0), last_other(&long, 0.0)), (Some(3), Some(70)));
    }

    #[test]
    fn uniform_fields_stay_exactly_uniform() {
        for value in [0.0f32, 1.0] {
            let field = ArrayD::from_elem(IxDyn(&[2, 20, 30]), value);
            for shape in SHAPES {
                let out = smoothed(&field, 4, shape, true);
                assert!(out.iter().all(|&v| v.to_bits() == value.to_bits()));
                assert_bitwise_equal(&out, &smoothed(&field, 4, shape, false), "untrimmed");
            }
        }
    }

    #[test]
    fn radius_larger_than_the_field() {
        let field = TestRng::new(2).field(&[5, 7]);
        let mean = field.iter().map(|&v| f64::from(v)).sum::<f64>() / 35.0;
        let square = smoothed(&field, 10, WindowShape::Square, true);
        assert!(square.iter().all(|&v| (f64::from(v) - mean).abs() < 1e-6));
        for radius in [6, 10, 1000] {
            let expected = brute_force(&field, radius.min(12), WindowShape::Circle);
            assert_close(&smoothed(&field, radius, WindowShape::Circle, true), &expected, &format!("{radius}"));
        }
        // A single cell, and a single row.
        let one = ArrayD::from_elem(IxDyn(&[1, 1]), 0.25f32);
        assert_eq!(smoothed(&one, 3, WindowShape::Circle, true)[[0, 0]], 0.25);
        let row = TestRng::new(4).field(&[1, 9]);
        assert_close(&smoothed(&row, 2, WindowShape::Square, true), &brute_force(&row, 2, WindowShape::Square), "row");
    }

    #[test]
    fn runs_as_a_plugin_keeping_attributes() {
        let field = Array::from_vec(vec![2, 3], vec![0.0f32, 0.0, 1.0, 0.0, 0.0, 0.0])
            .unwrap()
            .with_attr("thresholds", json!([0.5]));
        let out =
            run(&Nbhood, json!({"radius": "1", "shape": "square"}), &[single("field", Value::Array(field))]).unwrap();
        let values = ndarray_of::<f32>(&out);
        // Corner (0, 2) sees 4 cells, one of them wet; (1, 0) sees 4 dry cells.
        assert_eq!(values[[0, 2]], 0.25);
        assert_eq!(values[[1, 0]], 0.0);
        assert!((values[[0, 1]] - 1.0 / 6.0).abs() < 1e-7);
        assert_eq!(out.as_array().unwrap().attrs()["thresholds"], json!([0.5]));
    }

    #[test]
    fn estimate_follows_the_weather_at_dispatch() {
        let shape = vec![970, 1042];
        let output_bytes = 970 * 1042 * 4;
        let (meta_out, planned) = plan(
            &Nbhood,
            json!({"radius": 5}),
            &[meta("p", ValueMeta::Array { dtype: DType::F32, shape: shape.clone() })],
        )
        .unwrap();
        assert_eq!(meta_out, ValueMeta::Array { dtype: DType::F32, shape: shape.clone() });
        assert!(planned > output_bytes, "{planned}");

        let estimate_for = |field: ArrayD<f32>| {
            let value = Value::Array(Array::from_ndarray(field));
            estimate_at_dispatch(&Nbhood, json!({"radius": 5}), &[single("p", value)])
        };
        let dry = estimate_for(ArrayD::zeros(IxDyn(&shape)));
        let small = estimate_for(patch_field(970, 1042, 0.0, 100..120, 200..230));
        let large = estimate_for(patch_field(970, 1042, 0.0, 100..900, 50..1000));
        assert_eq!(dry, output_bytes);
        assert!(output_bytes < small && small < large && large <= planned, "{small} {large} {planned}");
    }

    #[test]
    fn rejects_bad_arguments_and_inputs() {
        for (bad, arg) in [
            (json!({"radius": -1}), "radius"),
            (json!({"radius": 0}), "radius"),
            (json!({"radius": 2.5}), "radius"),
            (json!({"radius": 2_000_000}), "radius"),
            (json!({"radius": 2, "shape": "hexagon"}), "shape"),
        ] {
            let err = Nbhood.check(&testing::args(bad.clone())).unwrap_err();
            assert_eq!(err.arg.as_deref(), Some(arg), "{bad}");
            assert!(err.message.contains(&format!("`{arg}`")), "{err}");
        }
        let err = Nbhood.check(&testing::args(json!({"radius": -1}))).unwrap_err();
        assert_eq!(err.message, "`radius` must be a positive whole number, got -1");

        let one_dim = meta("p", ValueMeta::Array { dtype: DType::F32, shape: vec![10] });
        assert!(plan(&Nbhood, json!({"radius": 1}), &[one_dim]).unwrap_err().message.contains("2 dimensions"));
        let doubles = meta("p", ValueMeta::Array { dtype: DType::F64, shape: vec![3, 3] });
        assert!(plan(&Nbhood, json!({"radius": 1}), &[doubles]).is_err());
        let err = run(&Nbhood, json!({"radius": 1}), &[single("p", array(&[4], vec![0.0f32; 4]))]).unwrap_err();
        assert!(err.message().contains("2 dimensions"), "{err}");
    }
}
