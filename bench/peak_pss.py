#!/usr/bin/env python3
"""Runs a command and samples the memory of its whole process tree while it runs.

    peak_pss.py [--interval SECONDS] [--max-overhead FRACTION] -- COMMAND [ARG...]

Every interval it reads Pss from /proc/PID/smaps_rollup of the command and of each of its descendants (worker
processes included) and sums them; PSS splits each shared page among the processes that map it, so pages a
forked worker shares with its parent count once, not once per process as summed RSS would. The command must
print one JSON line on stdout; this prints that line with the peak of the sum added (peak_pss_bytes), plus the
number of samples, the CPU time the sampling took and the most processes seen at once. A peak shorter than
the interval can be missed; the interval stretches when reading the tree is dear (--max-overhead).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


HAVE_CHILDREN_FILES = os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


def children(pid):
    """Direct children of pid, from /proc/PID/task/*/children (every thread can be a parent)."""
    result = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                result.extend(int(child) for child in f.read().split())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return result


def parents():
    """Every process's parent, from /proc/PID/stat, for kernels without the children files."""
    result = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                result[int(name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
                pass
    return result


def tree(root):
    if not HAVE_CHILDREN_FILES:
        parent_of = parents()
        pids, todo = [], [root]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            todo.extend(child for child, parent in parent_of.items() if parent == pid)
        return pids
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children(pid))
    return pids


def pss_bytes(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=0.05, help="least seconds between samples")
    parser.add_argument("--max-overhead", type=float, default=0.05,
                        help="most CPU time spent sampling, as a fraction of the wall time (stretches the interval)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    if not os.path.exists("/proc/self/smaps_rollup"):
        sys.exit("peak_pss.py: this kernel has no /proc/PID/smaps_rollup (Linux 4.14 or later)")

    # stdout to a file, not a pipe: a command that prints much cannot block on a full pipe while we sample.
    out = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, stdout=out, text=True)
    peak = samples = most_processes = 0
    sampling_cpu_s = 0.0
    while process.poll() is None:
        begin = time.process_time()  # user + system: the kernel's page-table walk for smaps_rollup is system time
        pids = tree(process.pid)
        total = sum(pss_bytes(pid) for pid in pids)
        cost = time.process_time() - begin
        sampling_cpu_s += cost
        peak = max(peak, total)
        most_processes = max(most_processes, len(pids))
        samples += 1
        # A process tree with many mappings (torch) costs milliseconds of kernel time per read: stretch the interval
        # so that sampling takes at most max_overhead of one CPU, taken from the command being measured.
        time.sleep(max(args.interval, cost / args.max_overhead))
    out.seek(0)
    output = out.read()
    if process.returncode != 0:
        sys.exit(f"peak_pss.py: {' '.join(command)} exited with status {process.returncode}")
    lines = [line for line in output.splitlines() if line.strip().startswith("{")]
    if not lines:
        sys.exit(f"peak_pss.py: {' '.join(command)} printed no JSON line")
    result = json.loads(lines[-1])
    result.update({"peak_pss_bytes": peak, "pss_samples": samples, "pss_interval_s": args.interval,
                   "pss_sampling_cpu_s": sampling_cpu_s, "max_processes": most_processes})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
