"""CF decoding as xarray does it, for tests/cf_decoding.rs.

`write DIR` writes DIR/cf.nc with netCDF4-python (raw values, attributes set by hand) and
prints the variable names; `check DIR` compares each DIR/out/<name>.npy that runner wrote with
xarray's decoding of the same variable (values bit for bit, NaN where xarray has NaN, dtype).
"""
import json
import sys

import netCDF4
import numpy as np
import xarray as xr

VARIABLES = {
    # name: (stored type, raw values, attributes)
    "unsigned_packed": ("i1", [-1, 0, 1, -100, 127, -128],
                        {"_FillValue": np.int8(-1), "_Unsigned": "true",
                         "scale_factor": np.float32(0.2), "add_offset": np.float32(-30.6)}),
    "unsigned_bytes": ("i1", [-1, 0, 1, -128, 5, 7], {"_Unsigned": "true"}),
    "unsigned_shorts_fill": ("i2", [-1, -2, 1, -32768, 0, 9], {"_FillValue": np.int16(-2), "_Unsigned": "true"}),
    "unsigned_ints": ("i4", [-1, 0, 1, 5, -7, 3], {"_Unsigned": "true"}),
    "signed_from_unsigned": ("u1", [255, 0, 1, 128, 3, 200], {"_Unsigned": "false"}),
    "unsigned_packed_f64": ("i2", [-1, 0, 1, -100, 300, -32768],
                            {"_Unsigned": "true", "scale_factor": 0.01, "add_offset": 1.5,
                             "missing_value": np.int16(-100)}),
    "valid_range_kept": ("i2", [-5, 0, 50, 100, 101, 3], {"valid_range": np.array([0, 100], dtype="i2")}),
    "valid_min_max_floats": ("f4", [0, 1, 2, 3, 4, 5], {"valid_min": np.float32(1), "valid_max": np.float32(4)}),
    "valid_min_packed": ("i2", [5, 10, 20, 30, 9, 11], {"valid_min": np.int16(10), "scale_factor": 0.5}),
}


def write(directory):
    with netCDF4.Dataset(f"{directory}/cf.nc", "w") as ds:
        ds.createDimension("x", 6)
        for name, (dtype, values, attrs) in VARIABLES.items():
            fill = attrs.get("_FillValue")
            var = ds.createVariable(name, dtype, ("x",), fill_value=fill)
            var.set_auto_maskandscale(False)
            for key, value in attrs.items():
                if key != "_FillValue":
                    var.setncattr(key, value)
            var[:] = np.array(values, dtype=dtype)
    print(json.dumps(list(VARIABLES)))


def check(directory):
    ds = xr.open_dataset(f"{directory}/cf.nc")
    problems = []
    for name in VARIABLES:
        expected = ds[name].values
        got = np.load(f"{directory}/out/{name}.npy")
        # runner keeps ints of up to 16 bits as i32 and wider ones as f64 (as its reader always
        # has): the values must still be xarray's, exactly.
        if expected.dtype.kind == "f":
            same = got.dtype == expected.dtype and np.array_equal(got, expected, equal_nan=True)
        else:
            same = got.dtype.kind in "iuf" and np.array_equal(got.astype("f8"), expected.astype("f8"))
        if not same:
            problems.append(f"{name}: {got.dtype} {got.tolist()} where xarray reads {expected.dtype} {expected.tolist()}")
    if problems:
        sys.exit("\n".join(problems))
    print("ok")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
