use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{DType, FailureKind, Value};

use super::*;
use crate::testing::{array, ndarray_of, run, single};

fn with_attrs(mut value: Value, attrs: Json) -> Value {
    let Value::Array(a) = &mut value else { panic!("an array") };
    for (k, v) in attrs.as_object().unwrap() {
        a.attrs_mut().insert(k.clone(), v.clone());
    }
    value
}

fn round_trip(value: Value, write_args: Json) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.nc");
    let mut args = write_args;
    args["path"] = json!(path);
    let written = run(&WriteNetcdf, args.clone(), &[single("a", value)]).unwrap();
    assert!(matches!(written, Value::Path(p) if p == path));
    let variable = args.get("variable").cloned().unwrap_or(json!("data"));
    run(&ReadNetcdf, json!({"path": path, "variable": variable}), &[]).unwrap()
}

fn grid_coords() -> Json {
    json!({
        "lat": {"dims": ["lat"], "dtype": "f32", "values": [-1.5, 0.5, 2.5],
                "attrs": {"units": "degrees_north", "long_name": "Latitude"}, "attr_types": {}},
        "lon": {"dims": ["lon"], "dtype": "f64", "values": [10.0, 20.0],
                "attrs": {"units": "degrees_east"}, "attr_types": {}},
        "time": {"dims": ["time"], "dtype": "f32", "values": [1340.0],
                 "attrs": {"units": "days since 1978-01-01 12:00:00", "calendar": "standard"}, "attr_types": {}}
    })
}

#[test]
fn f32_round_trip_keeps_values_coords_and_every_attribute_type() {
    let values = vec![1.0f32, f32::NAN, -2.5, 3.25, 1e30, -0.0];
    let input = with_attrs(
        array(&[1, 3, 2], values.clone()),
        json!({
            "variable": "sst",
            "dims": ["time", "lat", "lon"],
            "attrs": {"units": "Celsius", "valid_min": -300, "valid_max": 4500, "ratio": 0.5,
                      "flags": [1, 2, 4], "level": 7, "note": "a b", "tiny": 2, "big": 1e10, "names": ["a", "b"]},
            "attr_types": {"valid_min": "i16", "valid_max": "i16", "ratio": "f32", "tiny": "i8", "big": "f64",
                           "names": "strings"},
            "coords": grid_coords(),
            "global_attrs": {"Conventions": "CF-1.6", "version": 2},
            "global_attr_types": {"version": "i16"},
            "thresholds": [0.5, 2.0],
        }),
    );
    let back = round_trip(input, json!({"variable": "sst"}));
    let a = back.as_array().unwrap();
    assert_eq!(a.dtype(), DType::F32);
    assert_eq!(a.shape(), &[1, 3, 2]);
    let got = ndarray_of::<f32>(&back).into_raw_vec_and_offset().0;
    for (g, v) in got.iter().zip(&values) {
        assert!(g.to_bits() == v.to_bits() || (g.is_nan() && v.is_nan()), "{g} vs {v}");
    }
    let attrs = a.attrs();
    assert_eq!(attrs["variable"], json!("sst"));
    assert_eq!(attrs["dims"], json!(["time", "lat", "lon"]));
    assert_eq!(
        attrs["attrs"],
        json!({"units": "Celsius", "valid_min": -300, "valid_max": 4500, "ratio": 0.5, "flags": [1, 2, 4],
               "level": 7, "note": "a b", "tiny": 2, "big": 1e10, "names": ["a", "b"],
               "thresholds": [0.5, 2.0]})
    );
    assert_eq!(
        attrs["attr_types"],
        json!({"valid_min": "i16", "valid_max": "i16", "ratio": "f32", "tiny": "i8", "names": "strings"})
    );
    // Unpacked floats are written with a NaN fill value, as xarray writes them.
    assert_eq!(attrs["encoding"], json!({"dtype": "f32", "_FillValue": "NaN"}));
    assert_eq!(attrs["coords"], grid_coords());
    assert_eq!(attrs["global_attrs"], json!({"Conventions": "CF-1.6", "version": 2}));
    assert_eq!(attrs["global_attr_types"], json!({"version": "i16"}));
}

#[test]
fn packed_shorts_unpack_to_f32_with_fill_as_nan_and_pack_back_identically() {
    let encoding = json!({"dtype": "i16", "scale_factor": 0.01, "add_offset": 0.0, "_FillValue": -999,
                          "packing_type": "f32"});
    let input = with_attrs(
        array(&[2, 3], vec![12.34f32, f32::NAN, -1.8, 30.0, 0.005, -0.015]),
        json!({"variable": "sst", "dims": ["lat", "lon"], "attrs": {"units": "Celsius"}, "encoding": encoding}),
    );
    let back = round_trip(input, json!({"variable": "sst"}));
    let a = back.as_array().unwrap();
    assert_eq!(a.dtype(), DType::F32);
    assert_eq!(a.attrs()["encoding"], encoding);
    // What xarray gives for these shorts: short as f32, times the f32 scale, plus the f32 offset.
    let expect: Vec<f32> = [1234i16, -999, -180, 3000, 0, -2]
        .iter()
        .map(|&s| if s == -999 { f32::NAN } else { f32::from(s) * 0.01f32 + 0.0f32 })
        .collect();
    let got = ndarray_of::<f32>(&back).into_raw_vec_and_offset().0;
    for (g, e) in got.iter().zip(&expect) {
        assert!(g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()), "{g} vs {e}");
    }
    // Packing the decoded values again gives the same file contents.
    let again = round_trip(back, json!({"variable": "sst"}));
    let twice = ndarray_of::<f32>(&again).into_raw_vec_and_offset().0;
    assert!(twice.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())));
}

#[test]
fn raw_ints_without_decoding_and_every_dtype() {
    // i32 stored as i16 when the encoding says so, read back as whole numbers.
    let ints = with_attrs(array(&[4], vec![-3i32, 0, 7, 32767]), json!({"encoding": {"dtype": "i16"}}));
    let back = round_trip(ints, json!({}));
    assert_eq!(back.as_array().unwrap().dtype(), DType::I32);
    assert_eq!(ndarray_of::<i32>(&back).into_raw_vec_and_offset().0, vec![-3, 0, 7, 32767]);
    assert_eq!(back.as_array().unwrap().attrs()["encoding"], json!({"dtype": "i16"}));
    let too_big = with_attrs(array(&[1], vec![40000i32]), json!({"encoding": {"dtype": "i16"}}));
    let dir = tempfile::tempdir().unwrap();
    let err = run(&WriteNetcdf, json!({"path": dir.path().join("x.nc")}), &[single("a", too_big)]).unwrap_err();
    assert!(err.message().contains("value 40000 does not fit in i16"), "{err}");

    let f64s = round_trip(array(&[2, 2], vec![1.0f64, f64::NAN, 1e-300, -4.0]), json!({}));
    assert_eq!(f64s.as_array().unwrap().dtype(), DType::F64);
    let got = ndarray_of::<f64>(&f64s).into_raw_vec_and_offset().0;
    assert_eq!((got[0], got[2], got[3]), (1.0, 1e-300, -4.0));
    assert!(got[1].is_nan());
    assert_eq!(f64s.as_array().unwrap().attrs()["dims"], json!(["dim_0", "dim_1"]));

    let bytes = round_trip(array(&[3], vec![0u8, 128, 255]), json!({"deflate": 0, "shuffle": false}));
    assert_eq!(ndarray_of::<u8>(&bytes).into_raw_vec_and_offset().0, vec![0, 128, 255]);
    let plain_i32 = round_trip(array(&[2], vec![i32::MIN + 1, i32::MAX]), json!({"chunks": [1]}));
    assert_eq!(ndarray_of::<i32>(&plain_i32).into_raw_vec_and_offset().0, vec![i32::MIN + 1, i32::MAX]);
}

#[test]
fn packed_ints_with_f64_scale_and_offset_decode_to_f64() {
    let encoding = json!({"dtype": "i32", "scale_factor": 0.001, "add_offset": 273.15, "_FillValue": -2147483647,
                          "packing_type": "f64"});
    let input = with_attrs(array(&[3], vec![0.0f64, 300.5, f64::NAN]), json!({"encoding": encoding}));
    let back = round_trip(input, json!({}));
    assert_eq!(back.as_array().unwrap().dtype(), DType::F64);
    let got = ndarray_of::<f64>(&back).into_raw_vec_and_offset().0;
    let pack = |x: f64| ((x - 273.15) / 0.001).round_ties_even() * 0.001 + 273.15;
    assert_eq!((got[0], got[1]), (pack(0.0), pack(300.5)));
    assert!(got[2].is_nan());
}

#[test]
fn without_mask_and_scale_the_stored_values_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.nc");
    let input = with_attrs(
        array(&[3], vec![1.0f32, f32::NAN, 2.0]),
        json!({"encoding": {"dtype": "i16", "scale_factor": 0.5, "_FillValue": -1, "packing_type": "f32"}}),
    );
    run(&WriteNetcdf, json!({"path": path}), &[single("a", input)]).unwrap();
    let raw = run(&ReadNetcdf, json!({"path": path, "variable": "data", "mask_and_scale": false}), &[]).unwrap();
    assert_eq!(ndarray_of::<i32>(&raw).into_raw_vec_and_offset().0, vec![2, -1, 4]);
    // The packing attributes stay attributes when they were not used.
    assert_eq!(raw.as_array().unwrap().attrs()["attrs"]["scale_factor"], json!(0.5));
}

#[test]
fn errors_name_the_file_the_variable_and_what_there_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oisst.nc");
    let a = with_attrs(array(&[1], vec![1.0f32]), json!({"variable": "sst", "dims": ["x"]}));
    run(&WriteNetcdf, json!({"path": path}), &[single("a", a)]).unwrap();
    let err = run(&ReadNetcdf, json!({"path": path, "variable": "sstt"}), &[]).unwrap_err();
    assert_eq!(err.kind(), FailureKind::Error);
    assert_eq!(
        err.message(),
        format!("no variable `sstt` in {}; the file has: sst (did you mean `sst`?)", path.display())
    );

    // A hint only when the name is close: `sst` is not a typo of `lat` (two letters of three).
    let far = dir.path().join("far.nc");
    let a = with_attrs(
        array(&[1], vec![1.0f32]),
        json!({"variable": "sea_surface_temp", "dims": ["lat"],
               "coords": {"lat": {"dims": ["lat"], "dtype": "f32", "values": [0.5], "attrs": {}, "attr_types": {}}}}),
    );
    run(&WriteNetcdf, json!({"path": far}), &[single("a", a)]).unwrap();
    let err = run(&ReadNetcdf, json!({"path": far, "variable": "sst"}), &[]).unwrap_err();
    assert_eq!(err.message(), format!("no variable `sst` in {}; the file has: sea_surface_temp", far.display()));

    let missing = dir.path().join("198109/missing.nc");
    let err = run(&ReadNetcdf, json!({"path": missing, "variable": "sst"}), &[]).unwrap_err();
    assert_eq!(err.kind(), FailureKind::MissingInput);
    assert_eq!(err.message(), format!("no file {}", missing.display()));

    let junk = dir.path().join("junk.nc");
    std::fs::write(&junk, b"not a netCDF file at all").unwrap();
    let err = run(&ReadNetcdf, json!({"path": junk, "variable": "sst"}), &[]).unwrap_err();
    assert_eq!(err.kind(), FailureKind::Error);
    assert!(err.message().starts_with(&format!("reading {}: not a readable netCDF file", junk.display())), "{err}");

    let err = run(&WriteNetcdf, json!({"path": dir.path().join("a.nc"), "deflate": 12}), &[]).unwrap_err();
    assert_eq!(err.message(), "`deflate` must be a level from 0 to 9, got 12");
    let err = run(&ReadNetcdf, json!({"path": "", "variable": "x"}), &[]).unwrap_err();
    assert_eq!(err.message(), "`path` must name a file, got an empty string");
}

#[test]
fn plan_metadata_comes_from_the_first_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.nc");
    let args = json!({"path": path, "variable": "data"});
    assert_eq!(crate::testing::plan(&ReadNetcdf, args.clone(), &[]).unwrap().0, ValueMeta::Unknown);
    let input = with_attrs(
        array(&[2, 3], vec![0.0f32; 6]),
        json!({"encoding": {"dtype": "i16", "scale_factor": 0.01, "_FillValue": -999, "packing_type": "f32"}}),
    );
    run(&WriteNetcdf, json!({"path": path}), &[single("a", input)]).unwrap();
    let (meta, estimate) = crate::testing::plan(&ReadNetcdf, args, &[]).unwrap();
    assert_eq!(meta, ValueMeta::Array { dtype: DType::F32, shape: vec![2, 3] });
    assert!(estimate >= 6 * 4);
}

#[test]
fn an_array_whose_dims_attribute_does_not_fit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = with_attrs(array(&[2, 2], vec![0.0f32; 4]), json!({"dims": ["x"]}));
    let err = run(&WriteNetcdf, json!({"path": dir.path().join("b.nc")}), &[single("a", bad)]).unwrap_err();
    assert!(err.message().contains("does not name its 2 dims (shape [2, 2])"), "{err}");
}

/// A netCDF-3 (CDF-1) file: `dims` as (name, length; 0 is the record dim), no attributes, and
/// `vars` as (name, dim ids, nc_type: 5 float, 6 double) with no data after the header: what a
/// header may declare is not what the file holds.
fn classic_header(numrecs: u32, dims: &[(&str, u32)], vars: &[(&str, &[u32], u32)]) -> Vec<u8> {
    fn name(out: &mut Vec<u8>, name: &str) {
        out.extend((name.len() as u32).to_be_bytes());
        out.extend(name.as_bytes());
        out.resize(out.len().next_multiple_of(4), 0);
    }
    let mut out = b"CDF\x01".to_vec();
    out.extend(numrecs.to_be_bytes());
    out.extend([0, 0, 0, 0x0A]);
    out.extend((dims.len() as u32).to_be_bytes());
    for (dim, len) in dims {
        name(&mut out, dim);
        out.extend(len.to_be_bytes());
    }
    out.extend([0u8; 8]); // no global attributes
    out.extend([0, 0, 0, 0x0B]);
    out.extend((vars.len() as u32).to_be_bytes());
    for (var, dim_ids, nc_type) in vars {
        name(&mut out, var);
        out.extend((dim_ids.len() as u32).to_be_bytes());
        for id in *dim_ids {
            out.extend(id.to_be_bytes());
        }
        out.extend([0u8; 8]); // no attributes
        out.extend(nc_type.to_be_bytes());
        out.extend(u32::MAX.to_be_bytes()); // vsize: "too large for the field", as the format allows
        out.extend(256u32.to_be_bytes()); // begin
    }
    out
}

fn read_bytes(bytes: &[u8], variable: &str) -> Result<Value, runner_plugin::TaskError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.nc");
    std::fs::write(&path, bytes).unwrap();
    run(&ReadNetcdf, json!({"path": path, "variable": variable}), &[])
}

#[test]
fn a_header_declaring_more_values_than_the_file_holds_is_refused_before_allocating() {
    // 65536 × 65536 floats (16 GiB) declared in a file of a hundred bytes.
    let bytes = classic_header(0, &[("y", 65536), ("x", 65536)], &[("big", &[0, 1], 5)]);
    let err = read_bytes(&bytes, "big").unwrap_err();
    assert!(err.message().contains("its shape [65536, 65536] declares 4294967296 values (16.0 GiB)"), "{err}");
    assert!(err.message().contains("more than the whole file"), "{err}");
    // Its plan-time estimate says how big it is, without overflowing.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.nc");
    std::fs::write(&path, &bytes).unwrap();
    let (meta, estimate) = crate::testing::plan(&ReadNetcdf, json!({"path": path, "variable": "big"}), &[]).unwrap();
    assert_eq!(meta, ValueMeta::Array { dtype: DType::F32, shape: vec![65536, 65536] });
    assert_eq!(estimate, (65536u64 * 65536) * 12 + (2 << 20));
}

#[test]
fn a_shape_whose_values_overflow_is_refused_and_its_estimate_saturates() {
    let dims = [("a", u32::MAX), ("b", u32::MAX), ("c", u32::MAX)];
    let bytes = classic_header(0, &dims, &[("v", &[0, 1, 2], 6)]);
    let err = read_bytes(&bytes, "v").unwrap_err();
    assert!(
        err.message().contains("its shape [4294967295, 4294967295, 4294967295] has more values than memory can index"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.nc");
    std::fs::write(&path, &bytes).unwrap();
    let (_, estimate) = crate::testing::plan(&ReadNetcdf, json!({"path": path, "variable": "v"}), &[]).unwrap();
    assert_eq!(estimate, u64::MAX);
}

#[test]
fn an_empty_variable_whose_coordinate_declares_too_much_is_refused() {
    // `v` is (time, x) with no records: no values. Its coordinate `x` declares 2^31 doubles.
    let dims = [("time", 0), ("x", 1 << 31)];
    let mut bytes = classic_header(0, &dims, &[("v", &[0, 1], 5), ("x", &[1], 6)]);
    // Past the variables' data offset (256), so that the file opens and the coordinate is read.
    bytes.resize(512, 0);
    let err = read_bytes(&bytes, "v").unwrap_err();
    assert!(
        err.message().contains("coordinate `x`: its shape [2147483648] declares 2147483648 values (16.0 GiB)"),
        "{err}"
    );
}

#[test]
fn a_read_within_a_limit_refuses_a_variable_that_needs_more() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.nc");
    let written = run(
        &WriteNetcdf,
        json!({"path": path, "variable": "v"}),
        &[single("a", array(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]))],
    );
    written.unwrap();
    let read = |max_bytes| crate::testing::with_context(|ctx| read::read_within(ctx, &path, "v", true, max_bytes));
    // 6 f32 values, stored and decoded: 48 bytes.
    assert_eq!(read(48).unwrap().shape(), &[2, 3]);
    let Err(read::ReadError::Failed(message)) = read(47) else { panic!("47 bytes are too few") };
    assert!(
        message.contains("its shape [2, 3] holds 6 values, which take 48 B to read and decode, more than the 47 B"),
        "{message}"
    );
}

#[test]
fn a_task_s_run_reads_the_header_its_estimate_read_unless_the_file_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.nc");
    let write = |value: f32| {
        // A new file in the path's place, as a model writing its output would (a new inode).
        let other = dir.path().join("new.nc");
        run(&WriteNetcdf, json!({"path": other}), &[single("a", array(&[2, 2], vec![value; 4]))]).unwrap();
        std::fs::rename(&other, &path).unwrap();
    };
    let args = json!({"path": path, "variable": "data"});
    let opened = || read::OPENED.with(|opened| opened.get());
    let value_read = || ndarray_of::<f32>(&run(&ReadNetcdf, args.clone(), &[]).unwrap())[[0, 0]];
    write(1.0);
    let before = opened();
    // Its shape asked (the estimate at the claim), then run on the same thread: one open.
    crate::testing::plan(&ReadNetcdf, args.clone(), &[]).unwrap();
    assert_eq!(value_read(), 1.0);
    assert_eq!(opened() - before, 1);
    // Asked, then the file replaced before the run: the run reads the new file.
    crate::testing::plan(&ReadNetcdf, args.clone(), &[]).unwrap();
    write(2.0);
    assert_eq!(value_read(), 2.0);
    assert_eq!(opened() - before, 3);
    // A run with nothing kept opens the file.
    assert_eq!(value_read(), 2.0);
    assert_eq!(opened() - before, 4);
}
