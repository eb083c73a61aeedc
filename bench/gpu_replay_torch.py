#!/usr/bin/env python3
"""Replays a ../shared/traces file on cuda:0 through one allocator, driven as a training program drives it
(torch.empty and tensor deletion; CuPy's runtime malloc/free for plain cudaMalloc), and prints one JSON line.
One allocator per process: PyTorch fixes its allocator at the first CUDA allocation.

    python3 bench/gpu_replay_torch.py TRACE --allocator MODE [--so PATH] [--streams N] [--passes N]

MODE: plimsoll (libplimsoll_torch_cuda.so through CUDAPluggableAllocator, growable segments), native (PyTorch's
caching allocator), native-expandable (expandable_segments:True), async (backend:cudaMallocAsync, a pool),
cudamalloc (CuPy's cupy.cuda.runtime.malloc/free: one cudaMalloc/cudaFree per call). --streams N: allocations
round-robin over N streams, each freed on its own. Reported: host ns per call (median and p99 over every call of the
warm passes, Python's call overhead included, the same for every mode), peak reserved bytes as the allocator counts
them, peak device memory used as cuMemGetInfo sees it (sampled every 64 calls, minus the use before the first
call), and the trace's peak live bytes. Exit 77 when the allocator's Python module (torch, CuPy) is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

SKIP = 77


def read_trace(path: str) -> list[tuple[str, int, int]]:
    events = []
    with open(path) as file:
        for line in file:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "a":
                events.append(("a", int(parts[1]), int(parts[2])))
            elif len(parts) == 2 and parts[0] == "f":
                events.append(("f", int(parts[1]), 0))
    return events


def peak_live(events) -> int:
    live, sizes, peak = 0, {}, 0
    for kind, ident, size in events:
        if kind == "a":
            sizes[ident] = size
            live += size
            peak = max(peak, live)
        else:
            live -= sizes.pop(ident)
    return peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--allocator", required=True,
                        choices=["plimsoll", "native", "native-expandable", "async", "cudamalloc"])
    parser.add_argument("--so", default=os.environ.get("PLIMSOLL_TORCH_CUDA_SO", ""))
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--passes", type=int, default=3)
    arguments = parser.parse_args()
    if arguments.allocator == "native-expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif arguments.allocator == "async":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    try:
        import torch
    except ImportError as error:
        print(json.dumps({"skipped": f"no torch: {error}"}))
        return SKIP
    events = read_trace(arguments.trace)
    library = None
    if arguments.allocator == "plimsoll":
        import ctypes
        torch.cuda.memory.change_current_allocator(torch.cuda.memory.CUDAPluggableAllocator(
            arguments.so, "plimsoll_torch_malloc", "plimsoll_torch_free"))
        library = ctypes.CDLL(arguments.so)
        library.plimsoll_torch_cuda_stats_json.restype = ctypes.c_char_p
    if arguments.allocator == "cudamalloc":
        try:
            import cupy
        except ImportError as error:
            print(json.dumps({"skipped": f"no CuPy for plain cudaMalloc: {error}"}))
            return SKIP
        malloc, free = cupy.cuda.runtime.malloc, cupy.cuda.runtime.free
    torch.cuda.init()
    streams = [torch.cuda.Stream() for _ in range(arguments.streams)]
    free0, total = torch.cuda.mem_get_info()
    peak_used = 0
    times: list[int] = []
    clock = time.perf_counter_ns
    for replay in range(arguments.passes + 1):
        live = {}
        for number, (kind, ident, size) in enumerate(events):
            stream = streams[ident % len(streams)]
            if kind == "a":
                with torch.cuda.stream(stream):
                    began = clock()
                    live[ident] = malloc(size) if arguments.allocator == "cudamalloc" else \
                        torch.empty(size, dtype=torch.uint8, device="cuda")
                    spent = clock() - began
            else:
                with torch.cuda.stream(stream):
                    block = live.pop(ident)
                    began = clock()
                    if arguments.allocator == "cudamalloc":
                        free(block)
                    else:
                        del block
                    spent = clock() - began
            if replay > 0:
                times.append(spent)
            if number % 64 == 0:
                free_now, _ = torch.cuda.mem_get_info()
                peak_used = max(peak_used, free0 - free_now)
        for ident in list(live):
            block = live.pop(ident)
            if arguments.allocator == "cudamalloc":
                free(block)
        torch.cuda.synchronize()
    times.sort()
    result = {"trace": os.path.basename(arguments.trace), "allocator": arguments.allocator,
              "streams": arguments.streams, "calls": len(times), "ns_median": times[len(times) // 2],
              "ns_p99": times[int(len(times) * 0.99)], "peak_device_used_bytes": peak_used,
              "trace_peak_live_bytes": peak_live(events), "gpu": torch.cuda.get_device_name(0)}
    if library is not None:
        stats = json.loads(library.plimsoll_torch_cuda_stats_json(0))
        result["peak_reserved_bytes"] = stats["peak_reserved_bytes"]
    elif arguments.allocator != "cudamalloc":
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
