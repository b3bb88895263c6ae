"""Shared by the tools: cropped fields in .npz files.

A field is kept as the smallest box holding everything that is not background (0), like
IMPROVER trims neighbourhood work to the wet area: `data` [n, h, w] float32, `offset` (y0, x0)
of the box in the grid, `shape` (ny, nx) of the grid. Dry weather makes small files and small
processes; a front makes large ones.
"""
import zipfile

import numpy as np


def save(path, data, offset, shape):
    """Writes an .npz (as np.savez does: a zip of .npy files, stored uncompressed) one slice of
    `data` at a time, so that writing holds at most one slice more than `data` itself (np.savez
    would copy up to 16 MiB chunks of a box cut out of a larger array)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, small in (("offset", offset), ("shape", shape)):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(small, dtype=np.int64))
        with archive.open("data.npy", "w", force_zip64=True) as f:
            header = {"descr": "<f4", "fortran_order": False, "shape": tuple(int(n) for n in data.shape)}
            np.lib.format.write_array_header_1_0(f, header)
            for plane in data:
                f.write(np.ascontiguousarray(plane, dtype="<f4").data)


def load(path):
    with np.load(path) as f:
        return f["data"], tuple(int(v) for v in f["offset"]), tuple(int(v) for v in f["shape"])


def bounding_box(mask):
    """(y0, y1, x0, x1) of the True cells of a 2-d mask; an empty box for none."""
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return 0, 0, 0, 0
    cols = np.flatnonzero(mask.any(axis=0))
    return int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
