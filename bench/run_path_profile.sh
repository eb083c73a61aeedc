#!/usr/bin/env bash
# Where a warm operation's instructions go, per path, on every shared trace: plimsoll_replay_bench with per-thread
# caches (8 MiB, as bench/run_replay.sh's plimsoll-on_demand+cache) under valgrind's callgrind, then
# bench/path_profile.py's table (front hits, the device path, the device's entry points, the replay loop).
# Instruction counts are exact and do not depend on the machine's load (bench/run_ab.sh's nanoseconds do), so this is
# the check for a change that should cut work: run it on both builds and compare.
#   BUILD_DIR=build bench/run_path_profile.sh [TRACE...]
# Reads BUILD_DIR (default build), REPS (warm passes, default 20), OUT (where the profiles go, default
# $BUILD_DIR/path-profile). Needs valgrind (apt-get install valgrind). The device gets a memory limit above each
# trace's peak (3 GiB for GPT's, 8 GiB for the others): under valgrind the default limit's address space (several
# times the host's memory) cannot be reserved.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-build}"
reps="${REPS:-20}"
out="${OUT:-$build_dir/path-profile}"
bench="$build_dir/bench/plimsoll_replay_bench"
command -v valgrind >/dev/null || { echo "error: valgrind is not installed; apt-get install valgrind" >&2; exit 1; }
[[ -x "$bench" ]] || { echo "error: $bench is missing; cmake --build $build_dir --target plimsoll_replay_bench" >&2; exit 1; }
traces=("$@")
[[ ${#traces[@]} -gt 0 ]] || traces=("$repo_root"/../shared/traces/*.trace)
[[ -e "${traces[0]}" ]] || { echo "error: no traces in ../shared/traces; pass trace files as arguments" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/*.callgrind "$out"/*.json
for trace in "${traces[@]}"; do
  name="$(basename "$trace" .trace)"
  limit=$((8 << 30))
  [[ "$name" == gpt-* ]] && limit=$((3 << 30))
  echo "profiling $name" >&2
  valgrind --tool=callgrind --callgrind-out-file="$out/$name.callgrind" "$bench" --allocator plimsoll-on_demand \
    --thread-cache $((8 << 20)) --memory-limit "$limit" --trace "$trace" --reps "$reps" >"$out/$name.json" 2>/dev/null
done
/usr/bin/python3 "$repo_root/bench/path_profile.py" "$out"
