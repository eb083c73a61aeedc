#!/usr/bin/python3
"""The table of bench/plan_accuracy.sh: `plimsoll plan` predictions from the batch-8 and batch-16 recordings against
each recorded run's own peaks (the same replay of its own steps under the same allocator), and --fit on a device
as large as the recorded batch-64 run's peak reserved, checked against runs recorded at the batch it names and the
two above."""
import argparse
import json
import os
import subprocess
import sys

ALLOCATORS = ["plimsoll", "pytorch", "tensorflow"]
MODELS = [("cnn", "plimsoll train CNN"), ("resnet18", "ResNet-18 (C++)")]
TARGETS = [32, 64, 128]
LIVE_TARGET = 1.5
RESERVED_TARGET = 3.0


def plan(cli, *args):
    done = subprocess.run([cli, "plan", *args, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"plimsoll plan {' '.join(args)} failed: {done.stderr}")
    return json.loads(done.stdout)


def record(args, model, batch):
    """Records `model` at `batch` into args.dir unless it is there (the same commands as plan_accuracy.sh)."""
    target = f"{args.dir}/{model}-b{batch}.plimsoll"
    if os.path.exists(target) and os.path.getsize(target) > 0:
        return
    if model == "cnn":
        command = [args.cli, "train", "--epochs", "1", "--limit-batches", "4", "--batch-size", str(batch), "--record",
                   target, "--quiet"]
    else:
        command = [args.resnet, "--batch", str(batch), "--steps", "4", "--record", target]
    subprocess.run(command, check=True, capture_output=True)


def by_allocator(result):
    return {entry["allocator"]: entry for entry in result["predictions"]}


def error(predicted, actual):
    return 100.0 * (predicted - actual) / actual


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--resnet", required=True, help="plimsoll_plan_resnet18_record")
    args = parser.parse_args()
    path = lambda model, batch: f"{args.dir}/{model}-b{batch}.plimsoll"
    mib = lambda value: f"{value / 2**20:.2f}"

    print("| model | batch | allocator | peak live predicted / recorded (MiB) | error | "
          "peak reserved predicted / recorded (MiB) | error |")
    print("|---|---:|---|---:|---:|---:|---:|")
    worst_live = worst_reserved = 0.0
    for model, title in MODELS:
        for batch in TARGETS:
            predicted = by_allocator(plan(args.cli, path(model, 8), path(model, 16), "--batch", str(batch),
                                          "--device", "1TiB"))
            actual = by_allocator(plan(args.cli, path(model, batch), "--device", "1TiB"))
            for allocator in ALLOCATORS:
                p, a = predicted[allocator], actual[allocator]
                live = error(p["peak_live_bytes"], a["peak_live_bytes"])
                reserved = error(p["peak_reserved_bytes"], a["peak_reserved_bytes"])
                worst_live = max(worst_live, abs(live))
                worst_reserved = max(worst_reserved, abs(reserved))
                print(f"| {title} | {batch} | {allocator} | {mib(p['peak_live_bytes'])} / {mib(a['peak_live_bytes'])}"
                      f" | {live:+.2f}% | {mib(p['peak_reserved_bytes'])} / {mib(a['peak_reserved_bytes'])}"
                      f" | {reserved:+.2f}% |")
    print()
    print(f"worst |error|: peak live {worst_live:.2f}% (target {LIVE_TARGET}%), peak reserved {worst_reserved:.2f}% "
          f"(target {RESERVED_TARGET}%)")
    print()
    print("| model | allocator | device (the recorded batch-64 run's peak reserved) | --fit from 8, 16 | "
          "recorded runs on that device | verdict |")
    print("|---|---|---:|---:|---|---|")
    for model, title in MODELS:
        recorded_64 = by_allocator(plan(args.cli, path(model, 64), "--device", "1TiB"))
        for allocator in ALLOCATORS:
            device = recorded_64[allocator]["peak_reserved_bytes"]
            fit = plan(args.cli, path(model, 8), path(model, 16), "--fit", "--device", str(device),
                       "--allocator", allocator)
            largest = fit["predictions"][0]["largest_batch"]
            # The claim checked against recordings at that batch size and the next two, made now if missing.
            seen = {}
            for batch in (largest, largest + 1, largest + 2):
                record(args, model, batch)
                seen[batch] = by_allocator(plan(args.cli, path(model, batch), "--device", str(device), "--allocator",
                                                allocator))[allocator]["fits"]
            if not seen[largest]:
                verdict = "too high: the recorded run does not fit"
            elif not seen[largest + 1]:
                verdict = "exact"
            elif not seen[largest + 2]:
                verdict = "one below"
            else:
                verdict = "more than one below"
            marks = ", ".join(f"{batch} {'fits' if fits else 'does not'}" for batch, fits in seen.items())
            print(f"| {title} | {allocator} | {mib(device)} MiB | {largest} | {marks} | {verdict} |")

if __name__ == "__main__":
    main()
