//! Zarr metadata documents (v3 `zarr.json`, v2 `.zarray`/`.zattrs`/`.zgroup`) for the arrays the
//! plugins write, and the consolidated metadata `zarr_finalize` writes: inline in the root
//! `zarr.json` for v3, `.zmetadata` for v2 (as zarr-python and xarray read them). Keys are written
//! in a fixed order, so two builds of the same store are byte-identical.

use std::sync::Arc;

use runner_plugin::DType;
use runner_plugin::serde_json::{Map, Value as Json, json};
use zarrs::array::{Array, ArrayMetadata, ArrayMetadataOptions};

use super::store::AtomicStore;

/// The Zarr format of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    V2,
    V3,
}

impl Format {
    pub fn number(self) -> u64 {
        match self {
            Format::V2 => 2,
            Format::V3 => 3,
        }
    }

    pub fn from_number(n: u64) -> Option<Format> {
        match n {
            2 => Some(Format::V2),
            3 => Some(Format::V3),
            _ => None,
        }
    }
}

/// An element type of a store array: the data's dtype, or a coordinate's (which may be any
/// numeric netCDF type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl ZType {
    pub fn of_name(name: &str) -> Option<ZType> {
        Some(match name {
            "i8" => ZType::I8,
            "u8" => ZType::U8,
            "i16" => ZType::I16,
            "u16" => ZType::U16,
            "i32" => ZType::I32,
            "u32" => ZType::U32,
            "i64" => ZType::I64,
            "u64" => ZType::U64,
            "f32" => ZType::F32,
            "f64" => ZType::F64,
            _ => return None,
        })
    }

    /// The store's type for arrays of `dtype` (bools are stored as 0/1 bytes).
    pub fn of_dtype(dtype: DType) -> ZType {
        match dtype {
            DType::F32 => ZType::F32,
            DType::F64 => ZType::F64,
            DType::I8 => ZType::I8,
            DType::I16 => ZType::I16,
            DType::I32 => ZType::I32,
            DType::I64 => ZType::I64,
            DType::U8 | DType::Bool => ZType::U8,
            DType::U16 => ZType::U16,
            DType::U32 => ZType::U32,
            DType::U64 => ZType::U64,
        }
    }

    fn v3_name(self) -> &'static str {
        match self {
            ZType::I8 => "int8",
            ZType::U8 => "uint8",
            ZType::I16 => "int16",
            ZType::U16 => "uint16",
            ZType::I32 => "int32",
            ZType::U32 => "uint32",
            ZType::I64 => "int64",
            ZType::U64 => "uint64",
            ZType::F32 => "float32",
            ZType::F64 => "float64",
        }
    }

    fn v2_name(self) -> &'static str {
        match self {
            ZType::I8 => "|i1",
            ZType::U8 => "|u1",
            ZType::I16 => "<i2",
            ZType::U16 => "<u2",
            ZType::I32 => "<i4",
            ZType::U32 => "<u4",
            ZType::I64 => "<i8",
            ZType::U64 => "<u8",
            ZType::F32 => "<f4",
            ZType::F64 => "<f8",
        }
    }

    fn is_float(self) -> bool {
        matches!(self, ZType::F32 | ZType::F64)
    }
}

/// What one array of the store is.
#[derive(Debug, Clone)]
pub struct ArraySpec<'a> {
    pub name: &'a str,
    pub ztype: ZType,
    pub shape: Vec<u64>,
    pub chunks: Vec<u64>,
    pub dims: Vec<String>,
    pub attrs: Map<String, Json>,
    /// gzip (v3) or zlib (v2) level; 0 for none.
    pub level: u32,
}

/// The array's metadata document, as zarrs reads it.
fn metadata(spec: &ArraySpec<'_>, format: Format) -> Result<ArrayMetadata, String> {
    // Floats have NaN where there is no data; ints have no such value.
    let fill = if spec.ztype.is_float() { json!("NaN") } else { json!(0) };
    let parse = |doc: Json| -> Result<ArrayMetadata, String> {
        let metadata = match format {
            Format::V3 => ArrayMetadata::V3(runner_plugin::serde_json::from_value(doc).map_err(|e| e.to_string())?),
            Format::V2 => ArrayMetadata::V2(runner_plugin::serde_json::from_value(doc).map_err(|e| e.to_string())?),
        };
        Ok(metadata)
    };
    match format {
        Format::V3 => {
            let mut codecs = vec![json!({"name": "bytes", "configuration": {"endian": "little"}})];
            if spec.level > 0 {
                codecs.push(json!({"name": "gzip", "configuration": {"level": spec.level}}));
            }
            parse(json!({
                "zarr_format": 3,
                "node_type": "array",
                "shape": spec.shape,
                "data_type": spec.ztype.v3_name(),
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": spec.chunks}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": fill,
                "codecs": codecs,
                "attributes": spec.attrs,
                "dimension_names": spec.dims,
            }))
        }
        Format::V2 => {
            let compressor = if spec.level > 0 { json!({"id": "zlib", "level": spec.level}) } else { Json::Null };
            let mut attrs = spec.attrs.clone();
            // xarray's convention for dim names in Zarr v2.
            attrs.insert("_ARRAY_DIMENSIONS".into(), json!(spec.dims));
            parse(json!({
                "zarr_format": 2,
                // zarrs' document type is tagged by this field; it is not written to `.zarray`.
                "node_type": "array",
                "shape": spec.shape,
                "chunks": spec.chunks,
                "dtype": spec.ztype.v2_name(),
                "compressor": compressor,
                "fill_value": fill,
                "order": "C",
                "filters": null,
                "dimension_separator": ".",
                "attributes": attrs,
            }))
        }
    }
}

/// Metadata options of every document the plugins write: no `_zarrs` provenance attribute, so
/// stores stay clean, and the format kept as given.
fn options() -> ArrayMetadataOptions {
    let mut options = ArrayMetadataOptions::default();
    options.set_include_zarrs_metadata(false);
    options
}

/// The zarrs array for `spec` in `store` (nothing is written).
pub fn array(store: &Arc<AtomicStore>, spec: &ArraySpec<'_>, format: Format) -> Result<Array<AtomicStore>, String> {
    let metadata = metadata(spec, format)?;
    Array::new_with_metadata(store.clone(), &format!("/{}", spec.name), metadata)
        .map_err(|e| format!("array `{}`: {e}", spec.name))
}

/// Writes the array's metadata document(s).
pub fn store_array_metadata(array: &Array<AtomicStore>) -> Result<(), String> {
    array.store_metadata_opt(&options()).map_err(|e| format!("array {}: {e}", array.path()))
}

/// Opens the array `name` of the store, as its metadata says.
pub fn open_array(store: &Arc<AtomicStore>, name: &str) -> Result<Array<AtomicStore>, String> {
    Array::open(store.clone(), &format!("/{name}")).map_err(|e| format!("cannot open array `{name}`: {e}"))
}

/// Writes the root group with the store's attributes (for v2: `.zgroup` and `.zattrs`).
pub fn store_root(store: &AtomicStore, format: Format, attrs: &Map<String, Json>) -> Result<(), String> {
    match format {
        Format::V3 => store.put("zarr.json", &pretty(&root_v3(attrs, None))),
        Format::V2 => {
            store.put(".zgroup", &pretty(&json!({"zarr_format": 2})))?;
            store.put(".zattrs", &pretty(&Json::Object(attrs.clone())))
        }
    }
}

fn root_v3(attrs: &Map<String, Json>, consolidated: Option<Map<String, Json>>) -> Json {
    let mut root = json!({"zarr_format": 3, "node_type": "group", "attributes": attrs});
    if let Some(children) = consolidated {
        root["consolidated_metadata"] = json!({"kind": "inline", "must_understand": false, "metadata": children});
    }
    root
}

fn pretty(doc: &Json) -> Vec<u8> {
    runner_plugin::serde_json::to_vec_pretty(doc).expect("JSON values always serialise")
}

/// Reads a JSON document of the store.
fn read_json(store: &AtomicStore, key: &str) -> Result<Json, String> {
    let path = store.path_of(key);
    let text = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    runner_plugin::serde_json::from_slice(&text).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// Consolidates the metadata of the root group and the arrays `names` (sorted, so the document
/// is the same whatever order they were written in): v3 inline in the root `zarr.json`, v2 in
/// `.zmetadata`. Written last, atomically: a reader sees the finished store or none.
pub fn consolidate(store: &AtomicStore, format: Format, names: &[&str]) -> Result<(), String> {
    let mut names = names.to_vec();
    names.sort_unstable();
    match format {
        Format::V3 => {
            let root = read_json(store, "zarr.json")?;
            let attrs = root.get("attributes").and_then(Json::as_object).cloned().unwrap_or_default();
            let mut children = Map::new();
            for name in names {
                children.insert(name.to_string(), read_json(store, &format!("{name}/zarr.json"))?);
            }
            store.put("zarr.json", &pretty(&root_v3(&attrs, Some(children))))
        }
        Format::V2 => {
            let mut metadata = Map::new();
            metadata.insert(".zattrs".into(), read_json(store, ".zattrs")?);
            metadata.insert(".zgroup".into(), read_json(store, ".zgroup")?);
            for name in names {
                for doc in [".zarray", ".zattrs"] {
                    let key = format!("{name}/{doc}");
                    if store.path_of(&key).exists() {
                        metadata.insert(key.clone(), read_json(store, &key)?);
                    }
                }
            }
            store.put(".zmetadata", &pretty(&json!({"metadata": metadata, "zarr_consolidated_format": 1})))
        }
    }
}
