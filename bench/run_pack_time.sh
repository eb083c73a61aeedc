#!/usr/bin/env bash
# Step-aware placement's packing time (issue 16), two builds side by side: each trace replayed at the target's limit
# (1.01 x peak live over 1 GiB live, peak live + 4 MiB below; as bench/run_step_plan.sh) RUNS times by each build,
# interleaved, and the median of `step_plan.pack_ms` (wall time of the packs, off the device's lock) with the packs
# made and whether the run ran out of memory. Wall time on a shared machine: report the load beside the figures.
#   A=path/to/plimsoll B=path/to/plimsoll [RUNS=3] bench/run_pack_time.sh [TRACE...]
# default traces: every *.trace in ../shared/traces; A and B default to build/src/cli/plimsoll.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
a="${A:-$repo_root/build/src/cli/plimsoll}"
b="${B:-$repo_root/build/src/cli/plimsoll}"
runs="${RUNS:-3}"
for tool in "$a" "$b"; do
  [[ -x "$tool" ]] || { echo "error: $tool is not an executable; set A and B to two builds' src/cli/plimsoll" >&2; exit 1; }
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "error: RUNS=$runs is not a positive count" >&2; exit 1; }
traces=("$@")
if [[ ${#traces[@]} -eq 0 ]]; then traces=("$repo_root"/../shared/traces/*.trace); fi

echo "| trace | limit | A: packs | A: pack ms (median of $runs) | B: packs | B: pack ms (median of $runs) | B/A | A: OOM | B: OOM |"
echo "|---|---:|---:|---:|---:|---:|---:|---|---|"
for trace in "${traces[@]}"; do
  peak=$("$a" replay "$trace" --device sim:64GiB --json --no-step-plan | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["peak_live_bytes"])')
  if (( peak > 1073741824 )); then limit=$(python3 -c "import math; print(math.ceil(1.01 * $peak))"); rule="1.01 x"
  else limit=$(( peak + 4 * 1048576 )); rule="+4 MiB"; fi
  results=()
  for ((run = 0; run < runs; ++run)); do
    for tool in "$a" "$b"; do
      results+=("$("$tool" replay "$trace" --device sim:64GiB --policy on_demand --memory-limit "$limit" --json |
        python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); p=r["step_plan"]; print(p["packs"], p["pack_ms"], "at event %d" % r["oom_event"] if r["oom"] else "no", sep=",")')")
    done
  done
  printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
name, limit, rule = sys.argv[1:4]
rows = [line.strip().split(",") for line in sys.stdin if line.strip()]
a, b = rows[0::2], rows[1::2]
ma, mb = statistics.median(float(r[1]) for r in a), statistics.median(float(r[1]) for r in b)
print("| %s | %.2f MiB (%s) | %s | %.0f | %s | %.0f | %s | %s | %s |" % (name, int(limit) / 1048576, rule, a[0][0], ma, b[0][0], mb,
      "%.2f" % (mb / ma) if ma > 0 else "-", a[0][2], b[0][2]))' "$(basename "$trace")" "$limit" "$rule"
done
