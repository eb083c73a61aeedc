#!/usr/bin/env bash
# A Python PyTorch CPU training step (bench/python/cnn_step.py: small CNN, batch 32, 64x64x3, Adam, one thread) run
# four ways: plain python3 (glibc malloc behind PyTorch's CPU allocator), jemalloc by LD_PRELOAD, under
# `plimsoll run` (Python call sites on, the default), and `plimsoll run --no-call-sites`. One process per contender
# in every round, the order rotating from round to round. Prints a markdown table: median step time over all
# processes' steps 3..N, the ratio to plain python3, the last loss (must be identical) and the median peak RSS.
#   bench/run_python_step.sh [BUILD_DIR]     BUILD_DIR: a build with plimsoll_cli built (default: build)
# Environment: ROUNDS (default 5), STEPS (per process, default 20), PYTHON (default /usr/bin/python3).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(realpath -m "${1:-$repo_root/build}")"
rounds="${ROUNDS:-5}"
steps="${STEPS:-20}"
python="${PYTHON:-/usr/bin/python3}"
cli="$build_dir/src/cli/plimsoll"
[[ -x "$cli" ]] || { echo "error: no $cli; build it: cmake --build $build_dir --target plimsoll_cli" >&2; exit 1; }
jemalloc="$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)"
[[ -n "$jemalloc" ]] || { echo "error: no libjemalloc.so.2; scripts/install-deps.sh installs libjemalloc-dev" >&2; exit 1; }
script="$repo_root/bench/python/cnn_step.py"
results="$(mktemp)"
trap 'rm -f "$results"' EXIT

contenders=(python jemalloc plimsoll-run plimsoll-run-no-sites)
run_one() {
  case "$1" in
    python) "$python" "$script" --steps "$steps" ;;
    jemalloc) LD_PRELOAD="$jemalloc" "$python" "$script" --steps "$steps" ;;
    plimsoll-run) "$cli" run --quiet -- "$python" "$script" --steps "$steps" ;;
    plimsoll-run-no-sites) "$cli" run --quiet --no-call-sites -- "$python" "$script" --steps "$steps" ;;
  esac
}
echo "uptime before: $(uptime)" >&2
echo "commands: $python $script --steps $steps | LD_PRELOAD=$jemalloc (same) | $cli run --quiet [--no-call-sites] -- (same)" >&2
for ((round = 0; round < rounds; ++round)); do
  for ((i = 0; i < ${#contenders[@]}; ++i)); do
    name="${contenders[$(((i + round) % ${#contenders[@]}))]}"
    echo "{\"contender\": \"$name\", \"result\": $(run_one "$name")}" >>"$results"
  done
done
echo "uptime after: $(uptime)" >&2
"$python" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
by = {}
for row in rows:
    by.setdefault(row["contender"], []).append(row["result"])
base = statistics.median(t for r in by["python"] for t in r["step_s"][2:])
print("| contender | median step | ratio to python3 | last loss | median peak RSS |")
print("|---|---|---|---|---|")
for name, results in by.items():
    median = statistics.median(t for r in results for t in r["step_s"][2:])
    losses = {f'{r["loss"]:.6f}' for r in results}
    rss = statistics.median(r["peak_rss_bytes"] for r in results) / 2**20
    print(f"| {name} | {median * 1000:.1f} ms | {median / base:.3f} | {', '.join(sorted(losses))} | {rss:.0f} MiB |")
PY
