#!/usr/bin/env bash
# Two builds of plimsoll side by side, interleaved (A then B for every trace and process), with per-thread caches
# (8 MiB a thread) and no first touch: what bench/run_replay.sh runs for plimsoll-on_demand+cache, or with
# WHAT=threads what bench/run_cross_threads.sh runs for plimsoll+cache (and jemalloc beside them). Neither build is
# rebuilt: build A at the commit to compare against, e.g.
#   git worktree add /tmp/landed <commit> && cmake -S /tmp/landed -B /tmp/landed/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/landed/build --target plimsoll_replay_bench plimsoll_cross_thread_bench
#   A=/tmp/landed/build B=build PROCESSES=25 bench/run_ab.sh [TRACE...]
#   A=/tmp/landed/build B=build PROCESSES=5 WHAT=threads bench/run_ab.sh
#   A=/tmp/landed/build B=build PROCESSES=21 WHAT=threads THREADS="1 2 4" MAX_BYTES=65536 bench/run_ab.sh
# WHAT=threads also reads THREADS (thread counts, default "2 4") and MAX_BYTES (only the trace's sizes up to this
# many bytes, default 1048576: 65536 measures the caches' small path alone).
# Prints a markdown table of medians over the processes (replay: mean / p50 / p99 ns; threads: ops/s and the
# ratio to jemalloc). CACHE sets the replay's per-thread cache bytes (default 8 MiB; CACHE=0: the heap path alone);
# REPS the replay's warm passes a process (default 10; GPT's trace is 3,956 operations, so REPS=100 weighs its
# first passes' warm-up less).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${A:?set A to the build directory to compare against}" "${B:?set B to the build directory to measure}"
processes="${PROCESSES:-5}"
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
traces=()
for trace in "$@"; do traces+=("$(realpath "$trace")"); done
[[ ${#traces[@]} -gt 0 ]] || traces=("$repo_root"/../shared/traces/*.trace)
[[ -e "${traces[0]}" ]] || { echo "error: no traces in ../shared/traces; pass trace files as arguments" >&2; exit 1; }
for build in "$A" "$B"; do
  for bench in plimsoll_replay_bench plimsoll_cross_thread_bench; do
    [[ -x "$build/bench/$bench" ]] || { echo "error: $build/bench/$bench is missing; build it first" >&2; exit 1; }
  done
done

if [[ "${WHAT:-replay}" == threads ]]; then
  # shellcheck source=bench/preload.sh
  source "$repo_root/bench/preload.sh"
  preload_path libjemalloc.so.2 && jemalloc="$PRELOAD_PATH"
  trace="${TRACE:-$repo_root/../shared/traces/resnet50-b32.trace}"
  for ((process = 1; process <= processes; process++)); do
    for mode in cross own; do
      for threads in ${THREADS:-2 4}; do
        args=(--trace "$trace" --rounds 5000 --reps 3 --mode "$mode" --threads "$threads" --max-bytes "${MAX_BYTES:-1048576}")
        {
          LD_PRELOAD="$jemalloc" "$B/bench/plimsoll_cross_thread_bench" --allocator malloc "${args[@]}" --label jemalloc
          "$A/bench/plimsoll_cross_thread_bench" --allocator plimsoll --thread-cache $((8 << 20)) "${args[@]}" --label A
          "$B/bench/plimsoll_cross_thread_bench" --allocator plimsoll --thread-cache $((8 << 20)) "${args[@]}" --label B
        } >>"$results"
      done
    done
  done
  python3 - "$results" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[(r["mode"], r["threads"], r["allocator"])].append(r["ops_per_s"])
print("| frees by | threads | jemalloc | A | B |\n|---|---:|---:|---:|---:|")
for mode, threads in sorted({(m, t) for m, t, _ in runs}):
    med = {a: statistics.median(runs[(mode, threads, a)]) for a in ("jemalloc", "A", "B")}
    cells = [f"{med[a] / 1e6:.1f} M, {med[a] / med['jemalloc']:.2f}x" for a in ("A", "B")]
    who = "the next thread" if mode == "cross" else "the allocating thread"
    print(f"| {who} | {threads} | {med['jemalloc'] / 1e6:.1f} M | " + " | ".join(cells) + " |")
PY
  exit 0
fi

for ((process = 1; process <= processes; process++)); do
  for trace in "${traces[@]}"; do
    for side in A B; do
      "${!side}/bench/plimsoll_replay_bench" --allocator plimsoll-on_demand --thread-cache "${CACHE:-$((8 << 20))}" \
        --trace "$trace" \
        --reps "${REPS:-10}" --label "$side" >>"$results"
    done
  done
done
python3 - "$results" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[(r["trace"], r["allocator"])].append(r)
print("| trace | A | B |\n|---|---:|---:|")
for trace in sorted({t for t, _ in runs}):
    cells = []
    for side in ("A", "B"):
        rs = runs[(trace, side)]
        cells.append(" / ".join(f"{statistics.median(r[k] for r in rs):.{d}f}" for k, d in
                                (("mean_ns", 1), ("p50_ns", 0), ("p99_ns", 0))))
    print(f"| {trace.removesuffix('.trace')} | " + " | ".join(cells) + " |")
PY
