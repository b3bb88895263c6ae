"""Interop checks of runner's netCDF and Zarr plugins against the Python stack (tests/oisst.rs).

  write_inputs DIR N NY NX         N OISST-like daily files written by netCDF4-python
  compare STORE INPUT_DIR VAR      the store, opened with xarray.open_zarr, against
                                   xarray.open_mfdataset of the input files: values, coords, attrs
  chunks STORE ARRAY               every chunk file of ARRAY decodes whole (no torn chunk)

Exits non-zero with a message saying what differs.
"""

import glob
import gzip
import json
import os
import sys

import numpy as np
import netCDF4
import xarray as xr
import zarr  # noqa: F401  (xarray's Zarr backend)


def write_inputs(directory, n, ny, nx):
    """Files as NOAA writes them, plus odd attributes: a float attribute list, an int64, a text
    attribute on a coordinate, missing_value beside _FillValue."""
    os.makedirs(directory, exist_ok=True)
    lat = (-90 + (np.arange(ny) + 0.5) * 180 / ny).astype("f4")
    lon = ((np.arange(nx) + 0.5) * 360 / nx).astype("f4")
    rng = np.random.default_rng(7)
    for day in range(n):
        path = os.path.join(directory, "oisst-avhrr-v02r01.%05d.nc" % day)
        with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
            ds.title = "netCDF4-python OISST-like file"
            ds.Conventions = "CF-1.6"
            ds.history_numbers = np.array([1.5, 2.5], "f8")
            for name, size in [("time", 1), ("zlev", 1), ("lat", ny), ("lon", nx)]:
                ds.createDimension(name, size)
            t = ds.createVariable("time", "f4", ("time",))
            t.units = "days since 1978-01-01 12:00:00"
            t.long_name = "Center time of the day"
            t[:] = [1339 + day]
            z = ds.createVariable("zlev", "f4", ("zlev",))
            z.units = "meters"
            z[:] = [0.0]
            la = ds.createVariable("lat", "f4", ("lat",))
            la.units = "degrees_north"
            la.grids = "Uniform grid"
            la[:] = lat
            lo = ds.createVariable("lon", "f4", ("lon",))
            lo.units = "degrees_east"
            lo[:] = lon
            for var, (scale, lo_v, hi_v) in {"sst": (0.01, -300, 4500), "anom": (0.01, -1200, 1200),
                                             "err": (0.01, 0, 1000), "ice": (0.01, 0, 100)}.items():
                v = ds.createVariable(var, "i2", ("time", "zlev", "lat", "lon"), zlib=True, complevel=1,
                                      fill_value=np.int16(-999), chunksizes=(1, 1, ny, nx))
                v.set_auto_maskandscale(False)
                v.long_name = "variable " + var
                v.units = "Celsius"
                v.scale_factor = np.float32(scale)
                v.add_offset = np.float32(0.0)
                v.valid_min = np.int16(lo_v)
                v.valid_max = np.int16(hi_v)
                v.missing_value = np.int16(-998)
                v.big_number = np.int64(2**40)
                raw = rng.integers(lo_v, hi_v, size=(1, 1, ny, nx)).astype("i2")
                raw[..., : ny // 4, : nx // 3] = -999  # "land"
                raw[..., -1, -1] = -998  # a missing_value
                v[:] = raw


def fail(message):
    print("oisst_check: " + message, file=sys.stderr)
    sys.exit(1)


def same_values(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def compare(store, input_dir, var):
    files = sorted(glob.glob(os.path.join(input_dir, "**", "*.nc"), recursive=True))
    if not files:
        fail("no input files in " + input_dir)
    expected = xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal",
                                 coords="minimal", compat="override")
    built = xr.open_zarr(store, consolidated=True)
    if var not in built:
        fail("the store has no variable %s: %s" % (var, list(built.variables)))
    got, want = built[var], expected[var]
    if got.dims != want.dims:
        fail("dims %s, expected %s" % (got.dims, want.dims))
    if got.dtype != want.dtype:
        fail("dtype %s, expected %s" % (got.dtype, want.dtype))
    if not same_values(got.values, want.values):
        diff = np.argwhere(~((got.values == want.values) | (np.isnan(got.values) & np.isnan(want.values))))
        fail("values differ at %d places, first at %s" % (len(diff), diff[:3].tolist()))
    for coord in want.coords:
        if not np.array_equal(built[coord].values, expected[coord].values):
            fail("coordinate %s differs: %s vs %s" % (coord, built[coord].values[:5], expected[coord].values[:5]))
        for key, value in expected[coord].attrs.items():
            if built[coord].attrs.get(key) != value:
                fail("attribute %s of %s: %r, expected %r" % (key, coord, built[coord].attrs.get(key), value))
    for key, value in want.attrs.items():
        have = got.attrs.get(key)
        if not np.array_equal(np.asarray(have), np.asarray(value)):
            fail("attribute %s of %s: %r, expected %r" % (key, var, have, value))
    for key, value in expected.attrs.items():
        if not np.array_equal(np.asarray(built.attrs.get(key)), np.asarray(value)):
            fail("global attribute %s: %r, expected %r" % (key, built.attrs.get(key), value))
    print(json.dumps({"shape": list(got.shape), "chunks": [c[0] for c in got.chunks],
                      "time0": str(built.time.values[0])}))


def chunks(store, array):
    meta_v3 = os.path.join(store, array, "zarr.json")
    meta = json.load(open(meta_v3)) if os.path.exists(meta_v3) else json.load(open(os.path.join(store, array, ".zarray")))
    chunk_shape = meta["chunk_grid"]["configuration"]["chunk_shape"] if "chunk_grid" in meta else meta["chunks"]
    itemsize = {"float32": 4, "<f4": 4, "float64": 8, "<f8": 8}[meta.get("data_type", meta.get("dtype"))]
    expected = int(np.prod(chunk_shape)) * itemsize
    count = 0
    for root, _, names in os.walk(os.path.join(store, array)):
        for name in names:
            if name in ("zarr.json", ".zarray", ".zattrs") or name.endswith(".tmp"):
                continue
            data = open(os.path.join(root, name), "rb").read()
            try:
                raw = gzip.decompress(data) if "chunk_grid" in meta else __import__("zlib").decompress(data)
            except Exception as e:  # a torn chunk fails its checksum or ends early
                fail("chunk %s does not decode: %s" % (os.path.join(root, name), e))
            if len(raw) != expected:
                fail("chunk %s holds %d bytes, expected %d" % (name, len(raw), expected))
            count += 1
    print(count)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "write_inputs":
        write_inputs(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif command == "compare":
        compare(*args)
    elif command == "chunks":
        chunks(*args)
    else:
        fail("unknown command " + command)
