"""Synthetic IMPROVER input cubes for the IMPROVER-shaped suite (bench only, needs IMPROVER):
air temperature, 12 realizations, one netCDF file per lead, on an equal-area grid.

    python make_inputs.py DIR [--size 300] [--leads 8] [--cycle 20261201T0000Z]

writes DIR/<validity>-PT<lead>H00M-air_temperature.nc as IMPROVER names files.
"""

import argparse
import os
from datetime import datetime, timedelta

import numpy as np
from improver.synthetic_data.set_up_test_cubes import set_up_variable_cube
from improver.utilities.save import save_netcdf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--leads", type=int, default=8)
    parser.add_argument("--cycle", default="20261201T0000Z")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    frt = datetime.strptime(args.cycle, "%Y%m%dT%H%MZ")
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0 : args.size, 0 : args.size] / args.size
    for lead in range(1, args.leads + 1):
        base = 270.0 + 8.0 * np.sin(3 * x + lead / 4) * np.cos(2 * y)
        data = (base + rng.normal(0.0, 1.5, size=(12, args.size, args.size))).astype(np.float32)
        time = frt + timedelta(hours=lead)
        cube = set_up_variable_cube(
            data, spatial_grid="equalarea", x_grid_spacing=2000, y_grid_spacing=2000,
            time=time, frt=frt, name="air_temperature", units="K",
        )
        name = f"{time:%Y%m%dT%H%MZ}-PT{lead:04d}H00M-air_temperature.nc"
        save_netcdf(cube, os.path.join(args.dir, name))


if __name__ == "__main__":
    main()
