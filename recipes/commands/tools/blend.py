"""blend OUT.npz MEMBER1.npz MEMBER2.npz ...

Mean over ensemble members, on the union of their boxes (a member is 0 outside its own box).
"""
import sys

import numpy as np

from common import load, save


def main(out_path, *member_paths):
    if not member_paths:
        sys.exit("blend: no member files given")
    members = [load(p) for p in member_paths]
    shapes = {m[2] for m in members}
    if len(shapes) != 1:
        sys.exit(f"blend: members are on different grids: {sorted(shapes)}")
    boxes = [(off[0], off[0] + d.shape[1], off[1], off[1] + d.shape[2]) for d, off, _ in members if d.size]
    n = members[0][0].shape[0]
    if not boxes:
        save(out_path, np.zeros((n, 0, 0), np.float32), (0, 0), members[0][2])
        return
    y0, y1 = min(b[0] for b in boxes), max(b[1] for b in boxes)
    x0, x1 = min(b[2] for b in boxes), max(b[3] for b in boxes)
    total = np.zeros((n, y1 - y0, x1 - x0), dtype=np.float32)
    for data, (my, mx), _ in members:
        if data.size:
            total[:, my - y0:my - y0 + data.shape[1], mx - x0:mx - x0 + data.shape[2]] += data
    total /= len(members)
    save(out_path, total, (y0, x0), members[0][2])


if __name__ == "__main__":
    main(*sys.argv[1:])
