//! `threshold`: turns a field into probabilities of exceeding each of a list of thresholds,
//! f32 `[n_thresholds, ...input shape]`.
//!
//! Without `fuzzy_factor` the probability is 1 where `value > threshold` and 0 elsewhere (a value
//! equal to the threshold does not exceed it). With `fuzzy_factor` f the IMPROVER rule applies: a
//! linear ramp from 0 at `t·f` to 0.5 at `t` to 1 at `t·(2−f)`, clamped to [0, 1] (for negative
//! thresholds the two bounds swap places; a threshold of 0 has no band). Comparisons are made in
//! f32, the input's precision: thresholds and band bounds are computed in f64 from the arguments
//! and then rounded to f32, so a field value of 0.3 does not exceed a threshold of 0.3. NaN values
//! give probability 0.

use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{
    ChunkWriter, array_shape_of, expect_array, one_input_meta, one_input_value, shown, written_array,
};

const ARGS: &[ArgSpec] = &[
    ArgSpec::required("thresholds", "a number or a list of numbers to compare the field with"),
    ArgSpec::optional("fuzzy_factor", "none", "width of a linear band around each threshold, in (0, 1)"),
];

/// Elements per parallel chunk: big enough to amortise scheduling, small enough to spread work.
const CHUNK: usize = 1 << 16;

pub struct Threshold;

/// The arguments, parsed and checked.
struct Settings {
    thresholds: Vec<f64>,
    fuzzy_factor: Option<f64>,
}

impl Settings {
    fn from_args(args: &Args) -> Result<Settings, ArgError> {
        let thresholds = args.f64_list("thresholds")?;
        if thresholds.is_empty() {
            return Err(ArgError::new("thresholds", "`thresholds` must list at least one number, got []"));
        }
        let fuzzy_factor = match args.get("fuzzy_factor") {
            // "none" is how `runner plugins` shows the default, so it may be written back.
            None | Some(Json::Null) => None,
            Some(Json::String(text)) if text.trim().eq_ignore_ascii_case("none") => None,
            Some(_) => {
                let factor = args.f64("fuzzy_factor")?;
                if !(factor > 0.0 && factor < 1.0) {
                    return Err(ArgError::new(
                        "fuzzy_factor",
                        format!(
                            "`fuzzy_factor` must be between 0 and 1 (both excluded), got {}",
                            shown(args.get("fuzzy_factor"))
                        ),
                    ));
                }
                Some(factor)
            }
        };
        Ok(Settings { thresholds, fuzzy_factor })
    }

    fn rules(&self) -> Vec<Rule> {
        self.thresholds.iter().map(|&t| Rule::new(t, self.fuzzy_factor)).collect()
    }
}

/// How one threshold turns a value into a probability.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// 1 above `threshold`, else 0.
    Step { threshold: f32 },
    /// 0 at or below `lower`, 1 at or above `upper`, linear through 0.5 at `threshold` between.
    Ramp { lower: f32, threshold: f32, upper: f32 },
}

impl Rule {
    fn new(threshold: f64, fuzzy_factor: Option<f64>) -> Rule {
        let step = Rule::Step { threshold: threshold as f32 };
        let Some(factor) = fuzzy_factor else {
            return step;
        };
        let (a, b) = ((threshold * factor) as f32, (threshold * (2.0 - factor)) as f32);
        let (lower, upper) = if a <= b { (a, b) } else { (b, a) };
        let threshold = threshold as f32;
        // A zero threshold, or a band that rounding to f32 collapsed, has no room for a ramp.
        if lower < threshold && threshold < upper { Rule::Ramp { lower, threshold, upper } } else { step }
    }

    /// Writes the probability of each of `values` next in `out`.
    fn write(self, values: &[f32], out: &mut ChunkWriter<'_, f32>) {
        match self {
            Rule::Step { threshold } => out.write_iter(values.iter().map(|&v| if v > threshold { 1.0 } else { 0.0 })),
            Rule::Ramp { lower, threshold, upper } => {
                // Two half-ramps like IMPROVER's, so 0.5 falls exactly on the threshold even if
                // rounding made the band a little asymmetric; the edges are exact by selection.
                let below = 0.5 / (threshold - lower);
                let above = 0.5 / (upper - threshold);
                out.write_iter(values.iter().map(|&v| {
                    let ramp = if v < threshold { (v - lower) * below } else { 0.5 + (v - threshold) * above };
                    // NaN fails both comparisons and lands on 0.
                    if v > lower && v < upper {
                        ramp.clamp(0.0, 1.0)
                    } else if v >= upper {
                        1.0
                    } else {
                        0.0
                    }
                }));
            }
        }
    }
}

impl Plugin for Threshold {
    fn name(&self) -> &'static str {
        "threshold"
    }

    fn about(&self) -> &'static str {
        "probability of exceeding each threshold, f32 [n_thresholds, ...input shape]"
    }

    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        Settings::from_args(args).map(|_| ())
    }

    fn output(&self, args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let settings = Settings::from_args(args)?;
        let input = one_input_meta(self.name(), inputs)?;
        Ok(match array_shape_of(self.name(), input, &[DType::F32])? {
            Some((_, shape)) => ValueMeta::Array { dtype: DType::F32, shape: output_shape(&settings, &shape) },
            None => ValueMeta::Unknown,
        })
    }

    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    /// The output is the only allocation.
    fn estimate(&self, args: &Args, inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        if let Some(bytes) = output.bytes() {
            return bytes;
        }
        let thresholds = Settings::from_args(args).map(|s| s.thresholds.len() as u64).unwrap_or(1);
        thresholds * inputs.buffer_bytes().unwrap_or(0)
    }

    fn run(&self, ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let settings = Settings::from_args(args).map_err(|e| TaskError::msg(e.message))?;
        let (name, value) = one_input_value(self.name(), inputs)?;
        let input = expect_array(self.name(), name, value, &[DType::F32])?;
        let view = input.view::<f32>().map_err(TaskError::msg)?;
        let values = view.as_slice().ok_or_else(|| TaskError::msg("input array is not in C order"))?;

        let rules = settings.rules();
        let len = values.len();
        // Chunks of the flat output, [thresholds, ...input shape], computed in parallel, so that
        // a single large field is shared between threads too.
        let out = written_array(ctx, &output_shape(&settings, input.shape()), CHUNK, |chunk, out| {
            // A chunk may span the end of one threshold's slab and the start of the next.
            let mut at = chunk * CHUNK;
            while out.remaining() > 0 {
                let (slab, offset) = (at / len, at % len);
                let n = out.remaining().min(len - offset);
                rules[slab].write(&values[offset..offset + n], out);
                at += n;
            }
        });

        let mut array = Array::from_ndarray(out).with_attr("thresholds", json!(settings.thresholds));
        if let Some(factor) = settings.fuzzy_factor {
            array = array.with_attr("fuzzy_factor", json!(factor));
        }
        if let Some(units) = input.attrs().get("units") {
            array = array.with_attr("threshold_units", units.clone());
        }
        Ok(Value::Array(array.with_attr("units", "1")))
    }
}

fn output_shape(settings: &Settings, input_shape: &[usize]) -> Vec<usize> {
    std::iter::once(settings.thresholds.len()).chain(input_shape.iter().copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, array, meta, ndarray_of, plan, run, single};
    use runner_plugin::serde_json::json;

    fn probabilities(args: Json, values: Vec<f32>) -> Vec<f32> {
        let n = values.len();
        let out = run(&Threshold, args, &[single("field", array(&[n], values))]).unwrap();
        ndarray_of::<f32>(&out).iter().copied().collect()
    }

    #[test]
    fn step_is_one_strictly_above_each_threshold() {
        let values = vec![-1.0, 0.0, 0.3, 0.30001, 2.0, 8.0, 9.5, f32::NAN];
        let out = run(&Threshold, json!({"thresholds": [0.3, 8.0]}), &[single("f", array(&[2, 4], values))]).unwrap();
        let out = ndarray_of::<f32>(&out);
        assert_eq!(out.shape(), &[2, 2, 4]);
        let flat: Vec<f32> = out.iter().copied().collect();
        #[rustfmt::skip]
        let expected = [
            0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0,
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0,
        ];
        assert_eq!(flat, expected);
    }

    #[test]
    fn fuzzy_band_ramps_from_t_f_through_t_to_t_2_minus_f() {
        let (t, f) = (2.0f64, 0.4f64);
        let lower = (t * f) as f32; // 0.8
        let upper = (t * (2.0 - f)) as f32; // 3.2
        let t32 = t as f32;
        let values = vec![lower - 0.5, lower, (lower + t32) / 2.0, t32, (t32 + upper) / 2.0, upper, upper + 0.5];
        let out = probabilities(json!({"thresholds": 2.0, "fuzzy_factor": "0.4"}), values);
        assert_eq!(out[0], 0.0);
        assert_eq!(out[1], 0.0);
        assert!((out[2] - 0.25).abs() < 1e-6, "{}", out[2]);
        assert_eq!(out[3], 0.5);
        assert!((out[4] - 0.75).abs() < 1e-6, "{}", out[4]);
        assert_eq!(out[5], 1.0);
        assert_eq!(out[6], 1.0);
    }

    #[test]
    fn fuzzy_band_of_a_negative_threshold_still_rises_with_the_value() {
        // t = -2, f = 0.5: bounds -1 and -3, so the band runs from -3 (0) to -1 (1).
        let out =
            probabilities(json!({"thresholds": -2, "fuzzy_factor": 0.5}), vec![-4.0, -3.0, -2.5, -2.0, -1.0, 0.0]);
        assert_eq!(out[0], 0.0);
        assert_eq!(out[1], 0.0);
        assert!((out[2] - 0.25).abs() < 1e-6);
        assert_eq!(out[3], 0.5);
        assert_eq!(out[4], 1.0);
        assert_eq!(out[5], 1.0);
    }

    #[test]
    fn nan_never_exceeds_and_none_means_no_band() {
        let out = probabilities(json!({"thresholds": 1.0, "fuzzy_factor": 0.5}), vec![f32::NAN, 0.9]);
        assert_eq!(out[0], 0.0);
        assert!((out[1] - 0.4).abs() < 1e-6, "{}", out[1]);
        let out = probabilities(json!({"thresholds": 1.0, "fuzzy_factor": "none"}), vec![0.9, 1.1]);
        assert_eq!(out, vec![0.0, 1.0]);
    }

    #[test]
    fn zero_threshold_has_no_fuzzy_band() {
        let out = probabilities(json!({"thresholds": [0], "fuzzy_factor": 0.5}), vec![-0.1, 0.0, 1e-6]);
        assert_eq!(out, vec![0.0, 0.0, 1.0]);
    }

    /// The bytes of step and fuzzy probabilities of a random field, pinned: faster kernels must
    /// not change them (the hashes were taken from the straightforward kernel).
    #[test]
    fn probability_bytes_are_pinned() {
        let mut rng = testing::TestRng::new(11);
        let mut values: Vec<f32> = (0..300_007).map(|_| rng.unit() * 10.0 - 1.0).collect();
        values[5] = f32::NAN;
        values[6] = 2.0;
        values[7] = 0.0;
        for (args, expected) in [
            (json!({"thresholds": [0.0, 2.0, 8.0]}), 12763425294579915173),
            (json!({"thresholds": [-0.5, 0.0, 2.0, 8.0], "fuzzy_factor": 0.7}), 15623023250986027798),
        ] {
            let out = run(&Threshold, args.clone(), &[single("f", array(&[300_007], values.clone()))]).unwrap();
            assert_eq!(crate::fnv1a64(out.as_array().unwrap().bytes()), expected, "{args}");
        }
    }

    #[test]
    fn output_metadata_and_attrs() {
        let input = meta("field", ValueMeta::Array { dtype: DType::F32, shape: vec![3, 4] });
        let (meta_out, estimate) = plan(&Threshold, json!({"thresholds": [1, 2, 3]}), &[input]).unwrap();
        assert_eq!(meta_out, ValueMeta::Array { dtype: DType::F32, shape: vec![3, 3, 4] });
        assert_eq!(estimate, 3 * 12 * 4);

        let field = runner_plugin::Array::from_vec(vec![2], vec![0.0f32, 5.0]).unwrap().with_attr("units", "mm/h");
        let out = run(&Threshold, json!({"thresholds": [1, 2]}), &[single("f", Value::Array(field))]).unwrap();
        let attrs = out.as_array().unwrap().attrs();
        assert_eq!(attrs["thresholds"], json!([1.0, 2.0]));
        assert_eq!(attrs["threshold_units"], json!("mm/h"));
    }

    #[test]
    fn rejects_bad_arguments_naming_them() {
        for (bad, arg) in [
            (json!({"thresholds": []}), "thresholds"),
            (json!({"thresholds": ["x"]}), "thresholds"),
            (json!({"thresholds": 1, "fuzzy_factor": 1.5}), "fuzzy_factor"),
            (json!({"thresholds": 1, "fuzzy_factor": 0}), "fuzzy_factor"),
            (json!({"thresholds": 1, "fuzzy_factor": "1"}), "fuzzy_factor"),
        ] {
            let err = Threshold.check(&testing::args(bad.clone())).unwrap_err();
            assert_eq!(err.arg.as_deref(), Some(arg), "{bad}");
            assert!(err.message.contains(&format!("`{arg}`")), "{err}");
        }
    }

    #[test]
    fn rejects_inputs_of_the_wrong_kind() {
        let f64_input = meta("field", ValueMeta::Array { dtype: DType::F64, shape: vec![3] });
        let err = plan(&Threshold, json!({"thresholds": 1}), &[f64_input]).unwrap_err();
        assert!(err.message.contains("f32") && err.message.contains("`field`"), "{err}");
        let json_input = meta("field", ValueMeta::Json);
        assert!(plan(&Threshold, json!({"thresholds": 1}), &[json_input]).is_err());
        let two = [meta("a", ValueMeta::Unknown), meta("b", ValueMeta::Unknown)];
        assert!(plan(&Threshold, json!({"thresholds": 1}), &two).unwrap_err().message.contains("exactly one"));

        let err = run(&Threshold, json!({"thresholds": 1}), &[single("f", array(&[2], vec![1i32, 2]))]).unwrap_err();
        assert!(err.message().contains("i32"), "{err}");
    }
}
