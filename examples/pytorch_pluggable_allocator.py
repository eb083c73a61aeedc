#!/usr/bin/env python3
"""PyTorch's CUDA memory from plimsoll, through torch.cuda.memory.CUDAPluggableAllocator (docs/pytorch.md).

    PLIMSOLL_MEMORY_LIMIT=4GiB python3 examples/pytorch_pluggable_allocator.py build/libplimsoll_torch_cuda.so

The library path comes from the first argument or PLIMSOLL_TORCH_CUDA_SO. Configure plimsoll with its usual
environment variables (PLIMSOLL_MEMORY_LIMIT, PLIMSOLL_GROWTH, ...; PLIMSOLL_TORCH_RECORD=run.plimsoll writes a
trace for `plimsoll timeline`). Exits 77 (skipped) when torch, CUDA or the library is missing.
"""
import json
import os
import sys

SKIP = 77


def skip(why):
    print(f"skipped: {why}")
    sys.exit(SKIP)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PLIMSOLL_TORCH_CUDA_SO", "")
    if not path:
        skip("pass the path of libplimsoll_torch_cuda.so (argument or PLIMSOLL_TORCH_CUDA_SO)")
    if not os.path.exists(path):
        skip(f"{path} does not exist; build the plimsoll_torch_cuda target first")
    try:
        import torch
    except ImportError:
        skip("PyTorch is not installed (pip install torch, with CUDA)")
    if not hasattr(torch.cuda, "memory") or not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        skip(f"torch {torch.__version__} has no CUDAPluggableAllocator (needs 2.0 or newer)")
    if not torch.cuda.is_available():
        skip("no CUDA device visible to PyTorch")

    # Must come before the first CUDA allocation of the process: PyTorch refuses to swap allocators later.
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "plimsoll_torch_malloc", "plimsoll_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)

    # A small training step: every CUDA tensor below lives in plimsoll's heap.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(256, 512, device="cuda")
    labels = torch.randint(0, 10, (256,), device="cuda")
    for step in range(5):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")
    torch.cuda.synchronize()

    # plimsoll's own counters for the device (in use, peak, reserved, parked frees).
    import ctypes
    library = ctypes.CDLL(path)
    library.plimsoll_torch_cuda_stats_json.restype = ctypes.c_char_p
    library.plimsoll_torch_cuda_stats_json.argtypes = [ctypes.c_int]
    raw = library.plimsoll_torch_cuda_stats_json(torch.cuda.current_device())
    if raw is None:
        print("plimsoll did not serve this device (see the message above on stderr)")
        return 1
    stats = json.loads(raw)
    print("plimsoll:", json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
