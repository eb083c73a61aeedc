#!/usr/bin/env bash
# Host cost of libplimsoll_cuda_intercept.so per intercepted driver call, against the same call without it, on the
# FAKE driver (tests/fake_libcuda: libcuda.so.1 over malloc; no GPU). The client makes N x (cuMemAlloc 4 KiB +
# cuMemFree) and N x cuMemGetInfo through function pointers from dlsym (what the CUDA runtime's cuGetProcAddress
# table amounts to), with and without the preload, runs interleaved; prints the median ns per call of each and the
# difference, which is what the interposer adds (ledger charge under its robust lock, the address table, the
# context's device). On a GPU the driver's own calls cost microseconds more, the interposer's share the same.
#   bench/run_cuda_intercept.sh
# Environment: BUILD_DIR (default build), N (calls per run, default 200000), RUNS (default 7).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="$(realpath -m "${BUILD_DIR:-build}")"
n="${N:-200000}"
runs="${RUNS:-7}"
cmake --build "$build_dir" -j "${PLIMSOLL_JOBS:-2}" \
  --target plimsoll_cuda_client plimsoll_fake_libcuda plimsoll_cuda_intercept >/dev/null
client="$build_dir/tests/fake_libcuda/plimsoll_cuda_client"
interceptor="$build_dir/src/integrations/cuda_intercept/libplimsoll_cuda_intercept.so"
ledgers="$(mktemp -d)"
trap 'rm -rf "$ledgers"' EXIT
export LD_LIBRARY_PATH="$build_dir/tests/fake_libcuda/lib" PLIMSOLL_FAKE_CUDA_BYTES=64GiB PLIMSOLL_LEDGER_DIR="$ledgers"

for ((run = 0; run < runs; ++run)); do
  "$client" dlsym init bench "$n" | sed 's/^/without /'
  PLIMSOLL_SHARE=cuda:0=32GiB LD_PRELOAD="$interceptor" "$client" dlsym init bench "$n" | sed 's/^/with /'
done | python3 "$repo_root/bench/cuda_intercept_table.py"
