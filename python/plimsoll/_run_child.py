"""The child's side of `plimsoll run` (started by _run/sitecustomize.py; docs/python.md, "How run works").

Environment from the parent (src/cli/run_command.cpp):
  PLIMSOLL_RUN_DIR      folder for this run: the recording, stats.json, notes of forked/spawned processes
  PLIMSOLL_RUN_RECORD   the recording's path (steps and Python call sites), streamed while the job runs
  PLIMSOLL_RUN_DEVICES  "cpu=4294967296;cuda:0=10737418240" (bytes), already checked by the parent
  PLIMSOLL_RUN_GROWTH   a growth policy for the devices, or empty
  PLIMSOLL_RUN_RELEASE  release threshold of host devices, in bytes
  PLIMSOLL_RUN_SITES    "1": record Python call sites (the default), "0": none (plimsoll run --no-call-sites)
The first process to start claims the run and records it; processes it starts (multiprocessing "spawn",
subprocess running python) are governed by the same limits, each on its own, and leave a note instead.
"""
import atexit
import json
import os
import sys

from . import _plimsoll
from . import _hooks

_run = {"dir": None, "recording": None, "main": False, "finished": False, "ooms": [], "devices": ["cpu"],
        "cuda": {}, "forked": False}


def note_oom(report):
    if len(_run["ooms"]) < 16:
        _run["ooms"].append(report)


def _write_note(kind):
    try:
        with open(os.path.join(_run["dir"], f"{kind}-{os.getpid()}"), "w") as file:
            file.write(" ".join(sys.argv) + "\n")
    except OSError:
        pass


def _parse_devices(text):
    limits = {}
    for entry in filter(None, text.split(";")):
        name, _, size = entry.partition("=")
        limits[name] = int(size) if size else None
    return limits


def finish():
    """Writes stats.json and closes the recording; at exit, and before os._exit."""
    if _run["finished"] or not _run["main"]:
        return
    _run["finished"] = True
    if _run["cuda"] and not _hooks.installed()["cuda"] and "torch" not in sys.modules:
        _hooks._note(f"cuda hook off: the program never imported torch, so the limits of "
                     f"{', '.join(sorted(_run['cuda']))} were not applied")
    devices = []
    for name in _run["devices"]:
        try:
            devices.append(_plimsoll.stats(name))
        except _plimsoll.Error as error:
            _hooks._note(f"{name}: {error}")
    stats = {"pid": os.getpid(), "devices": devices, "hooks": _hooks.installed(), "notes": _hooks.hook_notes(),
             "ooms": _run["ooms"], "python_sites": _plimsoll.python_sites_supported(), "steps": _plimsoll.current_step()}
    if _run["recording"] is not None:
        try:
            _run["recording"].close()
        except _plimsoll.Error as error:
            stats["notes"].append(f"recording: {error}")
    path = os.path.join(_run["dir"], "stats.json")
    with open(path + ".tmp", "w") as file:
        json.dump(stats, file)
    os.replace(path + ".tmp", path)  # whole or absent: the parent never reads half a file


class _HookOnImport:
    """A meta-path finder: installs the NumPy / torch hook as soon as that package has been imported."""

    def __init__(self):
        self._busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in ("numpy", "torch") or name in self._busy:
            return None
        self._busy.add(name)
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None:
            return spec
        loader, finder = spec.loader, self

        class Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                finder.installed(name)

        spec.loader = Loader()
        return spec

    def installed(self, name):
        if name == "numpy":
            _hooks.install(numpy=True, torch=False)
        else:
            _hooks.install(numpy=False, torch=True)
            if _run["cuda"]:
                try:
                    _hooks.install_cuda(_run["cuda"])
                except _plimsoll.Error as error:
                    _hooks._note(f"cuda hook off: {error}")


def _after_fork_in_child():
    # The recording's file and buffer belong to the parent: a forked child keeps its limits and hooks (its own
    # copy of each device) but is not recorded.
    if _run["recording"] is not None:
        _run["recording"]._abandon()
        _run["recording"] = None
    _run["main"] = False
    _run["forked"] = True
    _write_note("fork")


def start():
    run_dir = os.environ.get("PLIMSOLL_RUN_DIR")
    if not run_dir or _run["dir"] is not None:
        return
    _run["dir"] = run_dir
    limits = _parse_devices(os.environ.get("PLIMSOLL_RUN_DEVICES", ""))
    growth = os.environ.get("PLIMSOLL_RUN_GROWTH") or None
    release = os.environ.get("PLIMSOLL_RUN_RELEASE") or None
    for name, limit in limits.items():
        if name.startswith("cuda"):
            _run["cuda"][name] = limit
            continue
        if name not in _run["devices"]:
            _run["devices"].append(name)
    for name in _run["devices"]:
        _plimsoll.configure(name, memory_limit=limits.get(name), growth=growth,
                            release_threshold=int(release) if release else None)
    try:
        claim = os.open(os.path.join(run_dir, "main.pid"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(claim, str(os.getpid()).encode())
        os.close(claim)
        _run["main"] = True
    except FileExistsError:
        _write_note("subprocess")
    if _run["main"]:
        call_sites = os.environ.get("PLIMSOLL_RUN_SITES", "1") != "0"
        _plimsoll.enable_python_sites(call_sites)
        # A small buffer: a process that dies without exiting loses at most this much of the recording.
        _run["recording"] = _plimsoll.open_recording(os.environ["PLIMSOLL_RUN_RECORD"], _run["devices"], call_sites,
                                                     64 << 10)
        atexit.register(finish)
        real_exit = os._exit

        def _exit(status):
            finish()
            real_exit(status)

        os._exit = _exit
        # An out-of-memory error that ends the program (a tensor's, raised by plimsoll_torch with plimsoll's
        # report as its message) goes into the run's report as well.
        previous_hook = sys.excepthook

        def excepthook(kind, value, traceback):
            if "plimsoll: out of memory" in str(value) and not getattr(value, "plimsoll_report", ""):
                note_oom(str(value))
            previous_hook(kind, value, traceback)

        sys.excepthook = excepthook
        os.register_at_fork(after_in_child=_after_fork_in_child)
    finder = _HookOnImport()
    sys.meta_path.insert(0, finder)
    for name in ("numpy", "torch"):
        if name in sys.modules:  # imported already (by a sitecustomize we chained to)
            finder.installed(name)
