"""What a pangeo user runs today for the OISST build: xarray.open_mfdataset over the daily files,
rechunked to 5 days, written with to_zarr by Dask's threaded scheduler.

    python3 benches/oisst_xarray.py INPUT_DIR STORE [WORKERS]

Same inputs and chunking as recipes/oisst.yaml (benches/oisst.sh times both). xarray keeps the
files' encoding, so it stores `sst` packed as int16 (runner stores the decoded float32).
The files are opened one after another (`parallel=False`): netCDF4-python is not thread-safe,
and `parallel=True` on Dask's threads fails with "NetCDF: Can't open HDF5 attribute" or a
segmentation fault.
"""

import glob
import os
import sys

import dask
import xarray as xr


def main():
    input_dir, store = sys.argv[1], sys.argv[2]
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    files = sorted(glob.glob(os.path.join(input_dir, "**", "*.nc"), recursive=True))
    if not files:
        sys.exit("no .nc files under " + input_dir)
    with dask.config.set(scheduler="threads", num_workers=workers):
        ds = xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal",
                               coords="minimal", compat="override", parallel=False)[["sst"]]
        ds = ds.chunk({"time": 5})
        for var in ds.variables.values():
            var.encoding.pop("chunks", None)
            var.encoding.pop("preferred_chunks", None)
        ds.to_zarr(store, mode="w", consolidated=True)
    print("%d files -> %s" % (len(files), store))


if __name__ == "__main__":
    main()
