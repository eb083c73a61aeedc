#!/usr/bin/env python3
"""Markdown table of bench/run_pipeline_compare.sh's JSON lines: medians over runs, ratios against plimsoll.

One row per loader: samples/s (median over runs, and the range), plimsoll's samples/s over the row's, the median
of the runs' median and p99 batch waits, peak PSS of the process tree (median over runs) and plimsoll's over the
row's; then the issue's targets, each met or missed.
"""
import collections
import json
import statistics
import sys

MIB = 1024 * 1024
NAMES = {"plimsoll": "plimsoll::Pipeline", "libtorch": "libtorch data loader", "pytorch": "PyTorch DataLoader"}
# (other loader, what is compared, plimsoll / other must be at least (>=) or at most (<=) this)
TARGETS = [("libtorch", "samples_per_s", ">=", 1.0), ("pytorch", "samples_per_s", ">=", 1.0),
           ("pytorch", "peak_pss_bytes", "<=", 0.5)]


def main(path):
    runs = collections.OrderedDict()
    with open(path) as lines:
        for line in lines:
            if line.strip():
                run = json.loads(line)
                runs.setdefault(run["loader"], []).append(run)
    if "plimsoll" not in runs:
        sys.exit(f"{path}: no plimsoll runs")

    def med(loader, field):
        return statistics.median(run[field] for run in runs[loader])

    first = runs["plimsoll"][0]
    print(f"batch {first['batch_size']}, {first['workers']} workers, prefetch {first['prefetch']} per worker, "
          f"{first['timed_epochs']} timed epochs after 1 warm-up, consumer step {first['step_us']:g} us")
    print()
    print("| loader | runs | samples/s (median) | min-max | plimsoll / this | wait p50 us | wait p99 us | "
          "peak PSS MiB | plimsoll / this | mean pixel |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for loader, loader_runs in runs.items():
        rates = [run["samples_per_s"] for run in loader_runs]
        cells = [NAMES.get(loader, loader), str(len(loader_runs)), f"{med(loader, 'samples_per_s'):,.0f}",
                 f"{min(rates):,.0f}-{max(rates):,.0f}",
                 f"{med('plimsoll', 'samples_per_s') / med(loader, 'samples_per_s'):.2f}x",
                 f"{med(loader, 'wait_p50_us'):,.1f}", f"{med(loader, 'wait_p99_us'):,.1f}",
                 f"{med(loader, 'peak_pss_bytes') / MIB:.0f}",
                 f"{med('plimsoll', 'peak_pss_bytes') / med(loader, 'peak_pss_bytes'):.2f}x",
                 f"{med(loader, 'mean_pixel'):.4f}"]
        print("| " + " | ".join(cells) + " |")

    print()
    for other, field, relation, bound in TARGETS:
        if other not in runs:
            print(f"- plimsoll against {NAMES[other]}: not run")
            continue
        ratio = med("plimsoll", field) / med(other, field)
        met = ratio >= bound if relation == ">=" else ratio <= bound
        what = "throughput" if field == "samples_per_s" else "peak PSS"
        print(f"- {what}, plimsoll / {NAMES[other]}: {ratio:.2f}x (target {relation} {bound:g}): "
              f"{'met' if met else 'MISSED'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: pipeline_compare_table.py RESULTS.jsonl (JSON lines from bench/run_pipeline_compare.sh)")
    main(sys.argv[1])
