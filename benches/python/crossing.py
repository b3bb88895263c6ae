"""Callables for `crossing.sh`: an array of N MiB made, then passed to steps that return it
unchanged (one crossing into the interpreter, one back), read one element of it, or read one
element of every page of it (what mapping the engine's pages costs a reader that touches all)."""
import numpy as np


def make(mib):
    return np.ones(mib << 18, dtype=np.float32)


def same(a):
    return a


def first(a):
    return float(a[0])


def every_page(a):
    return float(a[::1024].sum())
