#!/usr/bin/env bash
# Run plans against issue 16's target (docs/engine.md, "Run plans"): each plan's trace (its `source`) replayed on a
# simulated device under on_demand at the plan's own limit (the target's: peak live + 4 MiB under 1 GiB live, 1.01 x
# over), with the run plan (--run-plan) and without it, each with its last step repeated REPEAT more times
# (--repeat-last-step), and the maps/unmaps of those repeated steps: the steady state a long run reaches. The limit is
# given as bytes (--memory-limit), not as --limit-plus-mib: repeating a step of a trace that keeps every batch raises
# its peak, and the plan's limit is of the trace as recorded. No timing: bytes and counts, exact and repeatable.
#   bench/run_run_plan.sh PLAN...        plans from `plimsoll run-plan TRACE -o PLAN [--through-step N]`
# Environment: BUILD_DIR (default build; plimsoll_cli must be built there); REPEAT (default 10).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(realpath -m "${BUILD_DIR:-$repo_root/build}")"
plimsoll="$build_dir/src/cli/plimsoll"
[[ -x "$plimsoll" ]] || { echo "error: $plimsoll is not built; cmake --build $build_dir --target plimsoll_cli" >&2; exit 1; }
repeat="${REPEAT:-10}"
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "error: REPEAT=$repeat is not a count above 0; set REPEAT to 1..1000" >&2; exit 1; }
(( $# > 0 )) || { echo "usage: bench/run_run_plan.sh PLAN...  (plans from plimsoll run-plan)" >&2; exit 1; }

echo "| trace | plan through step | limit (granules) | plan covers | OOM | placed (made room) | ended | maps/unmaps after step 0 | step plans after it (plans/unfit, followed/fallbacks) | x $repeat: OOM | x $repeat: maps/unmaps in the repeated steps | without: OOM | without x $repeat: OOM, maps/unmaps in the repeated steps |"
echo "|---|---:|---:|---:|---|---:|---|---:|---|---|---:|---|---|"
for plan in "$@"; do
  IFS=$'\t' read -r trace limit through covered < <(python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
print(p["source"], p["limit"], p["through_step"], p["covered_granules"], sep="\t")' "$plan")
  # One replay: OOM, placed, ended, steady maps/unmaps, step plans, and the repeated steps' maps/unmaps (with $1 > 0).
  row() {
    local n="$1"
    shift
    "$plimsoll" replay "$trace" --device sim:64GiB --policy on_demand --memory-limit "$limit" --json \
      --repeat-last-step "$n" "$@" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); n = int(sys.argv[1]); s = r["step_plan"]; p = r["run_plan"]
oom = "at event %d" % r["oom_event"] if r["oom"] else "no"
steps = r["steps"]; reached = len(r["maps_by_step"])
if n == 0 or (r["oom"] and reached <= steps - n):
    repeated = "-"
else:
    repeated = "%d/%d" % (sum(r["maps_by_step"][steps - n:]), sum(r["unmaps_by_step"][steps - n:]))
placed = "%d/%d (%d)" % (p["placed"], p["entries"], p["made_room"]) if p["loaded"] else "-"
ended = ("%s at request %d" % (p["ended_by"], p["ended_at"]) if p["ended_by"] != "none" else "active to the end") if p["loaded"] else "-"
after = "%d/%d, %d/%d" % (s["plans"], s["unfit"], s["followed"], s["fallbacks"])
print(oom, placed, ended, "%d/%d" % (r["steady_maps"], r["steady_unmaps"]), after, repeated, sep="\t")' "$n"
  }
  IFS=$'\t' read -r oom placed ended steady after _ < <(row 0 --run-plan "$plan")
  IFS=$'\t' read -r long_oom _ _ _ _ long_repeated < <(row "$repeat" --run-plan "$plan")
  IFS=$'\t' read -r bare_oom _ _ _ _ _ < <(row 0)
  IFS=$'\t' read -r bare_long_oom _ _ _ _ bare_long_repeated < <(row "$repeat")
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s, %s |\n' "$(basename "$trace")" "$through" \
    "$(( limit / 2097152 ))" "$covered" "$oom" "$placed" "$ended" "$steady" "$after" "$long_oom" "$long_repeated" \
    "$bare_oom" "$bare_long_oom" "$bare_long_repeated"
done
