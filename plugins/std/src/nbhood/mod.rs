//! `nbhood`: the neighbourhood mean of a field over a square or circular window of `radius`
//! cells on its last two axes, separately for each index of the leading axes. At the edges the
//! mean is over the window cells inside the grid.
//!
//! Method: window sums are read from a table of running sums in f64: for a square, the
//! summed-area table (four look-ups per cell, whatever the radius); for a circle, each row's
//! running sums (two look-ups per window row, `⌊√(r² − dy²)⌋` cells either side). Values enter
//! the table as their deviation from the slice's background (below), so a window of background
//! only sums to exactly 0 and its mean is exactly the background.
//!
//! Trimming: fields such as exceedance probabilities are mostly one background value, 0 (dry)
//! or 1. Each 2-D slice is scanned for the bounding box of the cells that differ from whichever
//! background gives the smaller box; cells farther than the radius from that box are set to the
//! background, and the work covers the box dilated by the radius; the table covers it dilated
//! twice (every window of every worked-on cell). A slice of one value is copied through. So the
//! memory a task needs follows the weather: the output plus one table, 8 bytes per cell of the
//! wettest slice's dilated box — from little more than the output on a dry day to three times
//! it when rain covers the grid. Slices are done one after another (their rows in parallel
//! bands), so exactly one table is alive at a time and the estimate at dispatch is what the
//! task will really hold, whatever the timing of the threads.
//!
//! Trimming never changes a value: every running sum starts at the left or top edge of the table
//! from +0.0, and everything left of and above the table is background, whose deviation is
//! exactly 0, so each table entry is bit for bit the entry a whole-grid table would hold; the
//! look-ups, their order and the counts of cells are the same too.
//!
//! NaN and infinities would spread through running sums to windows that do not hold them, so a
//! slice holding any is summed window by window instead (O(radius²) per cell), which gives each
//! window the direct sum's NaN or infinity.
//!
//! Cost: one pass to find the box, one to build the table, one to read it; inner loops over
//! columns vectorise; one output allocation; one table at a time.

mod window_sums;

use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{array_shape_of, expect_array, one_input_meta, one_input_value, positive_whole, shown};
use window_sums::{Content, Grid, SliceWork, Window, neighbourhood_mean, table_bytes};

const ARGS: &[ArgSpec] = &[
    ArgSpec::required("radius", "half-width of the window in cells, a positive whole number"),
    ArgSpec::optional("shape", "square", "window shape: square, or circular (IMPROVER's name; circle too)"),
];

/// Far beyond any useful neighbourhood; it keeps the window tables small.
const MAX_RADIUS: u64 = 1_000_000;

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
            "circular" | "circle" => WindowShape::Circle,
            _ => {
                return Err(ArgError::new(
                    "shape",
                    format!(
                        "`shape` must be \"square\" or \"circular\" (IMPROVER's names; \"circle\" too), got {}",
                        shown(args.get("shape"))
                    ),
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

    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
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
        if cells == 0 {
            return output_bytes;
        }
        let (window, grid) = (Window::new(settings.radius, settings.shape, ny, nx), Grid { ny, nx });
        let table_of = |work: SliceWork| {
            work.table_extent(&window, grid).map_or(0, |(rows, cols)| table_bytes(rows.len(), cols.len()))
        };
        let slices = cells / (ny * nx);
        let whole_grid = SliceWork { background: 0.0, cells: Some((0..ny, 0..nx)) };
        let tables: Vec<u64> = match dispatch_input.and_then(|array| array.view::<f32>().ok()) {
            Some(view) if view.is_standard_layout() => view
                .as_slice()
                .expect("a standard layout view is contiguous")
                .chunks_exact(ny * nx)
                .map(|slice| table_of(SliceWork::plan(&Content::of(slice, nx), true, &window, grid)))
                .collect(),
            _ => vec![table_of(whole_grid); slices],
        };
        // As `run` does it: one slice at a time, so one table is alive at once — the largest is
        // the peak — and each band being smoothed in parallel holds a row of sums and one of
        // cell counts.
        let workers = rayon::current_num_threads().max(1);
        let table: u64 = tables.iter().copied().max().unwrap_or(0);
        let row_buffers = if table > 0 { (workers * 2 * nx * std::mem::size_of::<f64>()) as u64 } else { 0 };
        output_bytes + table + row_buffers
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

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use runner_plugin::ndarray::ArrayD;

    use super::window_sums::{first_other, last_other};
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
    fn improver_s_shape_names_are_taken() {
        let shape = |name: &str| {
            Settings::from_args(&Args::new(json!({"radius": 2, "shape": name}).as_object().unwrap().clone()))
                .map(|s| s.shape)
        };
        assert!(matches!(shape("square"), Ok(WindowShape::Square)));
        assert!(matches!(shape("circular"), Ok(WindowShape::Circle)));
        assert!(matches!(shape("circle"), Ok(WindowShape::Circle)));
        let refused = shape("hexagon").err().unwrap().message;
        assert!(refused.contains("\"square\" or \"circular\""), "{refused}");
    }

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
    fn nan_and_infinities_reach_only_their_own_windows() {
        for background in [0.0f32, 1.0] {
            let mut field = patch_field(40, 50, background, 10..30, 10..40);
            field[[15, 20]] = f32::NAN;
            field[[25, 30]] = f32::INFINITY;
            field[[25, 34]] = f32::NEG_INFINITY;
            for shape in SHAPES {
                let what = format!("background {background} {shape:?}");
                let got = smoothed(&field, 3, shape, true);
                let expected = brute_force(&field, 3, shape);
                for (i, (&g, &e)) in got.iter().zip(expected.iter()).enumerate() {
                    if e.is_finite() {
                        assert!((f64::from(g) - e).abs() <= 1e-5, "{what}: cell {i}: {g} vs {e}");
                    } else {
                        assert!(g.is_nan() == e.is_nan() && (g.is_nan() || f64::from(g) == e), "{what}: {i}: {g} {e}");
                    }
                }
                assert_bitwise_equal(&got, &smoothed(&field, 3, shape, false), &what);
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
        // The table covers the patch dilated twice by the radius, 8 bytes a cell.
        let large_table = (800 + 4 * 5 + 1) * (950 + 4 * 5 + 1) * 8;
        assert!(large >= output_bytes + large_table && large < output_bytes + large_table + (1 << 20), "{large}");
        assert!(planned >= 3 * output_bytes, "a rainy grid needs three times the output: {planned}");
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
