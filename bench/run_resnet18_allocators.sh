#!/usr/bin/env bash
# ResNet-18 training steps under libtorch on the CPU (plimsoll_resnet18_step_bench: batch 16, 112x112x3, SGD,
# 2 threads) with each allocator as libtorch's CPU allocator: plimsoll, glibc malloc (libtorch's default), and
# jemalloc by LD_PRELOAD (the usual advice for PyTorch on CPU). One process per allocator in every round, in an
# order that rotates from round to round, so drift of the machine and the position in a round reach all alike.
# Prints a markdown table (bench/resnet18_table.py): the median step time over every process's steps 3..N, each
# process's median, the ratio to the best of glibc and jemalloc, and peak RSS.
#   bench/run_resnet18_allocators.sh [BUILD_DIR]      BUILD_DIR: a configured and built build folder
# It builds nothing: build plimsoll_resnet18_step_bench first (libtorch: scripts/install-deps.sh installs it), e.g.
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench -j2 \
#     --target plimsoll_resnet18_step_bench
# Environment: BUILD_DIR (when no argument; default build-bench), ROUNDS (default 5), STEPS (per process, default
#   22), ALLOCATORS (default "glibc jemalloc plimsoll"; also jemalloc-tuned, jemalloc with the MALLOC_CONF below,
#   and mimalloc), RESULTS (JSON lines file, default
#   $BUILD_DIR/resnet18-results.jsonl).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(realpath -m "${1:-${BUILD_DIR:-$repo_root/build-bench}}")"
rounds="${ROUNDS:-5}"
steps="${STEPS:-22}"
read -r -a allocators <<<"${ALLOCATORS:-glibc jemalloc plimsoll}"
results="${RESULTS:-$build_dir/resnet18-results.jsonl}"
# jemalloc-tuned: what PyTorch's CPU launcher (torch.backends.xeon.run_cpu, 1.13) sets with jemalloc, plus the decay
# times Intel's model guides add to it, so that freed pages are meant to stay with the process rather than be purged.
jemalloc_tuned_conf="oversize_threshold:1,background_thread:true,metadata_thp:auto"
jemalloc_tuned_conf+=",dirty_decay_ms:9000000000,muzzy_decay_ms:9000000000"

bench="$build_dir/bench/plimsoll_resnet18_step_bench"
[[ -x "$bench" ]] || {
  echo "error: no $bench; build it (cmake --build $build_dir --target plimsoll_resnet18_step_bench). The target" \
       "exists only when CMake found libtorch: scripts/install-deps.sh installs it; then reconfigure" >&2
  exit 1
}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "error: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 1; }

# shellcheck source=bench/preload.sh
source "$repo_root/bench/preload.sh"
# Checked before the first run, so a typo does not surface minutes in.
jemalloc_path=""
mimalloc_path=""
for allocator in "${allocators[@]}"; do
  case "$allocator" in
    glibc | plimsoll) ;;
    jemalloc | jemalloc-tuned) preload_path libjemalloc.so.2 && jemalloc_path="$PRELOAD_PATH" ;;
    mimalloc) preload_path libmimalloc.so.2 && mimalloc_path="$PRELOAD_PATH" ;;
    *) echo "error: unknown allocator '$allocator' in ALLOCATORS; use glibc jemalloc jemalloc-tuned mimalloc" \
         "plimsoll" >&2
       exit 1 ;;
  esac
done

run_one() {
  local allocator="$1"
  local args=(--steps "$steps" --json --label "$allocator")
  case "$allocator" in
    glibc) "$bench" --allocator system "${args[@]}" ;;
    jemalloc) LD_PRELOAD="$jemalloc_path" "$bench" --allocator system "${args[@]}" ;;
    jemalloc-tuned) LD_PRELOAD="$jemalloc_path" MALLOC_CONF="$jemalloc_tuned_conf" \
                      "$bench" --allocator system "${args[@]}" ;;
    mimalloc) LD_PRELOAD="$mimalloc_path" "$bench" --allocator system "${args[@]}" ;;
    plimsoll) "$bench" --allocator plimsoll "${args[@]}" ;;
  esac
}

echo "load before: $(uptime)" >&2
: >"$results"
count=${#allocators[@]}
for ((round = 1; round <= rounds; round++)); do
  # Round r starts at allocator r-1 (mod count): each allocator runs first, second, ... in turn.
  for ((i = 0; i < count; i++)); do
    allocator="${allocators[$(((round - 1 + i) % count))]}"
    echo "round $round/$rounds, process $((i + 1))/$count: $allocator" >&2
    run_one "$allocator" >>"$results"
  done
done
echo "load after: $(uptime)" >&2

echo "results: $results" >&2
python3 "$repo_root/bench/resnet18_table.py" "$results"
