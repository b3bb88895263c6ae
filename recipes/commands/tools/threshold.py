"""threshold FIELD.npy OUT.npz T1,T2,... [FUZZY]

Probability of exceeding each threshold (mm/h) with a linear fuzzy band from t*FUZZY to
t*(2-FUZZY). Computed on the whole grid (so this tool's memory is the same whatever the
weather), written as the box of it that is not 0 (so its file follows the weather).
"""
import sys

import numpy as np

from common import bounding_box, save


def main(field_path, out_path, thresholds, fuzzy="0.5"):
    field = np.load(field_path)
    thresholds = [float(t) for t in thresholds.split(",")]
    fuzzy = float(fuzzy)
    if not 0 < fuzzy <= 1:
        sys.exit(f"threshold: FUZZY must be in (0, 1], got {fuzzy}")
    probabilities = np.empty((len(thresholds),) + field.shape, dtype=np.float32)
    for i, t in enumerate(thresholds):
        low, high = t * fuzzy, t * (2 - fuzzy)
        np.clip((field - low) / (high - low), 0.0, 1.0, out=probabilities[i])
    y0, y1, x0, x1 = bounding_box(probabilities.any(axis=0))
    save(out_path, probabilities[:, y0:y1, x0:x1], (y0, x0), field.shape)


if __name__ == "__main__":
    main(*sys.argv[1:])
