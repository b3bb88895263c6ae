#!/usr/bin/env bash
# CI smoke run of the fuzz targets: a fixed number of executions of each target, seeded from the
# repository's recipes, invalid recipes and cycles files, and the .npy, netCDF, Zarr metadata and
# result file seeds here, with a fixed seed so that a run is repeatable. Exits non-zero (and
# leaves the crashing input in fuzz/artifacts/) on a crash, a timeout or an out-of-memory. RUNS
# overrides the number of executions per target.
set -euo pipefail
cd "$(dirname "$0")"
runs=${RUNS:-20000}
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
targets=(recipe npy netcdf cycles zarr result)
for target in "${targets[@]}"; do
    mkdir -p "$work/$target" "artifacts/$target"
done
# Stable Rust: no sanitizer (AddressSanitizer needs nightly). Overflow checks and debug
# assertions are on in this workspace's release profile.
flags=(--sanitizer none --release)
cargo fuzz build "${flags[@]}"
limits=(-seed=1 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1)
cargo fuzz run "${flags[@]}" recipe "$work/recipe" ../recipes ../tests/invalid_recipes -- \
    -runs="$runs" -dict=recipe.dict -artifact_prefix=artifacts/recipe/ "${limits[@]}"
cargo fuzz run "${flags[@]}" npy "$work/npy" seeds/npy -- \
    -runs="$runs" -artifact_prefix=artifacts/npy/ "${limits[@]}"
cargo fuzz run "${flags[@]}" netcdf "$work/netcdf" seeds/netcdf -- \
    -runs="$runs" -artifact_prefix=artifacts/netcdf/ "${limits[@]}"
cargo fuzz run "${flags[@]}" cycles "$work/cycles" ../recipes/cycles seeds/cycles -- \
    -runs="$runs" -dict=cycles.dict -artifact_prefix=artifacts/cycles/ "${limits[@]}"
cargo fuzz run "${flags[@]}" zarr "$work/zarr" seeds/zarr -- \
    -runs="$runs" -dict=zarr.dict -artifact_prefix=artifacts/zarr/ "${limits[@]}"
cargo fuzz run "${flags[@]}" result "$work/result" seeds/result -- \
    -runs="$runs" -dict=result.dict -artifact_prefix=artifacts/result/ "${limits[@]}"
echo "fuzz smoke: ${targets[*]}, $runs executions each: no crash"
