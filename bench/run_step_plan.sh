#!/usr/bin/env bash
# Step-aware placement against its target (issue 16): every trace replayed on a simulated device under on_demand,
# with the plan (the default) and without it (--no-step-plan), at the target's limit: 1.01 x peak live for traces
# over 1 GiB live, peak live + 4 MiB (two granules) for the others. Then the lower bound: one recorded step packed
# offline (plimsoll_step_plan_bound). No timing: the figures are bytes and map/unmap counts, exact and repeatable.
# The shared traces hold 3 steps, so steady state after the learning steps is one step long; the "x REPEAT" columns
# replay each trace's last step REPEAT more times (plimsoll replay --repeat-last-step) and give the maps/unmaps of
# the last REPEAT steps (those after the trace's own), i.e. what a long run does once the plan has settled.
#   bench/run_step_plan.sh [TRACE...]          default: every *.trace in ../shared/traces
# Environment: BUILD_DIR (default build; plimsoll_cli and plimsoll_step_plan_bound must be built there);
#   REPEAT (default 10; 0 drops the repeated columns).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(realpath -m "${BUILD_DIR:-$repo_root/build}")"
plimsoll="$build_dir/src/cli/plimsoll"
bound="$build_dir/bench/plimsoll_step_plan_bound"
for tool in "$plimsoll" "$bound"; do
  [[ -x "$tool" ]] || { echo "error: $tool is not built; cmake --build $build_dir --target plimsoll_cli plimsoll_step_plan_bound" >&2; exit 1; }
done
repeat="${REPEAT:-10}"
[[ "$repeat" =~ ^[0-9]+$ ]] || { echo "error: REPEAT=$repeat is not a count; set REPEAT to 0..1000" >&2; exit 1; }
traces=("$@")
if [[ ${#traces[@]} -eq 0 ]]; then traces=("$repo_root"/../shared/traces/*.trace); fi

header="| trace | peak live | limit | plan: OOM | plan: steady maps/unmaps | plan: planned | plan: unfit plans | best fit alone: OOM | best fit alone: steady maps/unmaps |"
separator="|---|---:|---:|---|---:|---:|---:|---|---:|"
if (( repeat > 0 )); then
  header+=" plan x $repeat: OOM | plan x $repeat: maps/unmaps in the repeated steps | best fit x $repeat: OOM | best fit x $repeat: maps/unmaps in the repeated steps |"
  separator+="---|---:|---|---:|"
fi
echo "$header"
echo "$separator"
for trace in "${traces[@]}"; do
  peak=$("$plimsoll" replay "$trace" --device sim:64GiB --json --no-step-plan | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["peak_live_bytes"])')
  if (( peak > 1073741824 )); then
    limit=$(python3 -c "import math; print(math.ceil(1.01 * $peak))"); rule="1.01 x"
  else
    limit=$(( peak + 4 * 1048576 )); rule="+4 MiB"
  fi
  row() {
    "$plimsoll" replay "$trace" --device sim:64GiB --policy on_demand --memory-limit "$limit" --json "$@" |
      python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); p = r["step_plan"]
oom = "at event %d" % r["oom_event"] if r["oom"] else "no"
planned = "%d/%d" % (p["followed"], p["followed"] + p["fallbacks"]) if p["plans"] else "-"
print(oom, "%d/%d" % (r["steady_maps"], r["steady_unmaps"]), planned, p["unfit"], sep="\t")'
  }
  IFS=$'\t' read -r plan_oom plan_steady plan_planned plan_unfit < <(row)
  IFS=$'\t' read -r fit_oom fit_steady _ _ < <(row --no-step-plan)
  printf '| %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s |' "$(basename "$trace")" \
    "$(python3 -c "print('%.2f MiB' % ($peak / 1048576))")" "$(python3 -c "print('%.2f MiB' % ($limit / 1048576))")" \
    "$rule" "$plan_oom" "$plan_steady" "$plan_planned" "$plan_unfit" "$fit_oom" "$fit_steady"
  if (( repeat > 0 )); then
    repeated() {  # OOM, then the maps/unmaps of the last $repeat steps (those the trace did not have)
      "$plimsoll" replay "$trace" --device sim:64GiB --policy on_demand --memory-limit "$limit" --json \
        --repeat-last-step "$repeat" "$@" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); n = int(sys.argv[1]); steps = r["steps"]
oom = "at event %d" % r["oom_event"] if r["oom"] else "no"
maps, unmaps = r["maps_by_step"][steps - n:], r["unmaps_by_step"][steps - n:]
print(oom, "%d/%d" % (sum(maps), sum(unmaps)) if len(maps) == n else "-", sep="\t")' "$repeat"
    }
    IFS=$'\t' read -r rplan_oom rplan_maps < <(repeated)
    IFS=$'\t' read -r rfit_oom rfit_maps < <(repeated --no-step-plan)
    printf ' %s | %s | %s | %s |' "$rplan_oom" "$rplan_maps" "$rfit_oom" "$rfit_maps"
  fi
  printf '\n'
done
echo
"$bound" "${traces[@]}"
