"""Cost per NumPy allocation (np.empty(1024) and its free) under plimsoll, by what is switched on: NumPy's own
handler, plimsoll's handler, plimsoll's handler recorded without call sites, and recorded with Python call sites.
Interleaved repetitions; prints the median ns per allocate+free of each, as one JSON line.
    PYTHONPATH=build/python /usr/bin/python3 bench/python/alloc_cost.py [--count 200000] [--reps 7]"""
import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

import plimsoll


def loop(count):
    start = time.perf_counter_ns()
    for _ in range(count):
        np.empty(1024)
    return (time.perf_counter_ns() - start) / count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    results = {"numpy": [], "plimsoll": [], "plimsoll+recording": [], "plimsoll+recording+python_sites": []}
    plimsoll.install(numpy=True, torch=False)
    for rep in range(args.reps):
        for name in results:
            if name == "numpy":
                plimsoll.uninstall()
                results[name].append(loop(args.count))
                plimsoll.install(numpy=True, torch=False)
                continue
            recording = None
            if name != "plimsoll":
                recording = plimsoll.record(os.path.join(folder, f"{rep}.plimsoll"),
                                            call_sites=name.endswith("python_sites"))
            results[name].append(loop(args.count))
            if recording is not None:
                recording.close()
    print(json.dumps({name: round(statistics.median(values), 1) for name, values in results.items()}))


if __name__ == "__main__":
    main()
