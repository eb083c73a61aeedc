#!/usr/bin/env python3
"""Markdown table of plimsoll_replay_bench JSON lines: medians over processes, ratios against glibc malloc."""
import collections
import json
import statistics
import sys

MIB = 1024 * 1024
COLUMNS = ["trace", "allocator", "runs", "mean ns/op", "vs glibc", "p50 ns/op", "p99 ns/op", "vs glibc",
           "cold ns/op", "peak RSS MiB", "vs glibc", "RSS / live", "peak reserved MiB", "reserved / live"]


def load(path):
    runs = collections.defaultdict(list)
    with open(path) as lines:
        for line in lines:
            if line.strip():
                run = json.loads(line)
                runs[(run["trace"], run["allocator"])].append(run)
    return runs


def main(path):
    runs = load(path)

    def med(key, field):
        values = [run[field] for run in runs.get(key, []) if run.get(field) is not None]
        return statistics.median(values) if values else None

    def ratio(key, field):
        value, base = med(key, field), med((key[0], "glibc"), field)
        return f"{value / base:.2f}x" if value is not None and base else "-"

    print("| " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---:|" * (len(COLUMNS) - 2))
    # Runs come in the order run_replay.sh made them: keep the allocators in that order within each trace.
    for key in sorted(runs, key=lambda key: (key[0], list(runs).index(key))):
        trace, allocator = key
        reserved = med(key, "peak_reserved")
        cells = [trace, allocator, str(len(runs[key])),
                 f"{med(key, 'mean_ns'):.1f}", ratio(key, "mean_ns"),
                 f"{med(key, 'p50_ns'):.0f}", f"{med(key, 'p99_ns'):.0f}", ratio(key, "p99_ns"),
                 f"{med(key, 'cold_mean_ns'):.1f}",
                 f"{med(key, 'peak_rss_bytes') / MIB:.0f}", ratio(key, "peak_rss_bytes"),
                 f"{med(key, 'peak_rss_bytes') / med(key, 'trace_peak_requested_bytes'):.2f}",
                 "-" if reserved is None else f"{reserved / MIB:.0f}",
                 # Peak reserved over peak live: what a device budget must hold per byte the program uses.
                 "-" if reserved is None else f"{reserved / med(key, 'trace_peak_requested_bytes'):.2f}"]
        print("| " + " | ".join(cells) + " |")

    # Recording cost: each replayed operation writes one event (maps add a few), so the difference in mean
    # ns/op between a recorded run and the same allocator unrecorded is the cost per recorded event.
    recorded = [key for key in runs if "+record" in key[1]]
    if recorded:
        print()
        print("| trace | recorded as | mean ns/op | unrecorded ns/op | ns per event | events/op |")
        print("|---|---|---:|---:|---:|---:|")
        for key in sorted(recorded):
            trace, allocator = key
            base = (trace, allocator.split("+")[0])
            if med(base, "mean_ns") is None:
                continue
            events = med(key, "recorded_events") / (med(key, "ops") * (1 + med(key, "reps") + 1))
            print(f"| {trace} | {allocator} | {med(key, 'mean_ns'):.1f} | {med(base, 'mean_ns'):.1f} | "
                  f"{(med(key, 'mean_ns') - med(base, 'mean_ns')) / events:.1f} | {events:.3f} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: replay_table.py RESULTS.jsonl (JSON lines from plimsoll_replay_bench)")
    main(sys.argv[1])
