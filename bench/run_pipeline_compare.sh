#!/usr/bin/env bash
# Fashion-MNIST through three input pipelines with the same decode and augmentation, workers and prefetch depth:
# plimsoll::Pipeline, libtorch's C++ data loader and PyTorch's DataLoader, each run its own process, interleaved
# (run 1 of each loader, then run 2, ...) so drift of the machine reaches all alike. Each process is measured from
# outside by bench/peak_pss.py (peak of the summed PSS of its process tree, workers included). Prints a markdown
# table of medians over runs with ratios against plimsoll, and whether the issue's targets are met.
#   bench/run_pipeline_compare.sh
# Environment: BUILD_DIR (default build-bench, configured Release if new, and always brought up to date),
#   RUNS (processes per loader, default 5), EPOCHS (timed epochs after one warm-up, default 3), BATCH_SIZE (256),
#   WORKERS (4), PREFETCH (batches in flight per worker, PyTorch's prefetch_factor, default 2), STEP_US (the
#   consumer's spin per batch, default 0), LOADERS (default "plimsoll libtorch pytorch"), PYTHON (an interpreter
#   with torch and numpy, default /usr/bin/python3, Debian's), DATA_DIR (default /usr/share/datasets/fashion-mnist),
#   RESULTS (JSON lines file, default $BUILD_DIR/pipeline-compare-results.jsonl).
# libtorch: scripts/install-deps.sh (Debian libtorch-dev); PyTorch: scripts/install-deps.sh --with-pytorch (python3-torch).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="$(realpath -m "${BUILD_DIR:-build-bench}")"
runs="${RUNS:-5}"
python="${PYTHON:-/usr/bin/python3}"
data_dir="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
read -r -a loaders <<<"${LOADERS:-plimsoll libtorch pytorch}"
results="${RESULTS:-$build_dir/pipeline-compare-results.jsonl}"
common=(--batch-size "${BATCH_SIZE:-256}" --workers "${WORKERS:-4}" --prefetch "${PREFETCH:-2}"
        --epochs "${EPOCHS:-3}" --step-us "${STEP_US:-0}" --data-dir "$data_dir")

[[ -d "$data_dir" ]] ||
  { echo "error: no Fashion-MNIST in $data_dir; apt-get install dataset-fashion-mnist, or set DATA_DIR" >&2; exit 1; }

# Always built (a no-op when up to date): a stale binary would measure yesterday's pipeline.
[[ -f "$build_dir/build.ninja" ]] ||
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLIMSOLL_BUILD_TESTS=OFF >/dev/null
targets=()
for loader in "${loaders[@]}"; do
  case "$loader" in
    plimsoll) targets+=(plimsoll_pipeline_compare_bench) ;;
    libtorch)
      # The target exists only when CMake found libtorch (bench/CMakeLists.txt).
      cmake "$build_dir" >/dev/null
      if ! ninja -C "$build_dir" -t targets all | grep -q '^plimsoll_libtorch_loader_bench:'; then
        echo "error: $build_dir has no plimsoll_libtorch_loader_bench: CMake did not find libtorch. Install it" \
             "(scripts/install-deps.sh), reconfigure, or leave libtorch out of LOADERS" >&2
        exit 1
      fi
      targets+=(plimsoll_libtorch_loader_bench) ;;
    pytorch)
      "$python" -c 'import torch, numpy' 2>/dev/null || {
        echo "error: $python cannot import torch and numpy; install python3-torch (scripts/install-deps.sh" \
             "--with-pytorch), set PYTHON, or leave pytorch out of LOADERS" >&2
        exit 1
      } ;;
    *) echo "error: unknown loader '$loader' in LOADERS; use plimsoll libtorch pytorch" >&2; exit 1 ;;
  esac
done
[[ ${#targets[@]} -eq 0 ]] || cmake --build "$build_dir" -j "${PLIMSOLL_JOBS:-2}" --target "${targets[@]}" >/dev/null

run_one() {
  local loader="$1"
  case "$loader" in
    plimsoll) "$python" bench/peak_pss.py -- "$build_dir/bench/plimsoll_pipeline_compare_bench" "${common[@]}" ;;
    libtorch) "$python" bench/peak_pss.py -- "$build_dir/bench/plimsoll_libtorch_loader_bench" "${common[@]}" ;;
    # PyTorch warns when num_workers exceeds its suggestion (the CPU count); the comparison asks for it.
    pytorch) "$python" bench/peak_pss.py -- "$python" -W ignore::UserWarning bench/pipeline_vs_dataloader.py \
               "${common[@]}" ;;
  esac
}

: >"$results"
for ((run = 1; run <= runs; run++)); do
  for loader in "${loaders[@]}"; do
    echo "run $run/$runs: $loader" >&2
    run_one "$loader" >>"$results"
  done
done

echo "results: $results" >&2
"$python" bench/pipeline_compare_table.py "$results"
