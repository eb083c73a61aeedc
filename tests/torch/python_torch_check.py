#!/usr/bin/env python3
"""What a Python PyTorch user sees with plimsoll as the CPU allocator (plimsoll_torch, loaded through
python_shim.cpp): torch.profiler with profile_memory=True counts plimsoll's CPU bytes, and a host out-of-memory
is a RuntimeError carrying plimsoll's report, never torch.cuda.OutOfMemoryError.

    python3 tests/torch/python_torch_check.py path/to/libplimsoll_torch_python_shim.so

Exit status 0: passed; 1: a check failed (the message says which); 77: skipped (no Python torch), as ctest's
SKIP_RETURN_CODE expects.
"""

import ctypes
import os
import sys

SKIP = 77
BYTES = 4 << 20  # one 4 MiB float32 tensor: 1 Mi floats


def fail(message: str) -> None:
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    if len(sys.argv) != 2:
        fail("usage: python_torch_check.py SHIM.so")
    try:
        import torch  # noqa: PLC0415 (the skip is the point)
    except ImportError as error:
        print(f"SKIP: Python torch is not installed ({error}); install Debian's python3-torch", file=sys.stderr)
        sys.exit(SKIP)
    torch.set_num_threads(1)
    shim = ctypes.CDLL(os.path.abspath(sys.argv[1]))
    shim.plimsoll_test_owns.argtypes = [ctypes.c_void_p]

    if shim.plimsoll_test_install() != 0:
        fail("plimsoll_torch did not install")
    probe = torch.empty(16)
    if shim.plimsoll_test_owns(probe.data_ptr()) != 1:
        fail("a CPU tensor made after install did not come from plimsoll: Python torch uses another libc10")
    del probe

    # The profiler: plimsoll's allocation and free of one 4 MiB tensor, as DefaultCPUAllocator's would be.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        tensor = torch.empty(BYTES // 4, dtype=torch.float32)
        owned = shim.plimsoll_test_owns(tensor.data_ptr())
        del tensor
    if owned != 1:
        fail("the profiled tensor did not come from plimsoll")
    sizes = [event.cpu_memory_usage for event in profile.events() if event.cpu_memory_usage != 0]
    if BYTES not in sizes or -BYTES not in sizes:
        fail(f"torch.profiler saw CPU memory events {sizes[:20]}, not +{BYTES} and -{BYTES}")
    print(f"profiler: saw +{BYTES} and -{BYTES} bytes of plimsoll's CPU memory")

    # A host OOM: a 32 MiB tensor on the 8 MiB device.
    if shim.plimsoll_test_install_small() != 0:
        fail("plimsoll_torch did not switch to the small device")
    cuda_oom = getattr(torch.cuda, "OutOfMemoryError", None)
    try:
        torch.empty(8 << 20, dtype=torch.float32)
        fail("32 MiB fit in an 8 MiB device")
    except Exception as error:  # noqa: BLE001 (the type is what is checked)
        if cuda_oom is not None and isinstance(error, cuda_oom):
            fail(f"a host out-of-memory raised torch.cuda.OutOfMemoryError: {error}")
        if type(error) is not RuntimeError:
            fail(f"a host out-of-memory raised {type(error).__name__}, not RuntimeError: {error}")
        if "plimsoll: out of memory on cpu/2" not in str(error):
            fail(f"the RuntimeError does not carry plimsoll's report: {error}")
    print("out of memory: RuntimeError with plimsoll's report")
    if shim.plimsoll_test_overridden() != 0:
        fail("installed_allocator_overridden() with nothing else installed")


if __name__ == "__main__":
    main()
