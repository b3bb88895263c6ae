//! `read_npy` and `write_npy`: one array in a NumPy `.npy` file, in the format of
//! [`runner_plugin::npy`] (which says exactly what is written and what is read).

use std::path::PathBuf;

pub use runner_plugin::npy::{ByteOrder, FileElement, header_bytes, read_array, write_array};
use runner_plugin::npy::{IO_BUFFER, NpyHeader, open, peek_header, read_data};
use runner_plugin::{
    ArgError, ArgSpec, Args, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{array_shape_of, expect_array, one_input_meta, one_input_value};

const READ_ARGS: &[ArgSpec] =
    &[ArgSpec::required("path", "the .npy file, relative to the directory runner started in").input_path()];
const WRITE_ARGS: &[ArgSpec] =
    &[ArgSpec::required("path", "the .npy file, relative to the directory runner started in").output_path()];

fn path_arg(args: &Args) -> Result<PathBuf, ArgError> {
    let path = args.str("path")?;
    if path.trim().is_empty() {
        return Err(ArgError::new("path", "`path` must name a file, got an empty string"));
    }
    Ok(PathBuf::from(path))
}

/// Heap bytes reading the file allocates besides its buffers: the array, twice while a
/// Fortran-ordered one is copied into C order.
fn read_bytes_needed(header: &NpyHeader) -> u64 {
    let array = header.array_bytes().unwrap_or(0);
    if header.needs_reorder() { 2 * array } else { array }
}

pub struct ReadNpy;

impl Plugin for ReadNpy {
    fn name(&self) -> &'static str {
        "read_npy"
    }

    fn about(&self) -> &'static str {
        "reads one array from a .npy file"
    }

    fn args(&self) -> &'static [ArgSpec] {
        READ_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        path_arg(args).map(|_| ())
    }

    /// Known when the file already exists; otherwise it may be made before the task runs.
    fn output(&self, args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let path = path_arg(args)?;
        Ok(match peek_header(&path) {
            Ok(header) => ValueMeta::Array { dtype: header.dtype, shape: header.shape },
            Err(_) => ValueMeta::Unknown,
        })
    }

    /// Worked out from the file's header, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    /// The array plus the read buffers, and a second copy of the array for a Fortran-ordered
    /// file; the file's header says how big it is once the file exists.
    fn estimate(&self, args: &Args, _inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        let header = path_arg(args).ok().and_then(|path| peek_header(&path).ok());
        let bytes = match header {
            Some(header) => read_bytes_needed(&header),
            None => output.bytes().unwrap_or(0),
        };
        bytes + 2 * IO_BUFFER as u64
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let path = path_arg(args).map_err(|e| TaskError::msg(e.message))?;
        let (header, reader) = open(&path).map_err(TaskError::msg)?;
        ctx.will_allocate(read_bytes_needed(&header));
        Ok(Value::Array(read_data(&path, &header, reader).map_err(TaskError::msg)?))
    }
}

pub struct WriteNpy;

impl Plugin for WriteNpy {
    fn name(&self) -> &'static str {
        "write_npy"
    }

    fn about(&self) -> &'static str {
        "writes its one input array to a .npy file atomically and returns the path"
    }

    fn args(&self) -> &'static [ArgSpec] {
        WRITE_ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        path_arg(args).map(|_| ())
    }

    fn output(&self, args: &Args, inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        path_arg(args)?;
        let input = one_input_meta(self.name(), inputs)?;
        array_shape_of(self.name(), input, ALL_DTYPES)?;
        Ok(ValueMeta::Path)
    }

    /// Worked out from the task's arrays, not guessed.
    fn estimate_is_exact(&self, _args: &Args) -> bool {
        true
    }

    /// The data goes straight from the input buffer to the file; the header, the paths and, on a
    /// big-endian machine, a write buffer are all the task allocates.
    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        IO_BUFFER as u64
    }

    fn run(&self, _ctx: &TaskContext, args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let path = path_arg(args).map_err(|e| TaskError::msg(e.message))?;
        let (name, value) = one_input_value(self.name(), inputs)?;
        let array = expect_array(self.name(), name, value, ALL_DTYPES)?;
        write_array(&path, array).map_err(TaskError::msg)?;
        Ok(Value::Path(path))
    }
}

const ALL_DTYPES: &[DType] = &DType::ALL;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{array, meta, plan, run, single};
    use runner_plugin::Element;
    use runner_plugin::npy::{SUPPORTED, descr};
    use runner_plugin::serde_json::{Value as Json, json};
    use std::io::Write as _;
    use std::path::Path;

    /// A header as NumPy 1.26 writes it, spelled out: magic, version 1.0, the little-endian length
    /// of what follows, the dict, then spaces up to `total - 1` bytes and a newline.
    fn numpy_v1_header(dict: &str, total: usize) -> Vec<u8> {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&((total - 10) as u16).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.resize(total - 1, b' ');
        bytes.push(b'\n');
        bytes
    }

    fn temp_dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// Files as `np.save` writes them, with their arrays.
    fn numpy_files() -> Vec<(&'static str, Vec<u8>, Value)> {
        let mut f32_2x3 = numpy_v1_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 128);
        #[rustfmt::skip]
        f32_2x3.extend_from_slice(&[
            0, 0, 0, 0,  0, 0, 0x80, 0x3f,  0, 0, 0, 0x40,
            0, 0, 0x40, 0x40,  0, 0, 0x80, 0x40,  0, 0, 0xa0, 0x40,
        ]);
        let mut i32_5 = numpy_v1_header("{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }", 128);
        #[rustfmt::skip]
        i32_5.extend_from_slice(&[
            1, 0, 0, 0,  0xff, 0xff, 0xff, 0xff,  2, 0, 0, 0,  0, 0, 0, 0,  7, 0, 0, 0,
        ]);
        let mut u8_scalar = numpy_v1_header("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", 128);
        u8_scalar.push(7);
        let mut f64_2x1x2 = numpy_v1_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1, 2), }", 128);
        #[rustfmt::skip]
        f64_2x1x2.extend_from_slice(&[
            0, 0, 0, 0, 0, 0, 0xe0, 0x3f,
            0, 0, 0, 0, 0, 0, 0, 0xc0,
            0, 0, 0, 0, 0, 0, 0xf0, 0x3f,
            0, 0, 0, 0, 0, 0, 0x08, 0x40,
        ]);
        // Fifteen axes: the 20 spaces NumPy reserves for growing the first axis push the header
        // past 128 bytes, so it is padded to 192.
        let ones = ["1"; 15].join(", ");
        let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({ones}), }}");
        let mut f32_15d = numpy_v1_header(&dict, 192);
        f32_15d.extend_from_slice(&[0, 0, 0x20, 0x41]);
        vec![
            ("f32 (2, 3)", f32_2x3, array(&[2, 3], vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0])),
            ("i32 (5,)", i32_5, array(&[5], vec![1i32, -1, 2, 0, 7])),
            ("u8 ()", u8_scalar, array(&[], vec![7u8])),
            ("f64 (2, 1, 2)", f64_2x1x2, array(&[2, 1, 2], vec![0.5f64, -2.0, 1.0, 3.0])),
            ("f32 15-d", f32_15d, array(&[1; 15], vec![10.0f32])),
        ]
    }

    fn same_array(a: &Value, b: &Value) -> bool {
        let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
        (a.dtype(), a.shape(), a.bytes()) == (b.dtype(), b.shape(), b.bytes())
    }

    #[test]
    fn writes_exactly_the_bytes_numpy_writes() {
        let dir = temp_dir();
        for (name, expected, value) in numpy_files() {
            let path = dir.path().join("out.npy");
            let returned = run(&WriteNpy, json!({"path": path}), &[single("array", value)]).unwrap();
            assert!(matches!(&returned, Value::Path(p) if *p == path), "{name}");
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{name}");
        }
    }

    #[test]
    fn reads_what_numpy_writes() {
        let dir = temp_dir();
        for (name, bytes, expected) in numpy_files() {
            let path = dir.path().join("in.npy");
            std::fs::write(&path, &bytes).unwrap();
            let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert!(same_array(&value, &expected), "{name}");
        }
    }

    #[test]
    fn header_of_a_uk_field_is_128_bytes() {
        let expected = numpy_v1_header("{'descr': '<f4', 'fortran_order': False, 'shape': (970, 1042), }", 128);
        assert_eq!(header_bytes(DType::F32, &[970, 1042]), expected);
    }

    #[test]
    fn round_trips_every_dtype_and_rank_through_the_plugins() {
        let dir = temp_dir();
        let values = [
            array(&[], vec![-3.25f32]),
            array(&[4], vec![1.5f64, -0.0, f64::MAX, f64::MIN_POSITIVE]),
            array(&[2, 3, 2], (0..12).map(|i| i * 1_000_003 - 7).collect::<Vec<i32>>()),
            array(&[3, 1, 5], (0..15u8).map(|i| i.wrapping_mul(37)).collect::<Vec<u8>>()),
            array(&[0, 4], Vec::<f32>::new()),
            array(&[5], vec![i8::MIN, -1, 0, 1, i8::MAX]),
            array(&[2, 2], vec![i16::MIN, -1, 1, i16::MAX]),
            array(&[3], vec![i64::MIN, -1, i64::MAX]),
            array(&[1, 3], vec![0u16, 1, u16::MAX]),
            array(&[3], vec![0u32, 1, u32::MAX]),
            array(&[3], vec![0u64, 1, u64::MAX]),
            array(&[2, 3], vec![true, false, false, true, true, false]),
        ];
        for (i, value) in values.into_iter().enumerate() {
            // Also creates the missing parent directories.
            let path = dir.path().join(format!("nested/{i}/x.npy"));
            let expected = value.meta();
            let bytes = value.as_bytes().unwrap().to_vec();
            run(&WriteNpy, json!({"path": path}), &[single("array", value)]).unwrap();
            let back = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert_eq!(back.meta(), expected);
            assert_eq!(back.as_bytes().unwrap(), bytes.as_slice());
        }
    }

    #[test]
    fn reads_version_2_headers_other_padding_and_u1_spellings() {
        let dir = temp_dir();
        let path = dir.path().join("v2.npy");
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
        bytes.extend_from_slice(&(128u32 - 12).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.resize(127, b' ');
        bytes.push(b'\n');
        bytes.extend_from_slice(&[0, 0, 0x80, 0xbf, 0, 0, 0, 0x3f]);
        std::fs::write(&path, &bytes).unwrap();
        let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
        assert!(same_array(&value, &array(&[2], vec![-1.0f32, 0.5])));

        for descr in ["<u1", "u1"] {
            // Old NumPy aligned to 16 bytes and spelled the dict with other spacing.
            let dict = format!("{{\"descr\":\"{descr}\",\"fortran_order\":False,\"shape\":(3,)}}");
            let mut bytes = numpy_v1_header(&dict, 64);
            bytes.extend_from_slice(&[9, 8, 7]);
            std::fs::write(&path, &bytes).unwrap();
            let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert!(same_array(&value, &array(&[3], vec![9u8, 8, 7])), "{descr}");
        }
    }

    #[test]
    fn rejects_garbage_naming_the_file() {
        let dir = temp_dir();
        let path = dir.path().join("bad.npy");
        let good = |dict: &str, data: &[u8]| {
            let mut bytes = numpy_v1_header(dict, 128);
            bytes.extend_from_slice(data);
            bytes
        };
        let f32_2 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "too short"),
            (b"PK\x03\x04 this is a zip file, not an array".to_vec(), "does not start with"),
            (b"\x93NUMPY\x09\x00\x10\x00".to_vec(), "version 9.0"),
            (good(f32_2, &[0; 7]), "truncated"),
            (good(f32_2, &[0; 12]), "trailing bytes"),
            (
                good("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", &[0; 16]),
                "unsupported dtype '<c8' (complex, 8 bytes per element); supported: f2 (read as f32)",
            ),
            (
                good("{'descr': '<f16', 'fortran_order': False, 'shape': (2,), }", &[0; 32]),
                "'<f16' (float, 16 bytes per element)",
            ),
            (good("{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }", &[0; 8]), "'|' marks one-byte types"),
            (
                good("{'descr': 'float', 'fortran_order': False, 'shape': (2,), }", &[0; 8]),
                "unsupported dtype 'float' (not a NumPy dtype string",
            ),
            (
                good("{'descr': [('x', '<f4'), ('y', '<i8')], 'fortran_order': False, 'shape': (2,), }", &[0; 24]),
                "structured dtype with fields [('x', '<f4'), ('y', '<i8')]",
            ),
            (good("{'descr': [('x', '<f4'), 'fortran_order': False, 'shape': (2,), }", &[0; 8]), "unclosed '['"),
            (good("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", &[0; 15]), "promises 16 bytes of i64"),
            (good("{'descr': '<f4', 'fortran_order': False, 'shape': (2, }", &[0; 8]), "malformed header"),
            (good("{'descr': '<f4', 'shape': (2,), }", &[0; 8]), "required"),
            (good("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", &[0; 8]), "malformed"),
            (good("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", &[0; 8]), "malformed"),
        ];
        for (bytes, complaint) in cases {
            std::fs::write(&path, &bytes).unwrap();
            let err = run(&ReadNpy, json!({"path": path}), &[]).unwrap_err();
            assert!(err.message().contains(complaint), "expected {complaint:?} in: {err}");
            assert!(err.message().contains("bad.npy"), "{err}");
        }
        let missing = dir.path().join("missing.npy");
        let err = run(&ReadNpy, json!({"path": missing}), &[]).unwrap_err();
        assert!(err.message().contains("missing.npy"), "{err}");
    }

    /// Runs `script` with NumPy, giving it `stdin`; panics saying what to install when there
    /// is no `python3` or no NumPy, so a missing tool is never taken for a passing test.
    fn python_with_numpy(script: &str, stdin: &str) {
        use std::process::{Command, Stdio};
        const NEED: &str = "these tests compare with files NumPy writes: they need `python3` with numpy \
                            (`pip install numpy`)";
        let mut child = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{NEED}; cannot start python3: {e}"));
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("No module named 'numpy'"), "{NEED}; python3 says: {stderr}");
        assert!(out.status.success(), "python3 failed: {stderr}");
    }

    /// Saves each case with `np.save` into `dir`: its values in C order, made an array of its
    /// `descr` and shape, in Fortran order when asked.
    fn numpy_save(dir: &Path, cases: &[Json]) {
        const SCRIPT: &str = r#"
import json, os, sys
import numpy as np
dir, cases = sys.argv[1], json.load(sys.stdin)
for case in cases:
    values = [float(v) if isinstance(v, str) else v for v in case["values"]]
    a = np.array(values, dtype=np.dtype(case["descr"])).reshape(case["shape"])
    if case["fortran"]:
        a = np.asfortranarray(a)
    np.save(os.path.join(dir, case["file"]), a)
"#;
        let script = SCRIPT.replacen("sys.argv[1]", &format!("{:?}", dir.display().to_string()), 1);
        python_with_numpy(&script, &Json::Array(cases.to_vec()).to_string());
    }

    /// Element values as JSON for the script: non-finite floats as the strings Python's `float`
    /// reads.
    trait ToJson: Copy {
        fn to_json(self) -> Json;
    }
    macro_rules! exact_json {
        ($($t:ty),*) => {$(impl ToJson for $t { fn to_json(self) -> Json { json!(self) } })*};
    }
    exact_json!(i8, i16, i32, i64, u8, u16, u32, u64, bool);
    impl ToJson for f64 {
        fn to_json(self) -> Json {
            if self.is_finite() { json!(self) } else { json!(self.to_string()) }
        }
    }
    impl ToJson for f32 {
        fn to_json(self) -> Json {
            f64::from(self).to_json()
        }
    }

    /// A file NumPy is to write (`descr`, `shape`, `values` in C order, Fortran order or not) and
    /// the array `read_npy` must make of it.
    struct NumpyCase {
        file: String,
        spec: Json,
        expected: Value,
    }

    fn numpy_case<T: Element + ToJson>(descr: &str, shape: &[usize], values: Vec<T>, fortran: bool) -> NumpyCase {
        let order = descr.replace('<', "le-").replace('>', "be-").replace('|', "");
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let file = format!("{order}_{}{}.npy", dims.join("x"), if fortran { "_fortran" } else { "" });
        let spec = json!({
            "file": file,
            "descr": descr,
            "shape": shape,
            "values": values.iter().map(|v| v.to_json()).collect::<Vec<_>>(),
            "fortran": fortran,
        });
        NumpyCase { file, spec, expected: array(shape, values) }
    }

    /// What NumPy writes for every dtype `read_npy` reads, in both byte orders, C and Fortran
    /// order, 0-d and empty: read back as the same values in C order.
    #[test]
    fn reads_every_dtype_numpy_writes() {
        let two_by_three = |v: [f64; 6]| v.to_vec();
        let halves = vec![1.5f32, -0.0, 65504.0, 2f32.powi(-14), 2f32.powi(-24), -3.0 * 2f32.powi(-24), f32::INFINITY];
        let cases = vec![
            numpy_case("|i1", &[2, 3], vec![i8::MIN, -1, 0, 1, 2, i8::MAX], false),
            numpy_case("<i2", &[4], vec![i16::MIN, -1, 1, i16::MAX], false),
            numpy_case(">i2", &[4], vec![i16::MIN, -1, 1, i16::MAX], false),
            numpy_case("<i4", &[3], vec![i32::MIN, -7, i32::MAX], false),
            numpy_case(">i4", &[3], vec![i32::MIN, -7, i32::MAX], false),
            numpy_case("<i8", &[2, 2], vec![i64::MIN, -1, 1 << 40, i64::MAX], false),
            numpy_case(">i8", &[2, 2], vec![i64::MIN, -1, 1 << 40, i64::MAX], false),
            numpy_case("|u1", &[3], vec![0u8, 128, 255], false),
            numpy_case("<u2", &[3], vec![0u16, 258, u16::MAX], false),
            numpy_case(">u2", &[3], vec![0u16, 258, u16::MAX], false),
            numpy_case("<u4", &[3], vec![0u32, 1 << 31, u32::MAX], false),
            numpy_case(">u4", &[3], vec![0u32, 1 << 31, u32::MAX], false),
            numpy_case("<u8", &[4], vec![0u64, 1, 1 << 63, u64::MAX], false),
            numpy_case(">u8", &[4], vec![0u64, 1, 1 << 63, u64::MAX], false),
            numpy_case("<f4", &[5], vec![1.5f32, -0.0, f32::MAX, f32::MIN_POSITIVE, f32::NEG_INFINITY], false),
            numpy_case(">f4", &[5], vec![1.5f32, -0.0, f32::MAX, f32::MIN_POSITIVE, f32::NAN], false),
            numpy_case("<f8", &[2, 3], two_by_three([0.1, -2.5, 1e300, 5e-324, f64::MAX, -0.0]), false),
            numpy_case(">f8", &[2, 3], two_by_three([0.1, -2.5, 1e300, 5e-324, f64::MAX, f64::INFINITY]), false),
            numpy_case("<f2", &[7], halves.clone(), false),
            numpy_case(">f2", &[7], halves, false),
            numpy_case("|b1", &[2, 2], vec![true, false, false, true], false),
            // Fortran order, also big-endian, half and bool, and in three dims.
            numpy_case("<i4", &[2, 3], vec![0i32, 1, 2, 3, 4, 5], true),
            numpy_case(">f8", &[2, 3, 4], (0..24).map(|i| f64::from(i) * 0.5 - 3.0).collect(), true),
            numpy_case("|b1", &[3, 2], vec![true, false, false, false, true, true], true),
            numpy_case("<f2", &[2, 2], vec![1.0f32, 2.0, -0.5, 0.25], true),
            numpy_case("<u2", &[2, 1, 3], vec![1u16, 2, 3, 4, 5, 6], true),
            // 0-d and empty.
            numpy_case("<i8", &[], vec![-42i64], false),
            numpy_case(">u2", &[0, 3], Vec::<u16>::new(), false),
        ];
        let dir = temp_dir();
        let specs: Vec<Json> = cases.iter().map(|c| c.spec.clone()).collect();
        numpy_save(dir.path(), &specs);
        let mut names: Vec<&str> = cases.iter().map(|c| c.file.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "every case has its own file");
        for case in &cases {
            let path = dir.path().join(&case.file);
            let header = peek_header(&path).unwrap();
            // The files are what the cases claim to exercise.
            let descr = case.spec["descr"].as_str().unwrap();
            let multi_byte = header.element.size() > 1;
            assert_eq!(header.byte_order == ByteOrder::Big, multi_byte && descr.starts_with('>'), "{}", case.file);
            assert_eq!(header.fortran_order, case.spec["fortran"] == true && header.shape.len() > 1, "{}", case.file);
            let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
            assert!(same_array(&value, &case.expected), "{}: read {:?}", case.file, value);
        }
    }

    /// Every one of the 65 536 half-precision values, little- and big-endian, reads as the f32
    /// NumPy widens it to (NaNs: a NaN of the same sign).
    #[test]
    fn every_half_reads_as_numpy_widens_it() {
        let dir = temp_dir();
        let script = format!(
            "import os\nimport numpy as np\nd = {:?}\nh = np.arange(65536, dtype=np.uint16).view(np.float16)\n\
             np.save(os.path.join(d, 'le.npy'), h.astype('<f2'))\nnp.save(os.path.join(d, 'be.npy'), h.astype('>f2'))\n\
             np.save(os.path.join(d, 'f32.npy'), h.astype('<f4'))\n",
            dir.path().display().to_string()
        );
        python_with_numpy(&script, "");
        let widened = read_array(&dir.path().join("f32.npy")).unwrap();
        let widened = widened.view::<f32>().unwrap();
        for file in ["le.npy", "be.npy"] {
            let read = read_array(&dir.path().join(file)).unwrap();
            assert_eq!((read.dtype(), read.shape()), (DType::F32, &[65536][..]));
            for (bits, (&ours, &numpy)) in read.view::<f32>().unwrap().iter().zip(widened.iter()).enumerate() {
                let same = if numpy.is_nan() {
                    ours.is_nan() && ours.is_sign_negative() == numpy.is_sign_negative()
                } else {
                    ours.to_bits() == numpy.to_bits()
                };
                assert!(same, "{file}: half {bits:#06x} read as {ours:e}, NumPy says {numpy:e}");
            }
        }
    }

    /// `write_npy` writes, byte for byte, what `np.save` writes for the same values, for every
    /// dtype and for 0-d, 1-d, 3-d and empty arrays.
    #[test]
    fn writes_the_bytes_np_save_writes_for_every_dtype() {
        let cases = vec![
            numpy_case(descr(DType::F32), &[2, 3], vec![0.0f32, 1.0, -2.5, 1e30, f32::MIN_POSITIVE, -0.0], false),
            numpy_case(descr(DType::F64), &[], vec![std::f64::consts::PI], false),
            numpy_case(descr(DType::I8), &[2, 1, 3], vec![i8::MIN, -1, 0, 1, 2, i8::MAX], false),
            numpy_case(descr(DType::I16), &[4], vec![i16::MIN, -1, 1, i16::MAX], false),
            numpy_case(descr(DType::I32), &[0], Vec::<i32>::new(), false),
            numpy_case(descr(DType::I64), &[970, 2], (0..1940).map(|i| (i - 970) * 1_000_000_007i64).collect(), false),
            numpy_case(descr(DType::U8), &[3], vec![0u8, 128, 255], false),
            numpy_case(descr(DType::U16), &[1, 3], vec![0u16, 258, u16::MAX], false),
            numpy_case(descr(DType::U32), &[3], vec![0u32, 1 << 31, u32::MAX], false),
            numpy_case(descr(DType::U64), &[2, 2], vec![0u64, 1, 1 << 63, u64::MAX], false),
            numpy_case(descr(DType::Bool), &[2, 3], vec![true, false, false, true, true, false], false),
        ];
        let theirs = temp_dir();
        let specs: Vec<Json> = cases.iter().map(|c| c.spec.clone()).collect();
        numpy_save(theirs.path(), &specs);
        let ours = temp_dir();
        let mut dtypes = Vec::new();
        for case in cases {
            let path = ours.path().join(&case.file);
            dtypes.push(case.expected.as_array().unwrap().dtype());
            run(&WriteNpy, json!({"path": path}), &[single("array", case.expected)]).unwrap();
            let expected = std::fs::read(theirs.path().join(&case.file)).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{}", case.file);
        }
        assert_eq!(dtypes, DType::ALL, "every dtype is written");
    }

    /// What NumPy writes but arrays cannot hold is refused naming the dtype and what is read.
    #[test]
    fn dtypes_numpy_writes_that_are_not_supported_are_named() {
        let dir = temp_dir();
        let script = format!(
            "import os\nimport numpy as np\nd = {:?}\n\
             np.save(os.path.join(d, 'complex.npy'), np.zeros(3, dtype=np.complex64))\n\
             np.save(os.path.join(d, 'text.npy'), np.array(['a', 'bcd']))\n\
             np.save(os.path.join(d, 'record.npy'), np.zeros(2, dtype=[('x', '<f4'), ('y', '<i8')]))\n\
             np.save(os.path.join(d, 'dates.npy'), np.array(['2026-11-01'], dtype='datetime64[D]'))\n",
            dir.path().display().to_string()
        );
        python_with_numpy(&script, "");
        for (file, complaint) in [
            ("complex.npy", "unsupported dtype '<c8' (complex, 8 bytes per element)"),
            ("text.npy", "unsupported dtype '<U3' (unicode string)"),
            ("record.npy", "structured dtype with fields [('x', '<f4'), ('y', '<i8')]"),
            ("dates.npy", "unsupported dtype '<M8[D]' (datetime)"),
        ] {
            let err = run(&ReadNpy, json!({"path": dir.path().join(file)}), &[]).unwrap_err();
            let message = err.message();
            assert!(message.contains(complaint) && message.contains(file), "{file}: {message}");
            assert!(message.contains(SUPPORTED) && !message.contains("malformed"), "{file}: {message}");
        }
    }

    /// Bytes other than 0 and 1 in a bool file are true, as NumPy treats them; a Fortran-ordered
    /// file's estimate counts the copy into C order.
    #[test]
    fn bool_bytes_and_the_cost_of_fortran_order() {
        let dir = temp_dir();
        let path = dir.path().join("b.npy");
        let mut bytes = numpy_v1_header("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", 128);
        bytes.extend_from_slice(&[0, 1, 2, 255]);
        std::fs::write(&path, &bytes).unwrap();
        let value = run(&ReadNpy, json!({"path": path}), &[]).unwrap();
        assert!(same_array(&value, &array(&[4], vec![false, true, true, true])));

        let fortran = dir.path().join("f.npy");
        let mut bytes = numpy_v1_header("{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3), }", 128);
        bytes.extend_from_slice(&[0; 12]);
        std::fs::write(&fortran, &bytes).unwrap();
        let (meta_out, estimate) = plan(&ReadNpy, json!({"path": fortran}), &[]).unwrap();
        assert_eq!(meta_out, ValueMeta::Array { dtype: DType::F32, shape: vec![2, 3] });
        // 6 halves read as 24 bytes of f32, copied once into C order.
        assert_eq!(estimate, 2 * 24 + 2 * IO_BUFFER as u64);
    }

    #[test]
    fn a_failed_write_leaves_no_file_behind() {
        let dir = temp_dir();
        // The target is a directory, so the final rename fails after the data was written.
        let target = dir.path().join("taken.npy");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"x").unwrap();
        let err = run(&WriteNpy, json!({"path": target}), &[single("a", array(&[2], vec![1.0f32, 2.0]))]).unwrap_err();
        assert!(err.message().contains("taken.npy"), "{err}");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("taken.npy")]);
    }

    #[test]
    fn plan_metadata_and_checks() {
        let dir = temp_dir();
        let path = dir.path().join("x.npy");
        assert_eq!(plan(&ReadNpy, json!({"path": path}), &[]).unwrap().0, ValueMeta::Unknown);
        write_array(&path, array(&[3, 4], vec![0.0f64; 12]).as_array().unwrap()).unwrap();
        let (meta_out, estimate) = plan(&ReadNpy, json!({"path": path}), &[]).unwrap();
        assert_eq!(meta_out, ValueMeta::Array { dtype: DType::F64, shape: vec![3, 4] });
        assert_eq!(estimate, 96 + 2 * IO_BUFFER as u64);

        let input = meta("a", ValueMeta::Array { dtype: DType::I32, shape: vec![2] });
        assert_eq!(plan(&WriteNpy, json!({"path": "o.npy"}), &[input]).unwrap().0, ValueMeta::Path);
        assert!(plan(&WriteNpy, json!({"path": "o.npy"}), &[meta("a", ValueMeta::Json)]).is_err());
        assert!(plan(&WriteNpy, json!({"path": "o.npy"}), &[]).is_err());
        let err = plan(&WriteNpy, json!({"path": ""}), &[]).unwrap_err();
        assert_eq!(err.arg.as_deref(), Some("path"));
        let err = plan(&ReadNpy, json!({"path": [1]}), &[]).unwrap_err();
        assert_eq!(err.arg.as_deref(), Some("path"));
    }

    /// A pickled Python object (bytes to the engine) is refused, not written as a `u8` file.
    #[test]
    fn a_pickled_python_object_is_refused_and_no_file_written() {
        let dir = temp_dir();
        let path = dir.path().join("object.npy");
        let object = crate::python_object::PythonObject::sample("numpy.ma.MaskedArray of dtype '<f8'");
        let err = run(&WriteNpy, json!({"path": path}), &[single("array", object)]).unwrap_err();
        assert!(
            err.message().starts_with(
                "`write_npy`: input `array` is a Python object (a pickled numpy.ma.MaskedArray of dtype '<f8'), \
                 not an array"
            ),
            "{err}"
        );
        assert!(!path.exists());
    }
}
