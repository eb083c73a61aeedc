#!/usr/bin/env bash
# Data parallelism in processes against in-process replicas, and model parallelism: samples per second of
# `plimsoll train` with --nproc N and with --devices N (N = 1, 2, 4), and with --model-parallel 2 (one micro-batch,
# i.e. no pipelining, and the default 4); each process's or device's peak memory; the all-reduce's share of a step;
# how long the model-parallel stages computed against the steps' wall time. Interleaved rounds, medians. Prints the
# load average before and after, since a shared machine makes every figure noisy.
# A 2-core machine cannot show speed-up past 2 workers: the point is the cost of processes and of the all-reduce
# against threads, that each process stays within its own budget, and how far the pipeline overlaps its stages.
#   bench/run_train_processes.sh [BUILD_DIR]      (ROUNDS=3 STEPS=100 by default)
set -euo pipefail
build_dir="${1:-build}"
rounds="${ROUNDS:-3}"
steps="${STEPS:-100}"
cli="$build_dir/src/cli/plimsoll"
[[ -x "$cli" ]] || { echo "error: $cli is missing: build plimsoll_cli first" >&2; exit 2; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs, $(date -u +%H:%M) UTC)"
# name|options; the name is a file name, so no spaces.
runs=("nproc1|--nproc 1" "nproc2|--nproc 2" "devices2|--devices 2" "nproc4|--nproc 4" "devices4|--devices 4"
      "mp2m1|--model-parallel 2 --micro-batches 1" "mp2m4|--model-parallel 2 --micro-batches 4")
for round in $(seq "$rounds"); do
  for run in "${runs[@]}"; do
    name="${run%%|*}"
    # shellcheck disable=SC2086  # the options are words
    "$cli" train --epochs 1 --limit-batches "$steps" --json --quiet ${run#*|} 2>/dev/null | tail -n 1 \
      > "$out/$name-$round.json"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M) UTC)"
/usr/bin/python3 - "$out" <<'PY'
import json, pathlib, statistics, sys
folder = pathlib.Path(sys.argv[1])
rows = {}
for path in sorted(folder.glob("*.json")):
    name, _ = path.stem.split("-")
    rows.setdefault(name, []).append(json.loads(path.read_text()))
labels = {"nproc1": "1 process", "nproc2": "--nproc 2", "devices2": "--devices 2", "nproc4": "--nproc 4",
          "devices4": "--devices 4", "mp2m1": "--model-parallel 2 --micro-batches 1",
          "mp2m4": "--model-parallel 2 (4 micro-batches)"}
med = statistics.median
print("| run | samples/s (median) | vs 1 process | peak in use: rank 0 or device 0 | peak in use: the other ranks "
      "or devices (largest) | all-reduce share of a step | stages computing / step time |")
print("|---|---:|---:|---:|---:|---:|---:|")
base = None
for name in labels:
    runs = rows.get(name)
    if not runs:
        continue
    rate = med(128 * r["steps"] / r["step_seconds"] for r in runs)
    base = base or rate
    if "ranks" in runs[0]:
        first = med(r["ranks"][0]["peak_in_use_bytes"] for r in runs)
        others = med(max(x["peak_in_use_bytes"] for x in r["ranks"][1:]) for r in runs)
        share = f'{100 * med(statistics.mean(x["all_reduce_seconds"] / x["step_seconds"] for x in r["ranks"]) for r in runs):.1f}%'
    else:
        first = med(r["devices"][0]["peak_in_use_bytes"] for r in runs)
        rest = [r for r in runs if len(r["devices"]) > 1]
        others = med(max(d["peak_in_use_bytes"] for d in r["devices"][1:]) for r in rest) if rest else None
        share = "-"
    overlap = "-"
    if "model_parallel" in runs[0]:
        overlap = f'{med(sum(r["model_parallel"]["stage_busy_seconds"]) / r["step_seconds"] for r in runs):.2f}'
    others_text = "-" if others is None else f"{others / 2**20:.2f} MiB"
    print(f"| {labels[name]} | {rate:,.0f} | {rate / base:.2f}x | {first / 2**20:.2f} MiB | {others_text} | {share} "
          f"| {overlap} |")
PY
