"""`with plimsoll.device(...)` and `with plimsoll.tag(...)`: route this thread's NumPy arrays and CPU tensors."""
import contextlib
import sys

from . import _plimsoll


def _torch_module():
    # Only when plimsoll's torch hook was loaded (plimsoll.install(torch=True) or `plimsoll run`).
    return sys.modules.get("plimsoll._plimsoll_torch")


@contextlib.contextmanager
def device(name):
    """This thread's arrays and CPU tensors come from device `name` ("cpu", "cpu/1") inside the block."""
    canonical = _plimsoll.device_name(name)
    previous = _plimsoll._set_thread_device(canonical)
    torch_hook = _torch_module()
    scope = torch_hook.DeviceScope(canonical) if torch_hook is not None else None
    if scope is not None:
        scope.__enter__()
    try:
        yield canonical
    finally:
        if scope is not None:
            scope.__exit__(None, None, None)
        _plimsoll._set_thread_device(previous)


@contextlib.contextmanager
def tag(name):
    """This thread's arrays and CPU tensors are counted under tag `name` inside the block (stats()["tags"])."""
    previous = _plimsoll._set_thread_tag(name)
    torch_hook = _torch_module()
    scope = torch_hook.TagScope(name) if torch_hook is not None else None
    if scope is not None:
        scope.__enter__()
    try:
        yield name
    finally:
        if scope is not None:
            scope.__exit__(None, None, None)
        _plimsoll._set_thread_tag(previous)
