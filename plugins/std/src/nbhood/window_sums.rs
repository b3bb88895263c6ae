//! The numerics of `nbhood`: window sums read from a table of running sums (summed-area for a
//! square, per row for a circle), the slice trimmed to its non-background box, and the direct
//! sums for slices holding NaN or infinities (see the module above for why each is exact).

use std::ops::Range;

use runner_plugin::TaskContext;
use runner_plugin::ndarray::{ArrayD, ArrayViewD};

use super::WindowShape;

/// Rows per parallel band are at least this many, so band overheads stay small.
const MIN_BAND_ROWS: usize = 16;

/// The neighbourhood mean of `input` (≥ 2 dims, C order) over its last two axes; with `trim`
/// the work is limited to the non-background box of each slice, with identical results.
pub(super) fn neighbourhood_mean(
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
    let grid = Grid { ny, nx };
    let flat = out.as_slice_mut().expect("a new array is in C order");
    let workers = rayon::current_num_threads().max(1);
    let work_of = |slice: &[f32]| SliceWork::plan(&Content::of(slice, nx), trim, &window, grid);

    // One slice at a time, its rows smoothed in parallel bands: exactly one table is alive at
    // any moment, so the task's peak is its output plus its largest slice's table (what
    // `estimate` says), whatever the timing of the workers.
    let band_rows = ny.div_ceil(2 * workers).max(MIN_BAND_ROWS);
    for (slice, out_slice) in data.chunks_exact(plane).zip(flat.chunks_exact_mut(plane)) {
        let work = work_of(slice);
        let table = Table::build(ctx, slice, &work, &window, grid);
        ctx.par_chunks_mut(out_slice, band_rows * nx, |b, out_band| {
            let rows = b * band_rows..(b * band_rows + out_band.len() / nx);
            smooth_band(slice, &table, &work, out_band, rows, &window, grid);
        });
    }
    out
}

/// The size of one 2-D slice.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grid {
    pub(super) ny: usize,
    pub(super) nx: usize,
}

/// The window on one grid, clamped to what the grid can hold: rows beyond the grid's height
/// and columns beyond its width never hold a cell, so leaving them out changes nothing.
pub(super) struct Window {
    shape: WindowShape,
    /// Rows of the window above (and below) its centre: min(radius, ny − 1).
    reach_y: usize,
    /// Half-width of the window's row at offset `dy`, at index `dy + reach_y`; at most nx − 1.
    half_widths: Vec<usize>,
}

impl Window {
    pub(super) fn new(radius: usize, shape: WindowShape, ny: usize, nx: usize) -> Window {
        let reach_y = radius.min(ny.saturating_sub(1));
        let half_widths = (0..=2 * reach_y)
            .map(|i| {
                let dy = i.abs_diff(reach_y) as u64;
                let full = match shape {
                    WindowShape::Square => radius,
                    WindowShape::Circle => ((radius as u64).pow(2) - dy * dy).isqrt() as usize,
                };
                full.min(nx.saturating_sub(1))
            })
            .collect();
        Window { shape, reach_y, half_widths }
    }

    /// Half-width of the widest row.
    fn reach_x(&self) -> usize {
        self.half_widths.iter().copied().max().unwrap_or(0)
    }

    /// Grid rows and columns whose cells lie in the windows of the cells of `rows` × `cols`.
    fn reach_of(&self, rows: &Range<usize>, cols: &Range<usize>, grid: Grid) -> (Range<usize>, Range<usize>) {
        (
            rows.start.saturating_sub(self.reach_y)..(rows.end + self.reach_y).min(grid.ny),
            cols.start.saturating_sub(self.reach_x())..(cols.end + self.reach_x()).min(grid.nx),
        )
    }
}

/// What trimming found in one 2-D slice.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Content {
    /// Every cell is `value`, 0 or 1: so is every window mean.
    Uniform(f32),
    /// Cells other than `background` (0 or 1) lie within `rows` × `cols`.
    Patch { background: f32, rows: Range<usize>, cols: Range<usize> },
}

impl Content {
    pub(super) fn of(slice: &[f32], nx: usize) -> Content {
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

    fn background(&self) -> f32 {
        match self {
            Content::Uniform(value) => *value,
            Content::Patch { background, .. } => *background,
        }
    }
}

/// Which cells of one slice are worked on, and the value of all the others.
#[derive(Debug, Clone)]
pub(super) struct SliceWork {
    /// Every cell outside `cells` is this, and so is every window mean there.
    pub(super) background: f32,
    /// Rows and columns of the cells whose windows reach a non-background cell: the non-background
    /// box dilated by the window's reach (the whole grid when not trimming); `None` if none does.
    pub(super) cells: Option<(Range<usize>, Range<usize>)>,
}

impl SliceWork {
    pub(super) fn plan(content: &Content, trim: bool, window: &Window, grid: Grid) -> SliceWork {
        let background = content.background();
        let cells = match content {
            _ if !trim => Some((0..grid.ny, 0..grid.nx)),
            Content::Uniform(_) => None,
            Content::Patch { rows, cols, .. } => Some(window.reach_of(rows, cols, grid)),
        };
        SliceWork { background, cells }
    }

    /// Grid rows and columns the table must cover: every window of every worked-on cell.
    pub(super) fn table_extent(&self, window: &Window, grid: Grid) -> Option<(Range<usize>, Range<usize>)> {
        self.cells.as_ref().map(|(rows, cols)| window.reach_of(rows, cols, grid))
    }
}

/// What the windows' sums are read from, over the grid rows and columns `rows` × `cols`, in f64:
/// for a square window the summed-area table (entry `[i][j]` is the sum of the first `i` rows and
/// `j` columns, so a window is four look-ups); for a circle, each row's running sums (entry
/// `[i + 1][j]` is the sum of the first `j` cells of row `i`, so a window is two per row). Values
/// enter as their deviation from the slice's background, so everything outside the worked-on
/// area is exactly 0.
struct Table {
    rows: Range<usize>,
    cols: Range<usize>,
    /// Entries per table row: one more than the columns.
    stride: usize,
    entries: Vec<f64>,
    /// False if a value is NaN or infinite: running sums would spread it beyond its windows.
    finite: bool,
}

impl Table {
    /// Builds the table for `work`, announcing its size first; empty if no cell needs work.
    fn build(ctx: &TaskContext, slice: &[f32], work: &SliceWork, window: &Window, grid: Grid) -> Table {
        let Some((rows, cols)) = work.table_extent(window, grid) else {
            return Table { rows: 0..0, cols: 0..0, stride: 1, entries: Vec::new(), finite: true };
        };
        let stride = cols.len() + 1;
        ctx.will_allocate(table_bytes(rows.len(), cols.len()));
        let mut entries = Vec::with_capacity((rows.len() + 1) * stride);
        entries.resize(stride, 0.0f64);
        let background = f64::from(work.background);
        let summed_area = window.shape == WindowShape::Square;
        let mut finite = true;
        for (i, y) in rows.clone().enumerate() {
            let source = &slice[y * grid.nx..][cols.clone()];
            // Each row is zeroed just before it is written, while it is in cache, rather than
            // the whole table up front.
            entries.resize((i + 2) * stride, 0.0);
            let (done, row) = entries.split_at_mut((i + 1) * stride);
            let above = &done[i * stride..];
            // Running sums strictly left to right from +0.0: cells left of and above the table are
            // background (deviation 0), so each entry is the same whatever the table's extent.
            let mut sum = 0.0f64;
            if summed_area {
                for ((entry, &up), &value) in row[1..].iter_mut().zip(&above[1..]).zip(source) {
                    sum += f64::from(value) - background;
                    *entry = up + sum;
                }
            } else {
                for (entry, &value) in row[1..].iter_mut().zip(source) {
                    sum += f64::from(value) - background;
                    *entry = sum;
                }
            }
            finite &= sum.is_finite();
        }
        Table { rows, cols, stride, entries, finite }
    }

    /// Entries of the table row holding grid row `y`'s sums (summed-area: the rows above `y`).
    fn row(&self, y: usize) -> &[f64] {
        let i = y - self.rows.start;
        &self.entries[i * self.stride..(i + 1) * self.stride]
    }
}

/// Bytes of a table over `rows` × `cols` grid cells.
pub(super) fn table_bytes(rows: usize, cols: usize) -> u64 {
    ((rows + 1) * (cols + 1) * std::mem::size_of::<f64>()) as u64
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
pub(super) fn first_other(row: &[f32], background: f32) -> Option<usize> {
    let differs = |chunk: &[f32]| chunk.iter().fold(false, |any, &v| any | (v != background));
    let chunks = row.chunks_exact(SCAN_CHUNK);
    let tail = chunks.remainder();
    let chunk = chunks.enumerate().find(|(_, chunk)| differs(chunk));
    let (start, cells) = chunk.map_or((row.len() - tail.len(), tail), |(i, chunk)| (i * SCAN_CHUNK, chunk));
    cells.iter().position(|&v| v != background).map(|i| start + i)
}

/// Index of the last cell of `row` that is not `background`.
pub(super) fn last_other(row: &[f32], background: f32) -> Option<usize> {
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
    table: &Table,
    work: &SliceWork,
    out_band: &mut [f32],
    band: Range<usize>,
    window: &Window,
    grid: Grid,
) {
    let background = work.background;
    let Some((rows, cols)) = work.cells.clone() else {
        out_band.fill(background);
        return;
    };
    if background != 0.0 {
        // The output starts zeroed; cells left out of the work area are the background.
        out_band.fill(background);
    }
    let rows = rows.start.max(band.start)..rows.end.min(band.end);
    let mut sums = vec![0.0f64; cols.len()];
    let mut shares = vec![0.0f64; cols.len()];
    let mut counted_offsets = None;
    for y in rows {
        // Window rows inside the grid, as indices into `half_widths`; rows away from the top and
        // bottom edges share them, so their counts are computed once.
        let offsets = window.reach_y.saturating_sub(y)..(window.reach_y + grid.ny - y).min(2 * window.reach_y + 1);
        if counted_offsets.as_ref() != Some(&offsets) {
            fill_shares(&mut shares, &window.half_widths[offsets.clone()], cols.clone(), grid.nx);
            counted_offsets = Some(offsets.clone());
        }
        let first_row = y + offsets.start - window.reach_y;
        if !table.finite {
            let half_widths = &window.half_widths[offsets];
            window_sums_directly(slice, work.background, &mut sums, first_row, half_widths, cols.clone(), grid);
        } else if window.shape == WindowShape::Square {
            rectangle_sums(
                table,
                &mut sums,
                first_row..first_row + offsets.len(),
                window.reach_x(),
                cols.clone(),
                grid,
            );
        } else {
            run_sums(table, &mut sums, first_row, &window.half_widths[offsets], cols.clone(), grid);
        }
        let background = f64::from(background);
        let out_row = &mut out_band[(y - band.start) * grid.nx..][cols.clone()];
        for ((cell, &sum), &share) in out_row.iter_mut().zip(&sums).zip(&shares) {
            *cell = (background + sum * share) as f32;
        }
    }
}

/// The columns of `cols` split into those whose window row of half-width `half_width` is cut by
/// the grid's left edge, those whose window row lies inside the grid, and those cut by the
/// right edge: the middle part reads the table at fixed offsets, which vectorises.
fn edge_split(cols: &Range<usize>, half_width: usize, nx: usize) -> [Range<usize>; 3] {
    let inner_start = half_width.clamp(cols.start, cols.end);
    let inner_end = (nx.saturating_sub(half_width + 1)).clamp(inner_start, cols.end);
    [cols.start..inner_start, inner_start..inner_end, inner_end..cols.end]
}

/// Table column of the left end (inclusive) and right end (exclusive) of the window row of
/// `half_width` centred on grid column `x`, cut to the grid.
fn row_ends(table: &Table, x: usize, half_width: usize, nx: usize) -> (usize, usize) {
    (x.saturating_sub(half_width) - table.cols.start, (x + half_width + 1).min(nx) - table.cols.start)
}

/// Square windows: each window's sum from four entries of the summed-area table, for the
/// window's rows `rows` (inside the grid) and half-width `half_width`.
fn rectangle_sums(
    table: &Table,
    sums: &mut [f64],
    rows: Range<usize>,
    half_width: usize,
    cols: Range<usize>,
    grid: Grid,
) {
    let (top, bottom) = (table.row(rows.start), table.row(rows.end));
    let sum_of = |lo: usize, hi: usize| ((bottom[hi] - top[hi]) - bottom[lo]) + top[lo];
    let [left, inner, right] = edge_split(&cols, half_width, grid.nx);
    for x in left.chain(right.clone()) {
        let (lo, hi) = row_ends(table, x, half_width, grid.nx);
        sums[x - cols.start] = sum_of(lo, hi);
    }
    if inner.is_empty() {
        return;
    }
    let (lo, hi) = row_ends(table, inner.start, half_width, grid.nx);
    let n = inner.len();
    let out = &mut sums[inner.start - cols.start..][..n];
    let (top_lo, top_hi, bottom_lo, bottom_hi) =
        (&top[lo..lo + n], &top[hi..hi + n], &bottom[lo..lo + n], &bottom[hi..hi + n]);
    for i in 0..n {
        out[i] = ((bottom_hi[i] - top_hi[i]) - bottom_lo[i]) + top_lo[i];
    }
}

/// Circular windows: each window's sum row by row, top to bottom from 0, each row's part from two
/// entries of that row's running sums. `half_widths` are those of the window rows inside the
/// grid, the first of which is grid row `first_row`.
fn run_sums(table: &Table, sums: &mut [f64], first_row: usize, half_widths: &[usize], cols: Range<usize>, grid: Grid) {
    sums.fill(0.0);
    for (dy, &half_width) in half_widths.iter().enumerate() {
        let row = table.row(first_row + dy + 1);
        let [left, inner, right] = edge_split(&cols, half_width, grid.nx);
        for x in left.chain(right.clone()) {
            let (lo, hi) = row_ends(table, x, half_width, grid.nx);
            sums[x - cols.start] += row[hi] - row[lo];
        }
        if inner.is_empty() {
            continue;
        }
        let (lo, hi) = row_ends(table, inner.start, half_width, grid.nx);
        let n = inner.len();
        let out = &mut sums[inner.start - cols.start..][..n];
        for ((sum, &l), &h) in out.iter_mut().zip(&row[lo..lo + n]).zip(&row[hi..hi + n]) {
            *sum += h - l;
        }
    }
}

/// Windows of a slice holding NaN or infinite values, summed cell by cell from the input so that
/// such values reach only their own windows (as a direct sum would), at O(radius²) per cell.
fn window_sums_directly(
    slice: &[f32],
    background: f32,
    sums: &mut [f64],
    first_row: usize,
    half_widths: &[usize],
    cols: Range<usize>,
    grid: Grid,
) {
    let background = f64::from(background);
    sums.fill(0.0);
    for (dy, &half_width) in half_widths.iter().enumerate() {
        let row = &slice[(first_row + dy) * grid.nx..][..grid.nx];
        for (sum, x) in sums.iter_mut().zip(cols.clone()) {
            let cells = &row[x.saturating_sub(half_width)..(x + half_width + 1).min(grid.nx)];
            *sum += cells.iter().map(|&v| f64::from(v) - background).sum::<f64>();
        }
    }
}

/// For each column of `cols`, one over the number of cells of rows with these half-widths that
/// lie inside the grid: a window's mean is its sum times this (a multiplication vectorises
/// better than a division).
fn fill_shares(shares: &mut [f64], half_widths: &[usize], cols: Range<usize>, nx: usize) {
    let widest = half_widths.iter().copied().max().unwrap_or(0);
    let full: u64 = half_widths.iter().map(|&w| 2 * w as u64 + 1).sum();
    for (share, x) in shares.iter_mut().zip(cols) {
        let cells = if x >= widest && x + widest < nx {
            full
        } else {
            half_widths.iter().map(|&w| ((x + w).min(nx - 1) - x.saturating_sub(w) + 1) as u64).sum()
        };
        *share = 1.0 / cells as f64;
    }
}
