#!/usr/bin/env python3
"""Markdown table of plimsoll_replay_bench JSON lines: medians over processes, ratios against glibc malloc."""
import collections
import json
import statistics
import sys

MIB = 1024 * 1024


def main(path):
    runs = collections.defaultdict(list)
    order = []
    with open(path) as lines:
        for line in lines:
            if line.strip():
                run = json.loads(line)
                key = (run["trace"], run["allocator"])
                if key not in runs:
                    order.append(key)
                runs[key].append(run)

    def med(key, field):
        values = [run[field] for run in runs[key] if run.get(field) is not None]
        return statistics.median(values) if values else None

    def ratio(value, base):
        return f"{value / base:.2f}x" if value is not None and base else "-"

    print("| trace | allocator | runs | mean ns/op | vs glibc | p99 ns/op | vs glibc | cold ns/op | peak RSS MiB "
          "| vs glibc | peak reserved MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for trace, allocator in sorted(order, key=lambda key: (key[0], order.index(key))):
        key = (trace, allocator)
        base = (trace, "glibc")
        mean, p99, rss = med(key, "mean_ns"), med(key, "p99_ns"), med(key, "peak_rss_bytes")
        base_mean = med(base, "mean_ns") if base in runs else None
        base_p99 = med(base, "p99_ns") if base in runs else None
        base_rss = med(base, "peak_rss_bytes") if base in runs else None
        reserved = med(key, "peak_reserved")
        print(f"| {trace} | {allocator} | {len(runs[key])} | {mean:.1f} | {ratio(mean, base_mean)} | {p99:.0f} "
              f"| {ratio(p99, base_p99)} | {med(key, 'cold_mean_ns'):.1f} | {rss / MIB:.0f} | {ratio(rss, base_rss)} "
              f"| {'-' if reserved is None else f'{reserved / MIB:.0f}'} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: replay_table.py RESULTS.jsonl (JSON lines from plimsoll_replay_bench)")
    main(sys.argv[1])
