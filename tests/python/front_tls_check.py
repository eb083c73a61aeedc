"""The per-thread caches' thread-locals are initial-exec in the shared objects (src/engine/thread_cache.cpp): the
front's hot functions in libplimsoll_python.so call no __tls_get_addr, and a fresh interpreter still imports the
module (dlopen of a library with static TLS) and serves allocations from a thread cache.
Usage: front_tls_check.py LIBPLIMSOLL_PYTHON_SO (ctest label python). Exit 77 (skip) without objdump."""
import os
import shutil
import subprocess
import sys

HOT = ("ThreadCaches::allocate_or(unsigned long, unsigned short, unsigned long (*)(void*, unsigned long, unsigned "
       "short), void*)",
       "ThreadCaches::deallocate_handed(unsigned long, plimsoll::engine::HandedTable::Found)")


def functions_calling_tls_get_addr(library):
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", library], check=True,
                             capture_output=True, text=True).stdout
    calling, current = set(), None
    for line in listing.splitlines():
        if line.endswith(">:"):
            current = line[line.index("<") + 1:-2]
        elif "call" in line and "__tls_get_addr" in line and current is not None:
            calling.add(current)
    return calling, listing


def main(library):
    if shutil.which("objdump") is None:
        print("objdump (binutils) is not installed: skipped")
        return 77
    calling, listing = functions_calling_tls_get_addr(library)
    for hot in HOT:
        if hot not in listing:
            print(f"FAIL: {hot} is not in {library}; update this check's names")
            return 1
        if any(name.endswith(hot) for name in calling):
            print(f"FAIL: {hot} calls __tls_get_addr (general-dynamic TLS): give the front's thread-locals "
                  f"[[gnu::tls_model(\"initial-exec\")]] again")
            return 1
    probe = ("import plimsoll; plimsoll.configure('cpu', thread_cache='8MiB'); "
             "print(plimsoll._plimsoll.device_summary('cpu'))")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(library))))
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    if run.returncode != 0 or "thread cache 8.00 MiB" not in run.stdout:
        print(f"FAIL: a fresh interpreter could not import plimsoll with a thread cache:\n{run.stdout}{run.stderr}")
        return 1
    print("ok: the front's hot functions read their thread-locals without __tls_get_addr; import works")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: front_tls_check.py LIBPLIMSOLL_PYTHON_SO")
    sys.exit(main(sys.argv[1]))
