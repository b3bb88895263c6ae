use std::sync::Arc;

use runner_plugin::serde_json::{Value as Json, json};
use runner_plugin::{
    Args, DimRead, DimValue, GroupOf, Input, InputLayout, Inputs, LayoutDim, Plugin, ProducerDim, StepLayout,
    TaskContext, Value,
};

use super::create::clear_store;
use super::finalize::remove_replaced;
use super::write::positions;
use super::*;
use crate::testing::{TestHost, args, array};

fn layout(block_size: u64, create_chunk: u64) -> StepLayout {
    StepLayout {
        step: "store_chunk".into(),
        dims: vec![LayoutDim {
            name: "chunk".into(),
            len: 4,
            group: Some(GroupOf { dim: "day".into(), dim_len: 20, size: block_size }),
        }],
        inputs: vec![
            InputLayout {
                name: "fields".into(),
                producer: "read".into(),
                producer_plugin: "read_netcdf".into(),
                producer_args: Args::default(),
                producer_dims: vec![ProducerDim {
                    name: "day".into(),
                    len: 20,
                    read: DimRead::Block { group: "chunk".into(), size: block_size },
                }],
            },
            InputLayout {
                name: "store".into(),
                producer: "prepare".into(),
                producer_plugin: "zarr_create".into(),
                producer_args: args(json!({"store": "s.zarr", "chunk": create_chunk})),
                producer_dims: vec![],
            },
        ],
    }
}

#[test]
fn the_layout_check_refuses_tasks_that_would_share_a_chunk() {
    let none = Args::default();
    assert_eq!(WriteZarr.check_layout(&none, &layout(5, 5)), Ok(()));
    let err = WriteZarr.check_layout(&none, &layout(5, 10)).unwrap_err();
    assert!(err.message.contains("writes a block of 5 `day` values, but step `prepare` makes chunks of 10: several tasks would write each chunk"), "{}", err.message);
    let err = WriteZarr.check_layout(&none, &layout(10, 5)).unwrap_err();
    assert!(err.message.contains("a task would write parts of two chunks"), "{}", err.message);

    let mut extra = layout(5, 5);
    extra.dims.push(LayoutDim { name: "member".into(), len: 3, group: None });
    let err = WriteZarr.check_layout(&args(json!({"block": "chunk"})), &extra).unwrap_err();
    assert!(err.message.contains("differ only in `member` would write the same chunks"), "{}", err.message);
    let err = WriteZarr.check_layout(&none, &extra).unwrap_err();
    assert!(err.message.contains("name the one whose value is the chunk number with `block`"), "{}", err.message);

    let mut all = layout(5, 5);
    all.inputs[0].producer_dims.push(ProducerDim { name: "member".into(), len: 3, read: DimRead::All });
    let err = WriteZarr.check_layout(&none, &all).unwrap_err();
    assert!(err.message.contains("gathers all of `member`"), "{}", err.message);

    let mut no_create = layout(5, 5);
    no_create.inputs.pop();
    let err = WriteZarr.check_layout(&none, &no_create).unwrap_err();
    assert!(err.message.contains("needs an input from a `zarr_create` step"), "{}", err.message);
}

/// A field of 2 × 3 on day `day` (its time coordinate), as `read_netcdf` describes one.
fn field(day: i64, value: f32) -> Value {
    let mut v = array(&[1, 2, 3], vec![value; 6]);
    let Value::Array(a) = &mut v else { unreachable!() };
    let attrs = a.attrs_mut();
    attrs.insert("variable".into(), json!("sst"));
    attrs.insert("dims".into(), json!(["time", "lat", "lon"]));
    attrs.insert("attrs".into(), json!({"units": "Celsius"}));
    attrs.insert("global_attrs".into(), json!({"title": "test"}));
    attrs.insert(
        "coords".into(),
        json!({
            "time": {"dims": ["time"], "dtype": "f32", "values": [1339 + day], "attrs": {"units": "days since 1978-01-01 12:00:00"}},
            "lat": {"dims": ["lat"], "dtype": "f32", "values": [-1.0, 1.0], "attrs": {"units": "degrees_north"}},
            "lon": {"dims": ["lon"], "dtype": "f64", "values": [0.0, 1.0, 2.0], "attrs": {}}
        }),
    );
    v
}

fn run_task(
    plugin: &dyn Plugin,
    a: Json,
    index: &[(&str, DimValue)],
    inputs: Vec<(&'static str, bool, Vec<Value>)>,
) -> Value {
    let host = TestHost::new();
    let ctx = TaskContext::new("step", "", "cycle", index, 0, &host);
    let held: Vec<(&str, bool, Vec<Arc<Value>>)> =
        inputs.into_iter().map(|(n, g, v)| (n, g, v.into_iter().map(Arc::new).collect())).collect();
    let list: Vec<Input<'_>> = held.iter().map(|(n, g, v)| Input::new(n, *g, v)).collect();
    plugin.run(&ctx, &args(a), &Inputs::new(&list)).unwrap()
}

#[test]
fn fields_go_to_their_coordinate_positions_and_gaps_stay_fill() {
    for format in [3, 2] {
        let dir = tempfile::tempdir().unwrap();
        let store_path = dir.path().join("s.zarr");
        let spec = run_task(
            &ZarrCreate,
            json!({"store": store_path, "chunk": 4, "concat_dim": "time", "zarr_format": format}),
            &[],
            vec![("first", false, vec![field(0, 0.0)])],
        );
        let spec_json = match &spec {
            Value::Json(j) => j.clone(),
            other => panic!("{other:?}"),
        };
        // Block 0 lacks day 2; block 1 has only day 5.
        let block0 = run_task(
            &WriteZarr,
            json!({}),
            &[("chunk", DimValue::Int(0))],
            vec![
                ("fields", true, vec![field(0, 10.0), field(1, 11.0), field(3, 13.0)]),
                ("store", false, vec![Value::Json(spec_json.clone())]),
            ],
        );
        assert_eq!(
            match &block0 {
                Value::Json(j) => j["positions"].clone(),
                _ => Json::Null,
            },
            json!([0, 1, 3])
        );
        let block1 = run_task(
            &WriteZarr,
            json!({}),
            &[("chunk", DimValue::Int(1))],
            vec![("fields", true, vec![field(5, 15.0)]), ("store", false, vec![Value::Json(spec_json.clone())])],
        );
        let done = run_task(
            &ZarrFinalize,
            json!({}),
            &[],
            vec![("written", true, vec![block0, block1]), ("store", false, vec![Value::Json(spec_json.clone())])],
        );
        assert!(matches!(done, Value::Path(p) if p == store_path));

        let store = AtomicStore::open(&store_path).unwrap();
        let sst = meta::open_array(&store, "sst").unwrap();
        assert_eq!(sst.shape(), &[6, 2, 3]);
        let all = sst.subset_all();
        let values: Vec<f32> = sst.retrieve_array_subset(&all).unwrap();
        let per_day: Vec<f32> = values.chunks(6).map(|d| d[0]).collect();
        assert_eq!(&per_day[..2], &[10.0, 11.0]);
        assert!(per_day[2].is_nan() && per_day[4].is_nan());
        assert_eq!((per_day[3], per_day[5]), (13.0, 15.0));
        let time = meta::open_array(&store, "time").unwrap();
        let times: Vec<f32> = time.retrieve_array_subset(&time.subset_all()).unwrap();
        assert_eq!(times, vec![1339.0, 1340.0, 1341.0, 1342.0, 1343.0, 1344.0]);
        let consolidated = match format {
            3 => std::fs::read_to_string(store_path.join("zarr.json")).unwrap(),
            _ => std::fs::read_to_string(store_path.join(".zmetadata")).unwrap(),
        };
        assert!(consolidated.contains("days since 1978-01-01 12:00:00") && consolidated.contains("\"title\""));
        // No temporary file is left behind.
        let mut stack = vec![store_path.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                assert!(!p.to_string_lossy().ends_with(".tmp"), "{}", p.display());
                if p.is_dir() {
                    stack.push(p);
                }
            }
        }
    }
}

#[test]
fn a_field_outside_its_block_or_of_another_shape_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let spec = run_task(
        &ZarrCreate,
        json!({"store": dir.path().join("s.zarr"), "chunk": 2}),
        &[],
        vec![("first", false, vec![field(0, 0.0)])],
    );
    let Value::Json(spec) = spec else { panic!() };
    let spec = StoreSpec::from_json(&spec).unwrap();
    assert_eq!(spec, StoreSpec::from_json(&spec.to_json()).unwrap());
    let Value::Array(late) = field(7, 1.0) else { panic!() };
    let err = positions(&spec, 1, &[&late]).unwrap_err();
    assert!(
        err.contains("position 7 from the first field's 1339 in steps of 1, outside this chunk's positions 2..4"),
        "{err}"
    );
    let Value::Array(small) = array(&[1, 2], vec![0.0f32; 2]) else { panic!() };
    let err = positions(&spec, 0, &[&small]).unwrap_err();
    assert!(err.contains("field 0 is f32[1, 2], but the store holds f32[1, 2, 3] fields"), "{err}");
    // A non-Zarr directory is never removed.
    let other = dir.path().join("precious");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "keep").unwrap();
    assert!(clear_store(&other).unwrap_err().contains("holds no Zarr store; refusing to replace it"));
    assert!(other.join("notes.txt").exists());
    // An old store is moved aside, and deleted once the new one is finished.
    let store = dir.path().join("s.zarr");
    let aside = clear_store(&store).unwrap().expect("the store was moved");
    assert!(!store.exists() && aside.join("zarr.json").exists());
    remove_replaced(&store).unwrap();
    assert!(!aside.exists() && other.exists());
}

/// An input of the `zarr` fuzz target (written by hand with it): a data array whose metadata was
/// changed after `zarr_create` (to 0 dimensions) made `write_zarr` index past its shape and panic.
#[test]
fn a_data_array_whose_metadata_no_longer_fits_the_fields_is_an_error() {
    for format in [3, 2] {
        let dir = tempfile::tempdir().unwrap();
        let store_path = dir.path().join("s.zarr");
        let spec = run_task(
            &ZarrCreate,
            json!({"store": store_path, "chunk": 2, "concat_dim": "time", "zarr_format": format}),
            &[],
            vec![("first", false, vec![field(0, 0.0)])],
        );
        let spec = Arc::new(spec);
        let doc = store_path.join("sst").join(if format == 3 { "zarr.json" } else { ".zarray" });
        let mut meta: Json = runner_plugin::serde_json::from_slice(&std::fs::read(&doc).unwrap()).unwrap();
        for (shape, says) in [(json!([]), "is [] in its metadata"), (json!([0, 2, 4]), "is [0, 2, 4] in its metadata")]
        {
            meta["shape"] = shape.clone();
            let chunks = if shape == json!([]) { json!([]) } else { json!([2, 2, 4]) };
            match format {
                3 => meta["chunk_grid"]["configuration"]["chunk_shape"] = chunks,
                _ => meta["chunks"] = chunks,
            }
            if format == 3 {
                meta["dimension_names"] = json!(vec!["d"; shape.as_array().unwrap().len()]);
            }
            std::fs::write(&doc, runner_plugin::serde_json::to_vec(&meta).unwrap()).unwrap();
            let host = TestHost::new();
            let index = [("chunk", DimValue::Int(0))];
            let ctx = TaskContext::new("step", "", "cycle", &index, 0, &host);
            let (fields, store) = (vec![Arc::new(field(0, 1.0))], vec![spec.clone()]);
            let inputs = [Input::new("fields", true, &fields), Input::new("store", false, &store)];
            let err = WriteZarr.run(&ctx, &args(json!({})), &Inputs::new(&inputs)).unwrap_err().to_string();
            assert!(err.contains(says) && err.contains("but the store holds [1, 2, 3] fields along `time`"), "{err}");
            let written = vec![Arc::new(Value::Json(
                json!({"zarr_written": "sst", "block": 0, "positions": [0], "coords": [1339.0]}),
            ))];
            let inputs = [Input::new("written", true, &written), Input::new("store", false, &store)];
            let err = ZarrFinalize.run(&ctx, &args(json!({})), &Inputs::new(&inputs)).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }
}
