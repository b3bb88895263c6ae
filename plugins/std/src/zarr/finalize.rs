//! `zarr_finalize`: the final length along `concat_dim`, its coordinate array, consolidated
//! metadata, a synced file system; the store an earlier build left deleted.

use std::path::Path;

use runner_plugin::serde_json::{Map, Value as Json};
use runner_plugin::{
    ArgError, ArgSpec, Args, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value, ValueMeta,
};

use super::{REPLACED, WRITTEN_KEY, find_spec, meta, write_1d};
use crate::netcdf::attrs;

/// Sets the final length, writes the concat coordinate and consolidates the metadata.
pub struct ZarrFinalize;

impl Plugin for ZarrFinalize {
    fn name(&self) -> &'static str {
        "zarr_finalize"
    }

    fn about(&self) -> &'static str {
        "finishes a store after its write_zarr tasks: the length along the concat dim, that dim's coordinate, consolidated metadata, a file-system sync; returns the store's path"
    }

    fn args(&self) -> &'static [ArgSpec] {
        &[]
    }

    fn output(&self, _args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        Ok(ValueMeta::Path)
    }

    fn estimate(&self, _args: &Args, _inputs: InputsForEstimate<'_>, _output: &ValueMeta) -> u64 {
        16 << 20
    }

    fn run(&self, ctx: &TaskContext, _args: &Args, inputs: &Inputs) -> Result<Value, TaskError> {
        let spec = find_spec("zarr_finalize", inputs)?;
        let fail = |e: String| TaskError::msg(format!("finalizing the Zarr store {}: {e}", spec.store.display()));
        let mut written: std::collections::BTreeMap<u64, Option<f64>> = std::collections::BTreeMap::new();
        for report in inputs.iter().flat_map(|i| i.values()).filter_map(|v| match v {
            Value::Json(doc) if doc.get(WRITTEN_KEY).is_some() => Some(doc),
            _ => None,
        }) {
            let positions = report.get("positions").and_then(Json::as_array).cloned().unwrap_or_default();
            let coords = report.get("coords").and_then(Json::as_array).cloned().unwrap_or_default();
            for (i, p) in positions.iter().enumerate() {
                let p = p.as_u64().ok_or_else(|| fail(format!("a write_zarr report has position {p}")))?;
                written.insert(p, coords.get(i).and_then(|c| if c.is_null() { None } else { attrs::as_float(c) }));
            }
        }
        let len = written.keys().next_back().map_or(0, |&p| p + 1);
        let gaps: Vec<u64> = (0..len).filter(|p| !written.contains_key(p)).collect();
        if !gaps.is_empty() {
            ctx.log(&format!(
                "{} of {len} positions of `{}` were not written (fill values): {gaps:?}",
                gaps.len(),
                spec.concat_dim
            ));
        }
        let store = spec.open().map_err(fail)?;
        let (t0, dtype, attrs) = match &spec.concat_coord {
            Some(c) => (Some(c.t0), c.dtype.as_str(), c.attrs.clone()),
            None => (None, "i64", Map::new()),
        };
        let values: Vec<f64> = (0..len)
            .map(|p| match written.get(&p) {
                Some(Some(t)) => *t,
                _ => t0.map_or(p as f64, |t0| t0 + p as f64 * spec.coord_step),
            })
            .collect();
        write_1d(&store, spec.format, &spec.concat_dim, dtype, &values, attrs, spec.level).map_err(fail)?;
        let mut array = spec.open_array(&store).map_err(fail)?;
        array.set_shape(spec.shape(len)).map_err(|e| fail(e.to_string()))?;
        meta::store_array_metadata(&array).map_err(fail)?;
        let mut names: Vec<&str> = spec.coord_names.iter().map(String::as_str).collect();
        names.push(&spec.array);
        sync(&spec.store).map_err(fail)?;
        meta::consolidate(&store, spec.format, &names).map_err(fail)?;
        sync(&spec.store).map_err(fail)?;
        remove_replaced(&spec.store).map_err(fail)?;
        Ok(Value::Path(spec.store.clone()))
    }
}

/// Deletes old stores that `zarr_create` moved aside for `store` (this build's, and any a
/// killed build left).
pub(super) fn remove_replaced(store: &Path) -> Result<(), String> {
    let Some(dir) = store.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p }) else {
        return Ok(());
    };
    let name = store.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let prefix = format!(".{name}.{REPLACED}-");
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(entry.path())
                .map_err(|e| format!("cannot remove the old store {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Flushes the file system holding `dir` to disk (`syncfs`): one call for every chunk the run
/// wrote, instead of a sync per file while writing.
fn sync(dir: &Path) -> Result<(), String> {
    let handle = std::fs::File::open(dir).map_err(|e| format!("opening {}: {e}", dir.display()))?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: `syncfs` only reads the descriptor, which `handle` keeps open for the call.
        if unsafe { libc::syncfs(handle.as_raw_fd()) } != 0 {
            return Err(format!("syncing {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
    }
    #[cfg(not(target_os = "linux"))]
    handle.sync_all().map_err(|e| format!("syncing {}: {e}", dir.display()))?;
    Ok(())
}
