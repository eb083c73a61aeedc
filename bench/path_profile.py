#!/usr/bin/env python3
"""Instructions per operation, split by path, from callgrind profiles of plimsoll_replay_bench (bench/run_path_profile.sh).

Reads TRACE.callgrind and TRACE.json pairs from a directory and prints one markdown table: how many of a pass's
operations each path serves, and what each costs in instructions (exact counts: they do not depend on the machine's
load, unlike the nanoseconds of bench/run_ab.sh). Paths: the front's hit (ThreadCaches::allocate_or and
deallocate_handed, the misses' slow sides included, less the device's path a declined request takes through
Allocator::front_declined), the device path (Heap::allocate and Allocator::deallocate_in_heap,
whose Heap::deallocate is inside), the device's entry points (Allocator::allocate and deallocate, own instructions: the
size check, the front's table lookup on a free, and on the device path the lock, tag counts and ring, inlined), and
the replay loop itself.
"""
import collections
import json
import pathlib
import re
import sys

# Each path: the functions whose calls it counts and whose cost (inclusive of what they call) it sums.
PATHS = {
    "front_alloc": "plimsoll::engine::ThreadCaches::allocate_or(",
    "front_free": "plimsoll::engine::ThreadCaches::deallocate_handed(",
    "heap_alloc": "plimsoll::engine::Heap::allocate(unsigned long, unsigned short)",
    "heap_free": "plimsoll::Allocator::deallocate_in_heap(void*)",
    "heap_free_inner": "plimsoll::engine::Heap::deallocate(",
}
# What the front calls when it declines: the device's own path (counted there, so not in the front's cost).
FRONT_DECLINED = "plimsoll::Allocator::front_declined("
ENTRY = ("plimsoll::Allocator::allocate(unsigned long, unsigned short)", "plimsoll::Allocator::deallocate(void*)")
LOOP = "(anonymous namespace)::run("


def parse(path):
    """Self cost per function; calls into and inclusive cost of those calls per callee."""
    names, self_cost = {}, collections.Counter()
    calls, inclusive = collections.Counter(), collections.Counter()
    current = callee = None
    pending = None

    def name(field):
        match = re.match(r"\((\d+)\)(?: (.*))?", field)
        if not match:
            return field
        if match.group(2):
            names[match.group(1)] = match.group(2)
        return names[match.group(1)]

    for line in pathlib.Path(path).read_text().splitlines():
        if line.startswith("fn="):
            current = name(line[3:])
        elif line.startswith("cfn="):
            callee = name(line[4:])
        elif line.startswith("calls="):
            pending = int(line[6:].split()[0])
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            parts = line.split()
            if len(parts) < 2:
                continue
            cost = int(parts[1])
            if pending is not None:
                calls[callee] += pending
                inclusive[callee] += cost
                pending = None
            else:
                self_cost[current] += cost
    return self_cost, calls, inclusive


def matching(counter, key):
    # Exact names first (a clone such as "[clone .cold]" or a recursion "'2" is not the hot function itself).
    return sum(v for k, v in counter.items() if k.startswith(key) and "clone" not in k and not k.endswith("'2"))


def row(directory, trace):
    self_cost, calls, inclusive = parse(directory / f"{trace}.callgrind")
    meta = json.loads((directory / f"{trace}.json").read_text())
    ops = meta["ops"] * (meta["reps"] + 2)  # the cold pass, the warm passes, and the one timed per operation
    per_call = {p: matching(inclusive, f) / max(matching(calls, f), 1) for p, f in PATHS.items()}
    per_call["front_alloc"] -= matching(inclusive, FRONT_DECLINED) / max(matching(calls, PATHS["front_alloc"]), 1)
    share = {p: matching(calls, f) / ops for p, f in PATHS.items()}
    entry = sum(matching(self_cost, f) for f in ENTRY) / ops
    loop = matching(self_cost, LOOP) / ops
    front = share["front_alloc"] * per_call["front_alloc"] + share["front_free"] * per_call["front_free"]
    heap = share["heap_alloc"] * per_call["heap_alloc"] + share["heap_free"] * per_call["heap_free"]
    return (f"| {trace} | {meta['ops']} | {100 * share['front_alloc'] * 2:.1f}% | {per_call['front_alloc']:.0f} / "
            f"{per_call['front_free']:.0f} | {100 * share['heap_alloc'] * 2:.1f}% | {per_call['heap_alloc']:.0f} / "
            f"{per_call['heap_free']:.0f} ({per_call['heap_free_inner']:.0f}) | {front:.1f} | {heap:.1f} | {entry:.1f} | "
            f"{loop:.1f} | {front + heap + entry + loop:.1f} |")


def main():
    directory = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    traces = sorted(p.name[: -len(".callgrind")] for p in directory.glob("*.callgrind"))
    if not traces:
        sys.exit(f"error: no TRACE.callgrind files in {directory}; run bench/run_path_profile.sh first")
    print("| trace | ops a pass | front hits | front alloc / free instr | device path | heap alloc / free instr "
          "(Heap::deallocate) | front instr/op | device instr/op | entry instr/op | loop instr/op | total instr/op |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for trace in traces:
        print(row(directory, trace))


if __name__ == "__main__":
    main()
