#!/usr/bin/env bash
# The GPU acceptance run (docs/cuda.md, "The GPU acceptance run"): every GPU test against the real driver,
# compute-sanitizer memcheck on the multi-stream test, PyTorch through the pluggable allocator against PyTorch's own
# allocator, and the GPU benchmarks that exist. Writes gpu-check.json and gpu-check.md into $OUT (the device tool's
# output folder) or gpu-check-out/, and prints the table. Finishes within 9 minutes: each step has a time limit, and
# once 8 minutes are spent the remaining steps are skipped with that reason.
#   scripts/gpu-check.sh                   the bundle in build-gpu-bundle (scripts/gpu-bundle.sh, built elsewhere)
#   PLIMSOLL_GPU_BUNDLE=DIR scripts/gpu-check.sh
# Exit status: 0 every check passed (skips allowed, each with its reason), 1 a check failed, 3 no CUDA driver on
# this machine (nothing else is run), 4 no bundle (build one with scripts/gpu-bundle.sh on a machine with the
# build dependencies and carry it). The GPU machines have no Debian packages and no network, so nothing is built
# here: the bundle holds the binaries.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root" || exit 4
out="${OUT:-$repo_root/gpu-check-out}"
mkdir -p "$out"
checks="$out/checks.jsonl"
: >"$checks"
bundle="$(realpath -m "${PLIMSOLL_GPU_BUNDLE:-build-gpu-bundle}")"
started=$SECONDS
budget_s=480  # steps start only within the first 8 minutes; the last one is capped to end before 9

python="$(command -v python3 || true)"
say() { printf 'gpu-check: %s\n' "$*" >&2; }

report() { "$python" scripts/gpu_check_report.py "$@"; }
# record NAME STATUS DETAIL [SECONDS]: one line of checks.jsonl (status pass, fail or skip).
record() {
  report record "$checks" "$1" "$2" "$3" "${4:-0}"
  say "$2: $1: $3"
}
finish() { report finish "$checks" "$out" "$1" "${2:-}" "${3:-}" "$bundle"; }

if [[ -z "$python" ]]; then
  echo "gpu-check: python3 is not on PATH; it writes the JSON and markdown results" >&2
  exit 4
fi

# 1. A driver, or nothing to do.
driver_error="$("$python" -c 'import ctypes
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    print(f"libcuda.so.1 cannot be loaded ({error})"); raise SystemExit
count = ctypes.c_int(0)
if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
    print("the CUDA driver loads but reports no GPU")' 2>&1)"
if [[ -n "$driver_error" ]]; then
  record "CUDA driver" skip "no CUDA driver: $driver_error; run this on a GPU machine (docs/cuda.md)"
  finish "no CUDA driver" >/dev/null
  say "no CUDA driver on this machine: $driver_error. Nothing was run; results in $out. Exit status 3."
  exit 3
fi
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
record "CUDA driver" pass "${gpu:-a GPU}, driver ${driver:-unknown}"

if [[ ! -f "$bundle/MANIFEST" ]]; then
  record "bundle" fail "no bundle at $bundle: run scripts/gpu-bundle.sh on a machine with the build dependencies and carry the folder (docs/cuda.md)"
  finish "no bundle" "$gpu" "$driver"
  exit 4
fi
record "bundle" pass "$(head -1 "$bundle/MANIFEST")"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PLIMSOLL_TORCH_CUDA_SO="$bundle/lib/libplimsoll_torch_cuda.so"
so="$PLIMSOLL_TORCH_CUDA_SO"
traces="$bundle/traces"
[[ -d "$traces" ]] || traces="$repo_root/../shared/traces"

time_left() { echo $((budget_s - (SECONDS - started))); }
# step NAME LIMIT_S: true when the step may start (and sets step_limit), else records the skip.
step() {
  local left
  left=$(time_left)
  if ((left <= 10)); then
    record "$1" skip "not started: the 9-minute budget of the run is spent"
    return 1
  fi
  step_limit=$(($2 < left + 50 ? $2 : left + 50))
  return 0
}

# 2. The tests: the real-driver test must pass, not skip; the fake-driver tests run as in CI.
gtest_summary() {  # LOG -> "N passed, N skipped, N failed"
  local passed skipped failed
  passed="$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$1" | tail -1)"
  skipped="$(grep -oP '^\[  SKIPPED \] \K[0-9]+' "$1" | tail -1)"
  failed="$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= tests?,)' "$1" | tail -1)"
  printf '%s passed, %s skipped, %s failed' "${passed:-0}" "${skipped:-0}" "${failed:-0}"
}
for test in gpu_cuda_streams_test backings_cuda_vmm_test runtime_cuda_devices_test engine_streams_test \
            engine_streams_random_test threads_engine_streams_test threads_cuda_streams_test \
            integrations_torch_cuda_device_test integrations_torch_cuda_so_test gpu_pause_test; do
  step "$test" 120 || continue
  log="$out/$test.log"
  began=$SECONDS
  timeout "$step_limit" "$bundle/bin/$test" >"$log" 2>&1
  code=$?
  summary="$(gtest_summary "$log")"
  if [[ $code -ne 0 ]]; then
    record "$test" fail "exit $code ($summary); see $test.log" $((SECONDS - began))
  elif [[ $test == gpu_* ]] && grep -q '^\[  SKIPPED \]' "$log"; then
    record "$test" fail "skipped on a GPU machine: $(grep -m1 -A1 'Skipped' "$log" | tail -1)" $((SECONDS - began))
  else
    record "$test" pass "$summary" $((SECONDS - began))
  fi
done

# 3. compute-sanitizer memcheck on the multi-stream real-driver test.
sanitizer="$(command -v compute-sanitizer || true)"
for candidate in /usr/local/cuda*/bin/compute-sanitizer; do
  [[ -z "$sanitizer" && -x "$candidate" ]] && sanitizer="$candidate"
done
if [[ -z "$sanitizer" ]]; then
  record "compute-sanitizer memcheck" skip "compute-sanitizer is not installed (not on PATH, not in /usr/local/cuda*/bin)"
elif step "compute-sanitizer memcheck" 240; then
  began=$SECONDS
  timeout "$step_limit" "$sanitizer" --tool memcheck --error-exitcode 86 "$bundle/bin/gpu_cuda_streams_test" \
    >"$out/memcheck.log" 2>&1
  code=$?
  errors="$(grep -m1 -oE 'ERROR SUMMARY: [0-9]+ errors?' "$out/memcheck.log" || echo 'no summary')"
  if [[ $code -eq 0 ]]; then record "compute-sanitizer memcheck" pass "$errors" $((SECONDS - began))
  else record "compute-sanitizer memcheck" fail "exit $code, $errors; see memcheck.log" $((SECONDS - began)); fi
fi

# 4. PyTorch: the pluggable allocator's calls, then the same training under both allocators.
torch_step() {  # NAME LIMIT ARGS... -> output in $torch_out, exit status in $torch_code
  local name="$1" limit="$2"
  shift 2
  torch_out="$(timeout "$limit" "$python" scripts/gpu_check_torch.py "$@" 2>"$out/$name.stderr")"
  torch_code=$?
}
if step "PyTorch: empty_cache, reset_peak, stats, OOM" 90; then
  began=$SECONDS
  torch_step torch-calls "$step_limit" calls --so "$so"
  case $torch_code in
    0) record "PyTorch: empty_cache, reset_peak, stats, OOM" pass "$(report torch-line "$torch_out")" $((SECONDS - began)) ;;
    77) record "PyTorch: empty_cache, reset_peak, stats, OOM" skip "$torch_out" $((SECONDS - began)) ;;
    *) record "PyTorch: empty_cache, reset_peak, stats, OOM" fail "exit $torch_code: ${torch_out:-see torch-calls.stderr}" $((SECONDS - began)) ;;
  esac
fi
if step "PyTorch: same losses as its own allocator" 180; then
  began=$SECONDS
  torch_step torch-native $((step_limit / 2)) train --allocator native
  native="$torch_out" native_code=$torch_code
  torch_step torch-plimsoll $((step_limit / 2)) train --allocator plimsoll --so "$so"
  plimsoll="$torch_out" plimsoll_code=$torch_code
  if [[ $native_code -eq 77 || $plimsoll_code -eq 77 ]]; then
    record "PyTorch: same losses as its own allocator" skip "$native $plimsoll" $((SECONDS - began))
  elif [[ $native_code -ne 0 || $plimsoll_code -ne 0 ]]; then
    record "PyTorch: same losses as its own allocator" fail "exit $native_code/$plimsoll_code; see torch-*.stderr" $((SECONDS - began))
  else
    verdict="$(report compare-training "$native" "$plimsoll")"
    record "PyTorch: same losses as its own allocator" "${verdict%%|*}" "${verdict#*|}" $((SECONDS - began))
  fi
fi

# 5. Benchmarks: plimsoll's C++ replay on cuda:0 (host ns per call), then the side-by-side replay through PyTorch.
: >"$out/replay-plimsoll.jsonl"
: >"$out/replay-torch.jsonl"
for trace in resnet50-b32 gpt-6-512-b8; do
  [[ -f "$traces/$trace.trace" ]] || { record "replay $trace" skip "no $traces/$trace.trace (the bundle carries the traces)"; continue; }
  if step "C++ replay $trace on cuda:0" 60; then
    began=$SECONDS
    if timeout "$step_limit" "$bundle/bin/plimsoll_replay_bench" --allocator plimsoll-on_demand --device cuda:0 \
         --trace "$traces/$trace.trace" --reps 10 --label plimsoll-cuda >>"$out/replay-plimsoll.jsonl" 2>"$out/replay-$trace.stderr"; then
      record "C++ replay $trace on cuda:0" pass "$(report replay-line "$(tail -1 "$out/replay-plimsoll.jsonl")")" $((SECONDS - began))
    else
      record "C++ replay $trace on cuda:0" fail "see replay-$trace.stderr" $((SECONDS - began))
    fi
  fi
  for streams in 1 4; do
    for mode in plimsoll native native-expandable async cudamalloc; do
      name="torch replay $trace $mode ${streams}x"
      step "$name" 60 || continue
      began=$SECONDS
      line="$(timeout "$step_limit" "$python" bench/gpu_replay_torch.py "$traces/$trace.trace" --allocator "$mode" \
                --streams "$streams" --so "$so" 2>"$out/replay-$trace-$mode-$streams.stderr")"
      code=$?
      echo "$line" >>"$out/replay-torch.jsonl"
      case $code in
        0) record "$name" pass "measured" $((SECONDS - began)) ;;
        77) record "$name" skip "$line" $((SECONDS - began)) ;;
        *) record "$name" fail "exit $code; see replay-$trace-$mode-$streams.stderr" $((SECONDS - began)) ;;
      esac
    done
  done
done

failed=$(grep -c '"status": "fail"' "$checks" || true)
status=$([[ $failed -eq 0 ]] && echo "passed" || echo "$failed checks failed")
finish "$status" "$gpu" "$driver"
say "results: $out/gpu-check.json and $out/gpu-check.md ($((SECONDS - started)) s)"
[[ $failed -eq 0 ]]
