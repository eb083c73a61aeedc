#!/usr/bin/env python3
"""The bookkeeping of scripts/gpu-check.sh, kept out of the shell script: one line per check, verdicts from the
steps' JSON, and the final gpu-check.json and gpu-check.md.

    gpu_check_report.py record CHECKS NAME STATUS DETAIL SECONDS
    gpu_check_report.py compare-training NATIVE_JSON PLIMSOLL_JSON    -> "pass|detail" or "fail|detail"
    gpu_check_report.py replay-line JSON_LINE                         -> a one-line summary of a replay result
    gpu_check_report.py torch-line JSON                               -> "torch X on GPU"
    gpu_check_report.py finish CHECKS OUT STATUS GPU DRIVER BUNDLE    -> writes the files, prints the table
"""
from __future__ import annotations

import datetime
import json
import os
import sys

NOT_BUILT = [
    "the smallest memory limit at which each trace replays without OOM (needs one process per limit: a search)",
    "cudaMalloc/cudaFree and cudaMallocAsync timed from C++ (the Python replay includes Python's call overhead)",
    "ResNet-50 / 1.05 x peak-live training under PLIMSOLL_MEMORY_LIMIT vs set_per_process_memory_fraction",
    "the fake-driver tests with their hooks replaced by real streams (they run here on the fake, as in CI)",
]


def record(checks: str, name: str, status: str, detail: str, seconds: str) -> None:
    with open(checks, "a") as file:
        file.write(json.dumps({"name": name, "status": status, "detail": detail, "seconds": float(seconds)}) + "\n")


def compare_training(native_text: str, plimsoll_text: str) -> str:
    native, plimsoll = json.loads(native_text), json.loads(plimsoll_text)
    diff = max((abs(a - b) for a, b in zip(native["losses"], plimsoll["losses"])), default=float("inf"))
    same = (diff == 0 and len(native["losses"]) == len(plimsoll["losses"])
            and native["held_out_accuracy"] == plimsoll["held_out_accuracy"])
    ratio = plimsoll["step_ms_median"] / native["step_ms_median"]
    return (("pass" if same else "fail") + f"|{len(plimsoll['losses'])} steps, max loss difference {diff:.3g}, "
            f"held-out accuracy {native['held_out_accuracy']:.4f} vs {plimsoll['held_out_accuracy']:.4f}, step "
            f"{plimsoll['step_ms_median']:.2f} ms vs {native['step_ms_median']:.2f} ms ({ratio:.3f}x PyTorch's)")


def replay_line(text: str) -> str:
    d = json.loads(text)
    return (f"{d['p50_ns']:.0f} ns median, {d['p99_ns']:.0f} ns p99 per call; peak reserved {d['peak_reserved']}, "
            f"peak live {d['peak_live']}")


def torch_line(text: str) -> str:
    d = json.loads(text)
    return f"torch {d['torch']} on {d['gpu']}"


def finish(checks_path: str, out: str, status: str, gpu: str, driver: str, bundle: str) -> None:
    checks = [json.loads(line) for line in open(checks_path) if line.strip()]
    benchmarks = []
    for name in ("replay-plimsoll.jsonl", "replay-torch.jsonl"):
        path = os.path.join(out, name)
        if os.path.exists(path):
            benchmarks += [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    manifest_path = os.path.join(bundle, "MANIFEST")
    manifest = open(manifest_path).read() if os.path.exists(manifest_path) else ""
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "status": status,
              "gpu": gpu, "driver": driver, "bundle": manifest.strip().splitlines(), "checks": checks,
              "benchmarks": benchmarks, "not_built": NOT_BUILT}
    with open(os.path.join(out, "gpu-check.json"), "w") as file:
        json.dump(result, file, indent=1)
    lines = [f"# plimsoll GPU acceptance run: {status}", "",
             f"GPU: {gpu or 'none'}; driver {driver or 'none'}; {result['date']}", "",
             "| check | status | detail | s |", "|---|---|---|---|"]
    for c in checks:
        lines.append(f"| {c['name']} | {c['status']} | {c['detail'].replace('|', '/')} | {c['seconds']:.0f} |")
    measured = [b for b in benchmarks if "skipped" not in b]
    if measured:
        lines += ["", "| trace | allocator | streams | ns median | ns p99 | peak reserved | peak used (cuMemGetInfo) | "
                  "peak live |", "|---|---|---|---|---|---|---|---|"]
        for b in measured:
            lines.append(f"| {b.get('trace')} | {b.get('allocator')} | {b.get('streams', 1)} | "
                         f"{b.get('ns_median', b.get('p50_ns', ''))} | {b.get('ns_p99', b.get('p99_ns', ''))} | "
                         f"{b.get('peak_reserved_bytes', b.get('peak_reserved', ''))} | "
                         f"{b.get('peak_device_used_bytes', '')} | "
                         f"{b.get('trace_peak_live_bytes', b.get('peak_live', ''))} |")
    lines += ["", "Not built yet: " + "; ".join(NOT_BUILT)]
    with open(os.path.join(out, "gpu-check.md"), "w") as file:
        file.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str]) -> int:
    command, arguments = argv[0], argv[1:]
    if command == "record":
        record(*arguments)
    elif command == "compare-training":
        print(compare_training(*arguments))
    elif command == "replay-line":
        print(replay_line(*arguments))
    elif command == "torch-line":
        print(torch_line(*arguments))
    elif command == "finish":
        finish(*arguments)
    else:
        print(f"gpu_check_report.py: unknown command {command!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
