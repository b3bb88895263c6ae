//! The standard plugins of `runner`, written against the public plugin API only.
//!
//! | plugin | module |
//! |---|---|
//! | `noop` | [`noop`] |
//! | `alloc` | [`alloc`] |
//! | `synth` | [`synth`] |
//! | `synth_sst` | [`synth_sst`] |
//! | `threshold` | [`threshold`] |
//! | `nbhood` | [`nbhood`] |
//! | `mean` | [`mean`] |
//! | `read_npy`, `write_npy` | [`npy`] |
//! | `exec` | [`exec`] |
//! | `python` | [`python`] |
//! | `read_netcdf`, `write_netcdf` | [`netcdf`] |
//! | `zarr_create`, `write_zarr`, `zarr_finalize` | [`zarr`] |

use std::sync::Arc;

use runner_plugin::Plugin;

pub mod alloc;
pub mod exec;
pub mod mean;
pub mod nbhood;
pub mod netcdf;
pub mod noop;
pub mod npy;
pub mod python;
mod python_object;
mod support;
pub mod synth;
pub mod synth_sst;
#[cfg(test)]
mod testing;
pub mod threshold;
pub mod zarr;

pub use support::fnv1a64;

/// Every standard plugin, for registration with the engine.
pub fn all() -> Vec<Arc<dyn Plugin>> {
    vec![
        Arc::new(noop::Noop),
        Arc::new(alloc::Alloc),
        Arc::new(synth::Synth),
        Arc::new(synth_sst::SynthSst),
        Arc::new(threshold::Threshold),
        Arc::new(nbhood::Nbhood),
        Arc::new(mean::Mean),
        Arc::new(npy::ReadNpy),
        Arc::new(npy::WriteNpy),
        Arc::new(exec::Exec),
        Arc::new(python::Python),
        Arc::new(netcdf::ReadNetcdf),
        Arc::new(netcdf::WriteNetcdf),
        Arc::new(zarr::ZarrCreate),
        Arc::new(zarr::WriteZarr),
        Arc::new(zarr::ZarrFinalize),
    ]
}
