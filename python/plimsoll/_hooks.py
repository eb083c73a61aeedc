"""Hooks that put NumPy arrays and PyTorch tensors on plimsoll devices (docs/python.md, "Hooks").

install() installs what it can and says, in hook_notes(), which hook is off and why; it raises only for bad
arguments. Steps: an optimizer's step() marks a training-step boundary once the torch hook is on.
"""
import os
import sys

from . import _plimsoll

_notes = []
_state = {"numpy": False, "torch": False, "steps": False, "cuda": False}
# The libtorch plimsoll_torch was built against (written by the build), or None when it was not built.
try:
    from ._build import TORCH_VERSION as _BUILT_TORCH, TORCH_CUDA_LIBRARY as _TORCH_CUDA_LIBRARY
except ImportError:  # pragma: no cover - a package copied without its build file
    _BUILT_TORCH, _TORCH_CUDA_LIBRARY = None, ""


def _note(text):
    if text not in _notes:
        _notes.append(text)


def hook_notes():
    """Why each hook that is off is off (one sentence each), and other things install() had to say."""
    return list(_notes)


def installed():
    """Which hooks are on: {"numpy": bool, "torch": bool, "steps": bool, "cuda": bool}."""
    return dict(_state)


def _attach_oom_report_to_numpy(numpy):
    # NumPy raises its own MemoryError when the handler returns NULL; plimsoll's report is added to its message.
    try:
        from numpy.core._exceptions import _ArrayMemoryError
    except ImportError:
        return
    if getattr(_ArrayMemoryError, "_plimsoll", False):
        return
    original_init, original_str = _ArrayMemoryError.__init__, _ArrayMemoryError.__str__

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.plimsoll_report = _plimsoll.take_last_oom()
        if self.plimsoll_report:
            from . import _run_child
            _run_child.note_oom(self.plimsoll_report)

    def __str__(self):
        text = original_str(self)
        report = getattr(self, "plimsoll_report", "")
        return text + "\n" + report if report else text

    _ArrayMemoryError.__init__, _ArrayMemoryError.__str__, _ArrayMemoryError._plimsoll = __init__, __str__, True


def install_numpy(device="cpu"):
    numpy = sys.modules.get("numpy") or __import__("numpy")
    _plimsoll.install_numpy(device)  # raises InvalidState naming the reason for a NumPy without NEP 49
    _attach_oom_report_to_numpy(numpy)
    _follow_new_threads()
    _state["numpy"] = True


def _follow_new_threads():
    # NumPy's handler is a context variable and each thread starts with a fresh context (NumPy's default handler):
    # every thread started from now on sets plimsoll's handler first, so batches built by generator or loader
    # threads are counted too.
    import threading
    if getattr(threading.Thread._bootstrap_inner, "_plimsoll", False):
        return
    original = threading.Thread._bootstrap_inner

    def _bootstrap_inner(self):
        if _state["numpy"]:
            try:
                _plimsoll.install_numpy_in_this_thread()
            except _plimsoll.Error:
                pass
        original(self)

    _bootstrap_inner._plimsoll = True
    threading.Thread._bootstrap_inner = _bootstrap_inner


def _torch_version(torch):
    return tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2] if part.isdigit())


def install_torch(device="cpu"):
    import torch
    if _BUILT_TORCH is None:
        raise _plimsoll.InvalidState("this plimsoll was built without libtorch, so the torch hook is off; install "
                                     "libtorch-dev and rebuild")
    running, built = torch.__version__.split("+")[0], _BUILT_TORCH
    if running.split(".")[:2] != built.split(".")[:2]:
        raise _plimsoll.InvalidState(f"the running torch is {running}, but plimsoll_torch was built against libtorch "
                                     f"{built}; the torch CPU hook is off (tensors use torch's allocator): rebuild "
                                     f"plimsoll against this torch")
    from . import _plimsoll_torch
    sys.modules.setdefault("plimsoll._plimsoll_torch", _plimsoll_torch)
    _plimsoll_torch.install(device)
    _state["torch"] = True
    _install_step_hook(torch)


def _install_step_hook(torch):
    if _state["steps"]:
        return
    optim = torch.optim
    register = getattr(getattr(optim, "optimizer", None), "register_optimizer_step_post_hook", None)
    if register is not None:  # PyTorch 2.0+: a global hook
        register(lambda *args, **kwargs: _plimsoll.step())
    else:  # PyTorch 1.x: wrap each optimizer class's step() once, when its first instance is made
        original_init = optim.Optimizer.__init__

        def __init__(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            cls = type(self)
            if not getattr(cls.step, "_plimsoll_step", False):
                inner = cls.step

                def step(opt, *a, **k):
                    result = inner(opt, *a, **k)
                    _plimsoll.step()
                    return result

                step._plimsoll_step = True
                step.__doc__, step.__name__ = inner.__doc__, inner.__name__
                cls.step = step

        optim.Optimizer.__init__ = __init__
    _state["steps"] = True


def install_cuda(limits):
    """CUDA tensors from libplimsoll_torch_cuda.so through CUDAPluggableAllocator; limits: {"cuda:0": bytes}."""
    import torch
    version = _torch_version(torch)
    if version < (2, 0):
        raise _plimsoll.InvalidState(f"CUDA budgets need PyTorch 2.0 or newer (CUDAPluggableAllocator); this is "
                                     f"torch {torch.__version__}, so CUDA tensors use PyTorch's own allocator")
    if not _TORCH_CUDA_LIBRARY or not os.path.exists(_TORCH_CUDA_LIBRARY):
        raise _plimsoll.InvalidState("libplimsoll_torch_cuda.so was not built (target plimsoll_torch_cuda); CUDA "
                                     "tensors use PyTorch's own allocator")
    # The .so has its own runtime, configured from the environment when it first allocates.
    import json
    import tempfile
    config = {"devices": {name: {"memory_limit": str(limit)} for name, limit in limits.items()}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(config, file)
    os.environ["PLIMSOLL_CONFIG"] = file.name
    allocator = torch.cuda.memory.CUDAPluggableAllocator(_TORCH_CUDA_LIBRARY, "plimsoll_torch_malloc",
                                                         "plimsoll_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    _state["cuda"] = True


def install(numpy=True, torch=True, device="cpu"):
    """Puts NumPy's array data and PyTorch's CPU tensors on plimsoll device `device`, from now on.

    Imports numpy / torch when asked for. A hook that cannot be installed (package missing or too old, a torch
    that is not the libtorch plimsoll_torch was built against) is left off, with the reason in hook_notes();
    returns installed().
    """
    for name, wanted, hook in (("numpy", numpy, install_numpy), ("torch", torch, install_torch)):
        if not wanted or _state[name]:
            continue
        try:
            hook(device)
        except ImportError as error:
            _note(f"{name} hook off: {name} cannot be imported ({error})")
        except _plimsoll.Error as error:
            _note(f"{name} hook off: {error}")
    return installed()


def uninstall():
    """Takes the NumPy and torch hooks out; arrays and tensors made under them stay valid."""
    if _state["numpy"]:
        _plimsoll.uninstall_numpy()
        _state["numpy"] = False
    if _state["torch"]:
        sys.modules["plimsoll._plimsoll_torch"].uninstall()
        _state["torch"] = False
