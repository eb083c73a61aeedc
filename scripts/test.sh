#!/usr/bin/env bash
# The test command of the README: a warning-free Release build with GCC, then every test.
#   scripts/test.sh [BUILD_DIR]     (default: build/ in the repository root)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# A build dir given on the command line is taken relative to where the caller stands.
build_dir="$(realpath -m "${1:-$repo_root/build}")"
cd "$repo_root"
jobs="${PLIMSOLL_JOBS:-2}"

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLIMSOLL_WERROR=ON \
  -DCMAKE_CXX_COMPILER=g++-12 -DCMAKE_C_COMPILER=gcc-12
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
