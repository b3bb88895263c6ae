#!/usr/bin/env bash
# What a value costs to cross between the engine and a warm interpreter, per MiB, from the
# tasks' recorded wall times at N = 1 and 512 MiB of float32 (the difference over the difference
# in bytes): into an interpreter (the engine's pages mapped; a step reads one element, another
# one element of every page) and back (a step returns what it was given: into it and back
# again, through the pipe into the engine's shared memory). And what a task costs that crosses
# nothing: 400 calls of `abs` on one worker, end to end. Needs python3 with NumPy and a built
# runner (default target/release/runner).
#
#   benches/python/crossing.sh [RUNNER]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
runner=${1:-$repo/target/release/runner}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/r.yaml" <<YAML
recipe: crossing
dims: {mib: [1, 512], round: 5}
steps:
  made:
    plugin: python
    over: [mib, round]
    memory: 1200MiB
    args: {call: "crossing:make", args: ["{mib}"], pythonpath: ["$repo/benches/python"]}
  same:
    plugin: python
    over: [mib, round]
    memory: 2200MiB
    inputs: {a: made}
    args: {call: "crossing:same", pythonpath: ["$repo/benches/python"]}
  first:
    plugin: python
    over: [mib, round]
    inputs: {a: made}
    args: {call: "crossing:first", pythonpath: ["$repo/benches/python"]}
  every_page:
    plugin: python
    over: [mib, round]
    inputs: {a: made}
    args: {call: "crossing:every_page", pythonpath: ["$repo/benches/python"]}
YAML
cat >"$work/calls.yaml" <<YAML
recipe: calls
dims: {n: 400}
steps:
  call: {plugin: python, over: [n], args: {call: "builtins:abs", args: ["{n}"]}}
YAML
(cd "$work" && "$runner" run r.yaml --workers 1 --budget 8GiB >/dev/null)
(cd "$work" && "$runner" run calls.yaml --workers 1 --budget 8GiB >/dev/null)
python3 - "$work/runner.db" <<'PY'
import sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1])
def per_mib(step):
    walls = {}
    for key, wall in db.execute("SELECT key, wall_ms FROM tasks WHERE step = ?", (step,)):
        mib = int(dict(kv.split("=") for kv in key.split(","))["mib"])
        walls.setdefault(mib, []).append(wall)
    small, large = statistics.median(walls[1]), statistics.median(walls[512])
    print(f"{step}: 1 MiB {small:.1f} ms, 512 MiB {large:.1f} ms (medians of 5)")
    return (large - small) / 511
into, touched, both = per_mib("first"), per_mib("every_page"), per_mib("same")
print(f"into an interpreter: {into:.3f} ms per MiB mapped, {touched:.3f} ms per MiB with every page read")
print(f"back to the engine: {both - touched:.3f} ms per MiB ({1000 / max(both - touched, 1e-9) / 1024:.2f} GiB/s)")
# From the first call's start to the last's end over their count: dispatch included. The first
# call (the interpreter's start) is left out.
first, end, n = db.execute(
    "SELECT min(start_ms), max(start_ms + wall_ms), count(*) FROM tasks WHERE step = 'call' AND task_index > 0"
).fetchone()
print(f"a call that crosses nothing: {(end - first) / n:.2f} ms a task, dispatch included ({n} calls, one worker)")
PY
