#!/usr/bin/env python3
"""The PyTorch part of scripts/gpu-check.sh: one allocator per process (PyTorch fixes its allocator at the first CUDA
allocation), one JSON object on stdout.

    python3 scripts/gpu_check_torch.py train  --allocator plimsoll|native [--so PATH] [--steps N]
    python3 scripts/gpu_check_torch.py calls  --so PATH     # stats, empty_cache, reset_peak, OOM and recovery

train: a small transformer (seeded, deterministic algorithms) trained for --steps steps, each batch copied to the GPU
on a side stream and consumed on the current one (two CUDA streams in play), plus a held-out batch's accuracy. The
caller runs it once per allocator and compares the losses. calls: plimsoll's C functions through ctypes, as
docs/pytorch.md shows them. Exit status: 0 done (the JSON says what was measured), 77 skipped (no torch with CUDA,
no CUDAPluggableAllocator, or no library; the reason is printed), 1 a check failed (the JSON says which).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time

SKIP = 77


def skip(why: str) -> None:
    print(json.dumps({"skipped": why}))
    sys.exit(SKIP)


def import_torch():
    try:
        import torch
    except ImportError as error:
        skip(f"no Python torch ({error})")
    if not torch.cuda.is_available():
        skip("torch has no usable CUDA device")
    if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        skip(f"torch {torch.__version__} has no CUDAPluggableAllocator (needs 2.0 or newer)")
    return torch


def use_plimsoll(torch, so: str):
    if not so or not os.path.exists(so):
        skip(f"libplimsoll_torch_cuda.so not found at {so!r}; build the bundle (scripts/gpu-bundle.sh)")
    allocator = torch.cuda.memory.CUDAPluggableAllocator(so, "plimsoll_torch_malloc", "plimsoll_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    library = ctypes.CDLL(so)
    library.plimsoll_torch_cuda_stats_json.restype = ctypes.c_char_p
    library.plimsoll_torch_cuda_empty_cache.restype = ctypes.c_longlong
    library.plimsoll_torch_cuda_reset_peak.restype = ctypes.c_int
    return library


def stats(library, device: int = 0) -> dict:
    text = library.plimsoll_torch_cuda_stats_json(device)
    return json.loads(text) if text else {}


def train(torch, steps: int) -> dict:
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda")
    vocab, width, length, batch = 512, 256, 64, 32
    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, width),
        torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0,
                                                                     batch_first=True), num_layers=4),
        torch.nn.Linear(width, vocab)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    # A learnable task: predict the next token of a sequence that counts up from a random start.
    def make_batch():
        start = torch.randint(0, vocab, (batch, 1), generator=generator)
        tokens = (start + torch.arange(length + 1)) % vocab
        return tokens[:, :-1].pin_memory(), tokens[:, 1:].pin_memory()
    copy_stream = torch.cuda.Stream()
    losses, step_ms = [], []
    for _ in range(steps):
        inputs, targets = make_batch()
        with torch.cuda.stream(copy_stream):
            inputs_gpu = inputs.to(device, non_blocking=True)
            targets_gpu = targets.to(device, non_blocking=True)
        torch.cuda.current_stream().wait_stream(copy_stream)
        # Allocated on the copy stream, used on the current one: tell the allocator (as PyTorch's docs ask).
        inputs_gpu.record_stream(torch.cuda.current_stream())
        targets_gpu.record_stream(torch.cuda.current_stream())
        torch.cuda.synchronize()
        began = time.perf_counter()
        logits = model(inputs_gpu)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets_gpu.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        step_ms.append((time.perf_counter() - began) * 1000)
    model.eval()
    with torch.no_grad():
        inputs, targets = make_batch()
        predicted = model(inputs.to(device)).argmax(-1).cpu()
        accuracy = (predicted == targets).float().mean().item()
    ordered = sorted(step_ms[3:]) or sorted(step_ms)
    return {"losses": losses, "held_out_accuracy": accuracy, "step_ms_median": ordered[len(ordered) // 2],
            "peak_allocated_bytes": torch.cuda.max_memory_allocated() if hasattr(torch.cuda, "max_memory_allocated")
            else None}


def calls(torch, library) -> dict:
    result: dict = {"failures": []}
    def check(condition: bool, what: str) -> None:
        if not condition:
            result["failures"].append(what)
    x = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")  # 64 MiB
    y = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
    before = stats(library)
    check(before.get("allocated_bytes.all.current", 0) >= (320 << 20), f"stats after two tensors: {before}")
    del y
    torch.cuda.synchronize()
    released = library.plimsoll_torch_cuda_empty_cache(0)
    after = stats(library)
    check(released >= (256 << 20), f"empty_cache gave back {released} bytes, expected at least 256 MiB")
    check(after["reserved_bytes"] < before["reserved_bytes"], f"reserved did not drop: {before} -> {after}")
    check(library.plimsoll_torch_cuda_reset_peak(0) == 0, "reset_peak refused device 0")
    check(stats(library)["allocated_bytes.all.peak"] == stats(library)["allocated_bytes.all.current"],
          "the peak did not start again from the current value")
    check(library.plimsoll_torch_cuda_empty_cache(7) == -1, "empty_cache of a device never used is not -1")
    limit = stats(library)["limit_bytes"]
    try:
        torch.empty(limit + (1 << 30), dtype=torch.uint8, device="cuda")
        check(False, "an allocation over the limit succeeded")
    except torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else RuntimeError:
        pass
    z = torch.ones(1 << 20, device="cuda")
    check(z.sum().item() == float(1 << 20), "allocating after the out-of-memory error failed")
    del x, z
    result["stats"] = stats(library)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["train", "calls"])
    parser.add_argument("--allocator", choices=["plimsoll", "native"], default="plimsoll")
    parser.add_argument("--so", default=os.environ.get("PLIMSOLL_TORCH_CUDA_SO", ""))
    parser.add_argument("--steps", type=int, default=30)
    arguments = parser.parse_args()
    torch = import_torch()
    library = use_plimsoll(torch, arguments.so) if arguments.allocator == "plimsoll" or arguments.what == "calls" \
        else None
    out: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "allocator": arguments.allocator}
    if arguments.what == "train":
        out.update(train(torch, arguments.steps))
        if library is not None:
            out["plimsoll_stats"] = stats(library)
    else:
        out.update(calls(torch, library))
    print(json.dumps(out))
    return 1 if out.get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
