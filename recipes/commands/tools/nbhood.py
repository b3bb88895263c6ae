"""nbhood IN.npz OUT.npz RADIUS

Neighbourhood mean over a square of (2*RADIUS+1)^2 cells, from float64 summed-area tables of
the wet box padded by the radius (cells outside the box are 0, outside the grid too). Memory
follows the box: the padded slices, their tables and the output.
"""
import sys

import numpy as np

from common import load, save


def main(in_path, out_path, radius):
    r = int(radius)
    data, (y0, x0), (ny, nx) = load(in_path)
    n, h, w = data.shape
    if h == 0 or w == 0:
        save(out_path, data, (0, 0), (ny, nx))
        return
    # The output covers the box grown by the radius, within the grid.
    oy0, ox0 = max(y0 - r, 0), max(x0 - r, 0)
    oy1, ox1 = min(y0 + h + r, ny), min(x0 + w + r, nx)
    oh, ow = oy1 - oy0, ox1 - ox0
    # Padded by r around the output, plus a leading zero row and column for the table.
    padded = np.zeros((n, oh + 2 * r + 1, ow + 2 * r + 1), dtype=np.float64)
    py, px = y0 - oy0 + r + 1, x0 - ox0 + r + 1
    padded[:, py:py + h, px:px + w] = data
    table = padded.cumsum(axis=1).cumsum(axis=2)
    k = 2 * r + 1
    sums = table[:, k:, k:] - table[:, :-k, k:] - table[:, k:, :-k] + table[:, :-k, :-k]
    save(out_path, sums / (k * k), (oy0, ox0), (ny, nx))


if __name__ == "__main__":
    main(*sys.argv[1:])
