"""write IN.npz OUT.npy

The full-grid probabilities [n, ny, nx] float32 as a .npy file (0 outside the box).
"""
import os
import sys

import numpy as np

from common import load


def main(in_path, out_path):
    data, (y0, x0), (ny, nx) = load(in_path)
    full = np.zeros((data.shape[0], ny, nx), dtype=np.float32)
    full[:, y0:y0 + data.shape[1], x0:x0 + data.shape[2]] = data
    # Written under a temporary name and renamed, so a killed task leaves no half file.
    temp = out_path + ".tmp.npy"
    np.save(temp, full)
    os.replace(temp, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
