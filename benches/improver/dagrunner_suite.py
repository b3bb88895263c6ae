"""The IMPROVER-shaped suite as a dagrunner graph of in-process plugin calls, the way IMPROVER's
developers run it, for comparison with `recipes/improver/suite.yaml` (bench only; needs IMPROVER,
networkx and dagrunner in the interpreter).

    python dagrunner_suite.py IN_DIR OUT_FILE [--scheduler multiprocessing|threads] [--workers 2]
"""

import argparse
import glob
import os

import networkx as nx
from dagrunner.execute_graph import ExecuteGraph
from improver.cube_combiner import Combine
from improver.nbhood.nbhood import MetaNeighbourhood
from improver.threshold import Threshold
from improver.utilities.load import load_cube
from improver.utilities.save import save_netcdf

THRESHOLDS = [268.0, 270.0, 272.0, 274.0, 276.0]


def graph(in_dir, out_file):
    g = nx.DiGraph()
    combine = ("combine",)
    g.add_node(combine, call=(Combine, {"operation": "max", "broadcast": None}, {}))
    save = ("save",)
    g.add_node(save, call=(save_netcdf, {"filename": out_file}))
    g.add_edge(combine, save)
    for path in sorted(glob.glob(os.path.join(in_dir, "*.nc"))):
        load, threshold, nbhood = ("load", path), ("threshold", path), ("nbhood", path)
        g.add_node(load, call=(load_cube, {"filepath": path}))
        g.add_node(threshold, call=(Threshold, {"threshold_values": THRESHOLDS, "collapse_coord": ["realization"]}, {}))
        g.add_node(nbhood, call=(MetaNeighbourhood, {
            "neighbourhood_output": "probabilities", "neighbourhood_shape": "square", "radii": [10000.0]}, {}))
        g.add_edges_from([(load, threshold), (threshold, nbhood), (nbhood, combine)])
    return g


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("in_dir")
    parser.add_argument("out_file")
    parser.add_argument("--scheduler", default="multiprocessing")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    os.makedirs(os.path.dirname(args.out_file) or ".", exist_ok=True)
    ExecuteGraph(graph(args.in_dir, args.out_file), scheduler=args.scheduler, num_workers=args.workers)()


if __name__ == "__main__":
    main()
