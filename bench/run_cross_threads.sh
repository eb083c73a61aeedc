#!/usr/bin/env bash
# Threads allocating on one allocator while other threads free their blocks (PyTorch's autograd frees on its own
# threads): plimsoll with and without per-thread caches against glibc malloc, jemalloc and mimalloc, every run its
# own process, interleaved (rep 1: every case x every allocator, then rep 2, ...). Prints medians of operations
# per second (an allocation or a free is one) and ratios against jemalloc.
#   bench/run_cross_threads.sh
# Environment: BUILD_DIR (default build-bench), PROCESSES (default 5), THREADS (default "1 2 4"), MODES (default
#   "cross own"), ROUNDS (batches of 64 per thread and run, default 10000), TRACE (sizes; default resnet50-b32),
#   RESULTS (JSON lines, default $BUILD_DIR/cross-threads-results.jsonl).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="$(realpath -m "${BUILD_DIR:-build-bench}")"
processes="${PROCESSES:-5}"
read -r -a thread_counts <<<"${THREADS:-1 2 4}"
read -r -a modes <<<"${MODES:-cross own}"
rounds="${ROUNDS:-10000}"
trace="$(realpath "${TRACE:-$repo_root/../shared/traces/resnet50-b32.trace}")"
results="${RESULTS:-$build_dir/cross-threads-results.jsonl}"
bench="$build_dir/bench/plimsoll_cross_thread_bench"
[[ -f "$build_dir/build.ninja" ]] ||
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLIMSOLL_BUILD_TESTS=OFF >/dev/null
cmake --build "$build_dir" -j "${PLIMSOLL_JOBS:-2}" --target plimsoll_cross_thread_bench >/dev/null
# shellcheck source=bench/preload.sh
source "$repo_root/bench/preload.sh"
preload_path libjemalloc.so.2 && jemalloc="$PRELOAD_PATH"
preload_path libmimalloc.so.2 && mimalloc="$PRELOAD_PATH"

run_one() {
  local allocator="$1"
  shift
  local args=(--trace "$trace" --rounds "$rounds" --reps 3 --label "$allocator" "$@")
  case "$allocator" in
    glibc) "$bench" --allocator malloc "${args[@]}" ;;
    jemalloc) LD_PRELOAD="$jemalloc" "$bench" --allocator malloc "${args[@]}" ;;
    mimalloc) LD_PRELOAD="$mimalloc" "$bench" --allocator malloc "${args[@]}" ;;
    plimsoll) "$bench" --allocator plimsoll --thread-cache 0 "${args[@]}" ;;
    plimsoll+cache) "$bench" --allocator plimsoll --thread-cache $((8 << 20)) "${args[@]}" ;;
  esac
}

: >"$results"
for ((process = 1; process <= processes; process++)); do
  for mode in "${modes[@]}"; do
    for threads in "${thread_counts[@]}"; do
      for allocator in glibc jemalloc mimalloc plimsoll plimsoll+cache; do
        echo "process $process/$processes: $allocator $mode $threads" >&2
        run_one "$allocator" --mode "$mode" --threads "$threads" >>"$results"
      done
    done
  done
done
echo "results: $results" >&2

python3 - "$results" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        runs[(r["mode"], r["threads"], r["allocator"])].append(r["ops_per_s"])
order = ["glibc", "jemalloc", "mimalloc", "plimsoll", "plimsoll+cache"]
print("| frees by | threads | " + " | ".join(order) + " | plimsoll+cache / jemalloc |")
print("|---|---:|" + "---:|" * (len(order) + 1))
for mode, threads in sorted({(m, t) for m, t, _ in runs}):
    med = {a: statistics.median(runs[(mode, threads, a)]) for a in order if runs.get((mode, threads, a))}
    cells = [f"{med[a] / 1e6:.1f} M" if a in med else "-" for a in order]
    ratio = med.get("plimsoll+cache", 0) / med["jemalloc"] if med.get("jemalloc") else 0
    who = "the next thread" if mode == "cross" else "the allocating thread"
    print(f"| {who} | {threads} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
PY
