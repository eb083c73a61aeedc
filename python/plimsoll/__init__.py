"""plimsoll for Python: memory budgets, scopes, steps, recordings and reports (docs/python.md).

    import plimsoll
    plimsoll.install(numpy=True, torch=True, device="cpu")   # arrays and CPU tensors from a plimsoll device
    with plimsoll.device("cpu/1"), plimsoll.tag("activations"):
        ...
    plimsoll.step()                                          # a training-step boundary, for the leak watch
    print(plimsoll.stats("cpu")["peak_in_use_bytes"])

Errors are plimsoll.Error subclasses carrying plimsoll's message; OutOfMemory is also a MemoryError.
"""
from . import _plimsoll
from ._plimsoll import (  # noqa: F401  (the public API)
    Error, InvalidArgument, DeviceUnavailable, InvalidState, InvalidFree, OutOfMemory, PauseError,
    devices, stats, trim, pause, resume, paused, configure, parse_size, format_size, step, current_step, leaks,
    replay, Recording,
)
from . import estimate  # noqa: F401
from ._hooks import install, uninstall, installed, hook_notes  # noqa: F401
from ._scopes import device, tag  # noqa: F401

__all__ = [
    "Error", "InvalidArgument", "DeviceUnavailable", "InvalidState", "InvalidFree", "OutOfMemory", "PauseError",
    "devices", "stats", "trim", "pause", "resume", "paused", "configure", "parse_size", "format_size", "step",
    "current_step", "leaks", "replay", "record", "Recording", "estimate", "install", "uninstall", "installed",
    "hook_notes", "device", "tag",
]


def record(path, devices=("cpu",), call_sites=False, python_sites=True, buffer_bytes=0):
    """Starts recording the devices' events to `path` (docs/recording.md); returns a Recording.

    With call_sites=True every allocation's call site is captured; with python_sites (the default) the site is
    the allocating thread's innermost Python frame, "file.py:LINE", when it has one. Close it with .close() or use
    it as a context manager.
    """
    if call_sites and python_sites:
        _plimsoll.enable_python_sites(True)
    return _plimsoll.open_recording(str(path), list(devices), call_sites, buffer_bytes)


def _recording_enter(self):
    return self


def _recording_exit(self, *exc):
    if not self.closed:
        self.close()


Recording.__enter__ = _recording_enter
Recording.__exit__ = _recording_exit
