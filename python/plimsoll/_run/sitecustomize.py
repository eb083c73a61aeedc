"""Placed first on the child's PYTHONPATH by `plimsoll run`: starts plimsoll, then runs the sitecustomize this one
hides (if any), so an environment's own site customization still happens."""
import importlib.util
import os
import sys


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_plimsoll_chained_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


try:
    from plimsoll import _run_child
    _run_child.start()
except Exception as error:  # never stop the user's program: say why plimsoll is not there
    sys.stderr.write(f"plimsoll run: plimsoll could not start in this Python ({type(error).__name__}: {error}); "
                     f"the program runs without it\n")
_chain_next_sitecustomize()
