#!/usr/bin/env bash
# The OISST build at N daily files on an NY x NX grid: runner (recipe below, the same steps as
# recipes/oisst.yaml over integer days) beside xarray + Dask (benches/oisst_xarray.py), both timed
# from outside by GNU time (`/usr/bin/time`: wall, CPU, peak RSS of each of RUNS runs, then their
# medians).
#
#   benches/oisst.sh N [NY NX] [RUNS]        e.g. benches/oisst.sh 2000 180 360
#
# Inputs are made once under work/oisst-bench/N-NYxNX (synth_sst + write_netcdf, about 1.3 MB a
# file at 180x360); remove the folder afterwards. Needs a release build and python3 with xarray,
# dask, zarr, netCDF4.
set -euo pipefail
n=${1:?N}; ny=${2:-180}; nx=${3:-360}; runs=${4:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
runner="${RUNNER:-$root/target/release/runner}"  # or RUNNER=path/to/runner
work="$root/work/oisst-bench/$n-${ny}x$nx"
mkdir -p "$work"
cd "$work"
last=$((n - 1))
cat > inputs.yaml <<YAML
recipe: oisst-bench-inputs
dims:
  day: {start: 0, stop: $last}
  variable: [sst, anom, err, ice]
steps:
  field:
    plugin: synth_sst
    over: [day, variable]
    args: {variable: "{variable}", day: "{day}", ny: $ny, nx: $nx}
  file:
    plugin: write_netcdf
    over: [day]
    inputs: {fields: field}
    args: {path: "input/oisst-avhrr-v02r01.{day:05}.nc", deflate: 1}
YAML
cat > build.yaml <<YAML
recipe: oisst-bench
dims:
  day: {start: 0, stop: $last}
  chunk: {group: day, size: 5}
steps:
  read:
    plugin: read_netcdf
    over: [day]
    args: {path: "input/oisst-avhrr-v02r01.{day:05}.nc", variable: sst}
  prepare_target:
    plugin: zarr_create
    inputs: {first: {step: read, select: {day: 0}}}
    args: {store: out/runner.zarr, concat_dim: time, chunk: 5}
  store_chunk:
    plugin: write_zarr
    over: [chunk]
    inputs: {fields: read, store: prepare_target}
  finalize_target:
    plugin: zarr_finalize
    inputs: {written: store_chunk, store: prepare_target}
YAML
if [ ! -e input/done ]; then
  "$runner" run inputs.yaml --no-record
  touch input/done
fi
echo "inputs: $(ls input | grep -c '\.nc$') files, $(du -sh input | cut -f1)"

# Runs a command RUNS times under GNU time; prints each run and the medians.
timed() {
  local figures=()
  for _ in $(seq "$runs"); do
    figures+=("$(/usr/bin/time -f '%e %U %S %M' "$@" 2>&1 >/dev/null | tail -1)")
    echo "  wall, user, sys (s), max RSS (KiB): ${figures[-1]}"
  done
  printf '%s\n' "${figures[@]}" | python3 -c '
import statistics, sys
rows = [[float(v) for v in line.split()] for line in sys.stdin if line.strip()]
median = lambda i: statistics.median(r[i] for r in rows)
cpu = statistics.median(r[1] + r[2] for r in rows)
print(f"  median of {len(rows)}: wall {median(0):.2f} s, CPU {cpu:.2f} s, peak RSS {median(3) / 1024:.0f} MiB")'
}
echo "runner:"
timed "$runner" run build.yaml --no-record --workers 2
du -sh out/runner.zarr
echo "xarray + Dask:"
timed python3 "$root/benches/oisst_xarray.py" input out/xarray.zarr 2
du -sh out/xarray.zarr
