#!/usr/bin/env bash
# Two threads sharing one allocator: plimsoll against glibc malloc, jemalloc and mimalloc (the malloc benchmark
# with each preloaded). Prints items/s (one item: a free plus an allocation) and the ratio to glibc.
#   bench/run_threads.sh
# Environment: BUILD_DIR (default build-bench), REPETITIONS (default 5), PLIMSOLL_BENCH_TRACE (sizes' trace).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="$(realpath -m "${BUILD_DIR:-build-bench}")"
repetitions="${REPETITIONS:-5}"
bench="$build_dir/bench/plimsoll_threads_bench"
# Always built (a no-op when up to date): a stale binary would measure yesterday's engine.
[[ -f "$build_dir/build.ninja" ]] ||
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLIMSOLL_BUILD_TESTS=OFF >/dev/null
cmake --build "$build_dir" -j "${PLIMSOLL_JOBS:-2}" --target plimsoll_threads_bench >/dev/null
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

common=(--benchmark_repetitions="$repetitions" --benchmark_report_aggregates_only=true --benchmark_format=json)
"$bench" "${common[@]}" --benchmark_filter='BM_(plimsoll|malloc)/' >"$out/glibc.json"
# shellcheck source=bench/preload.sh
source "$repo_root/bench/preload.sh"
for lib in jemalloc mimalloc; do
  preload_path "lib$lib.so.2"
  LD_PRELOAD="$PRELOAD_PATH" \
    "$bench" "${common[@]}" --benchmark_filter='BM_malloc/' >"$out/$lib.json"
done

python3 - "$out" <<'PY'
import json, os, sys
rows = {}
for lib in ("glibc", "jemalloc", "mimalloc"):
    for b in json.load(open(os.path.join(sys.argv[1], lib + ".json")))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            name = b["run_name"].replace("BM_malloc", lib).replace("BM_plimsoll", "plimsoll")
            rows[name] = b["items_per_second"]
print("| benchmark | items/s (median) | vs glibc |")
print("|---|---:|---:|")
for name, rate in sorted(rows.items(), key=lambda kv: (kv[0].split("/")[-1], kv[0])):
    base = rows.get("glibc/" + name.split("/", 1)[1])
    print(f"| {name} | {rate / 1e6:.2f} M | {rate / base:.2f}x |" if base else f"| {name} | {rate / 1e6:.2f} M | - |")
PY
