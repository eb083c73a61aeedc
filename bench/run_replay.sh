#!/usr/bin/env bash
# Replays the shared PyTorch traces against each allocator, every run its own process, interleaved
# (rep 1: every trace x every allocator, then rep 2, ...) so drift of the machine hits all allocators alike.
# Prints a markdown table of medians over the processes, with ratios against glibc malloc.
#   bench/run_replay.sh [TRACE...]          default: every *.trace in ../shared/traces
# Environment: BUILD_DIR (default build-bench, configured Release if new, and always brought up to date),
#   PROCESSES (runs per trace and allocator, default 5), PASSES (warm passes per process, default 10),
#   ALLOCATORS (default "glibc jemalloc mimalloc plimsoll-on_demand plimsoll-preallocate"; also
#   plimsoll-on_demand+cache, with per-thread caches; plimsoll-on_demand+record and
#   plimsoll-on_demand+record+sites, which record every event; harness: no allocator, what the replay loop itself
#   costs per operation, only with TOUCH=0), TOUCH (1: --touch,
#   default 1), RESULTS (JSON lines file, default $BUILD_DIR/replay-results.jsonl).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
traces=()
for trace in "$@"; do traces+=("$(realpath "$trace")"); done
cd "$repo_root"
build_dir="$(realpath -m "${BUILD_DIR:-build-bench}")"
processes="${PROCESSES:-5}"
passes="${PASSES:-10}"
read -r -a allocators <<<"${ALLOCATORS:-glibc jemalloc mimalloc plimsoll-on_demand plimsoll-preallocate}"
results="${RESULTS:-$build_dir/replay-results.jsonl}"
touch_flag=()
[[ "${TOUCH:-1}" == 1 ]] && touch_flag=(--touch)

if [[ ${#traces[@]} -eq 0 ]]; then
  traces=("$repo_root"/../shared/traces/*.trace)
  [[ -e "${traces[0]}" ]] || { echo "error: no traces in ../shared/traces; pass trace files as arguments" >&2; exit 1; }
fi

bench="$build_dir/bench/plimsoll_replay_bench"
# Always built (a no-op when up to date): a stale binary would measure yesterday's engine.
[[ -f "$build_dir/build.ninja" ]] ||
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLIMSOLL_BUILD_TESTS=OFF >/dev/null
cmake --build "$build_dir" -j "${PLIMSOLL_JOBS:-2}" --target plimsoll_replay_bench >/dev/null

# shellcheck source=bench/preload.sh
source "$repo_root/bench/preload.sh"
# Checked before the first run, so a typo does not surface half an hour in.
jemalloc_path=""
mimalloc_path=""
for allocator in "${allocators[@]}"; do
  case "$allocator" in
    glibc | plimsoll-on_demand | plimsoll-preallocate | plimsoll-on_demand+cache) ;;
    harness)
      if [[ "${TOUCH:-1}" != 0 ]]; then
        echo "error: the harness allocator hands out fake addresses, which --touch cannot write; set TOUCH=0" >&2
        exit 1
      fi ;;
    plimsoll-on_demand+record | plimsoll-on_demand+record+sites) ;;
    jemalloc) preload_path libjemalloc.so.2 && jemalloc_path="$PRELOAD_PATH" ;;
    mimalloc) preload_path libmimalloc.so.2 && mimalloc_path="$PRELOAD_PATH" ;;
    *) echo "error: unknown allocator '$allocator' in ALLOCATORS; use glibc jemalloc mimalloc" \
         "plimsoll-on_demand plimsoll-preallocate plimsoll-on_demand+cache plimsoll-on_demand+record" \
         "plimsoll-on_demand+record+sites harness" >&2
       exit 1 ;;
  esac
done

run_one() {
  local allocator="$1" trace="$2"
  local args=(--trace "$trace" --reps "$passes" "${touch_flag[@]}" --label "$allocator")
  case "$allocator" in
    glibc) "$bench" --allocator malloc "${args[@]}" ;;
    harness) "$bench" --allocator none "${args[@]}" ;;
    jemalloc) LD_PRELOAD="$jemalloc_path" "$bench" --allocator malloc "${args[@]}" ;;
    mimalloc) LD_PRELOAD="$mimalloc_path" "$bench" --allocator malloc "${args[@]}" ;;
    # Recording costs: the same replay with every event written to a trace file (and call sites captured).
    *+record) "$bench" --allocator "${allocator%+record}" --record "$build_dir/recording-bench.plimsoll" "${args[@]}" ;;
    *+record+sites) "$bench" --allocator "${allocator%+record+sites}" --record "$build_dir/recording-bench.plimsoll" \
                      --call-sites "${args[@]}" ;;
    # Per-thread caches on (Allocator::set_thread_cache): 8 MiB a thread.
    *+cache) "$bench" --allocator "${allocator%+cache}" --thread-cache $((8 << 20)) "${args[@]}" ;;
    *) "$bench" --allocator "$allocator" "${args[@]}" ;;
  esac
}

: >"$results"
for ((process = 1; process <= processes; process++)); do
  for trace in "${traces[@]}"; do
    for allocator in "${allocators[@]}"; do
      echo "process $process/$processes: $allocator $(basename "$trace")" >&2
      run_one "$allocator" "$trace" >>"$results"
    done
  done
done

echo "results: $results" >&2
python3 "$repo_root/bench/replay_table.py" "$results"
