#!/usr/bin/env bash
# Data parallelism in processes against in-process replicas: samples per second of `plimsoll train` with --nproc N
# and with --devices N (N = 1, 2, 4), each process's peak memory, and the all-reduce's share of a step. Interleaved
# rounds, medians. A 2-core machine cannot show speed-up past 2 workers: the point is the cost of processes and of
# the all-reduce against threads, and that each process stays within its own budget.
#   bench/run_train_processes.sh [BUILD_DIR]      (ROUNDS=3 STEPS=100 by default)
set -euo pipefail
build_dir="${1:-build}"
rounds="${ROUNDS:-3}"
steps="${STEPS:-100}"
cli="$build_dir/src/cli/plimsoll"
[[ -x "$cli" ]] || { echo "error: $cli is missing: build plimsoll_cli first" >&2; exit 2; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for round in $(seq "$rounds"); do
  for n in 1 2 4; do
    for mode in nproc devices; do
      [[ $n -eq 1 && $mode == devices ]] && continue
      "$cli" train --epochs 1 --limit-batches "$steps" --json --quiet --"$mode" "$n" | tail -n 1 \
        > "$out/$mode-$n-$round.json"
    done
  done
done
/usr/bin/python3 - "$out" "$steps" <<'PY'
import json, pathlib, statistics, sys
folder, steps = pathlib.Path(sys.argv[1]), int(sys.argv[2])
rows = {}
for path in sorted(folder.glob("*.json")):
    mode, n, _ = path.stem.split("-")
    rows.setdefault((mode, int(n)), []).append(json.loads(path.read_text()))
base = None
print("| run | samples/s (median) | vs 1 process | peak in use per process | all-reduce share of a step |")
print("|---|---:|---:|---:|---:|")
for (mode, n) in sorted(rows, key=lambda k: (k[1], k[0] != "nproc")):
    runs = rows[(mode, n)]
    rate = statistics.median(128 * r["steps"] / r["step_seconds"] for r in runs)
    if base is None:
        base = rate
    if mode == "nproc" and n > 1:
        peaks = statistics.median(max(x["peak_in_use_bytes"] for x in r["ranks"]) for r in runs)
        share = statistics.median(
            statistics.mean(x["all_reduce_seconds"] / x["step_seconds"] for x in r["ranks"]) for r in runs)
        share_text = f"{100 * share:.1f}%"
    else:
        peaks = statistics.median(max(d["peak_in_use_bytes"] for d in r["devices"]) for r in runs)
        share_text = "-"
    name = f"--nproc {n}" if mode == "nproc" and n > 1 else ("1 process" if n == 1 else f"--devices {n}")
    print(f"| {name} | {rate:,.0f} | {rate / base:.2f}x | {peaks / 2**20:.2f} MiB | {share_text} |")
PY
