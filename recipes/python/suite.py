"""A NumPy-only stand-in for an IMPROVER suite, for `recipes/python_suite.yaml`: the same
shape of work (per lead: threshold an ensemble, smooth it over a square neighbourhood; then the
maximum over leads), written the way IMPROVER writes its plugins — classes instantiated with
their configuration and called on the data."""

import os

import numpy as np


def temperature(lead, members=12, size=300, seed=0):
    """An ensemble of air temperatures (K) for one lead time."""
    rng = np.random.default_rng([seed, lead])
    y, x = np.mgrid[0:size, 0:size] / size
    base = 270.0 + 8.0 * np.sin(3 * x + lead / 4) * np.cos(2 * y)
    noise = rng.normal(0.0, 1.5, size=(members, size, size))
    return (base + noise).astype(np.float32)


class Threshold:
    """Probability of exceeding each threshold: the fraction of members above it."""

    def __init__(self, threshold_values):
        self.thresholds = np.asarray(threshold_values, dtype=np.float32)

    def __call__(self, ensemble):
        above = ensemble[None, :, :, :] > self.thresholds[:, None, None, None]
        return above.mean(axis=1, dtype=np.float32)


class SquareNeighbourhood:
    """The mean over a square of (2r+1)² cells, r = radius / grid spacing, by summed areas."""

    def __init__(self, radius, grid_spacing=2000.0):
        self.cells = max(int(round(radius / grid_spacing)), 1)

    def __call__(self, field):
        r = self.cells
        padded = np.pad(field, [(0, 0), (r + 1, r), (r + 1, r)], mode="edge").astype(np.float64)
        sums = padded.cumsum(axis=1).cumsum(axis=2)
        n = 2 * r + 1
        window = sums[:, n:, n:] - sums[:, :-n, n:] - sums[:, n:, :-n] + sums[:, :-n, :-n]
        return (window / (n * n)).astype(np.float32)


def maximum(*fields):
    return np.maximum.reduce(fields)


def save(field, path):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    np.save(path, field)
