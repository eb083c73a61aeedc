#!/usr/bin/env python3
"""When do step 0's leftovers die? (docs/engine.md, "A transition plan, costed tick by tick")

The first plan is packed from step 0, which cannot tell gradients (freed in step 1) from optimizer state (kept),
so it holds every leftover of step 0 for the whole of step 1. For each trace this prints what step 1 actually
does with them: how many it frees, at which ticks (events counted from `# step 1 begin`), and whether before
step 1's own peak of live bytes; then the first plan's load bound in 2 MiB granules (blocks live across step 0
for the whole step, step 0's requests over their lifetimes, each leftover's previous copy over [0, until)) with
the leftovers held all step (what the engine assumes) and with an oracle that knows step 1's free ticks, against
the target's limit (peak live + 4 MiB under 1 GiB, 1.01 x above). A lower bound on any plan: not a plan.
    python3 bench/experiments/leftover_deaths.py ../shared/traces/*.trace
"""
import math
import sys

GRANULE = 2 << 20


def rounded(size):
    return (int(size) + 255) // 256 * 256


def analyse(path):
    steps, size, before, current = {}, {}, [], None
    live_bytes = peak_live = 0
    for line in open(path):
        if line.startswith('# step'):
            words = line.split()
            if words[3] == 'begin':
                current = steps[int(words[2])] = []
            else:
                current = None
            continue
        if line.startswith('#'):
            continue
        event = line.split()
        if event[0] == 'a':
            size[event[1]] = int(event[2])
            live_bytes += int(event[2])
            peak_live = max(peak_live, live_bytes)
        else:
            live_bytes -= size[event[1]]
        if current is not None:
            current.append(event)
        elif 0 not in steps:
            before.append(event)
    older = set()
    for event in before:
        (older.add if event[0] == 'a' else older.discard)(event[1])
    leftovers, born, died, tick = {}, {}, {}, 0
    for event in steps[0]:
        if event[0] == 'a':
            leftovers[event[1]] = tick
            born[event[1]] = tick
        else:
            older.discard(event[1])
            leftovers.pop(event[1], None)
            died[event[1]] = tick
        tick += 1
    ticks0 = tick
    freed, tick, live, peak, peak_tick = {}, 0, 0, 0, 0
    for event in steps[1]:
        if event[0] == 'a':
            live += rounded(size[event[1]])
            born.setdefault(event[1], None)
        elif event[1] in leftovers:
            freed[event[1]] = tick
        elif event[1] in born:
            live -= rounded(size[event[1]])
        if live > peak:
            peak, peak_tick = live, tick
        tick += 1
    ticks1 = tick
    limit = peak_live + (4 << 20) if peak_live <= 1 << 30 else math.ceil(1.01 * peak_live)
    older_bytes = sum(rounded(size[i]) for i in older)

    def load(until):
        delta = [0] * (ticks0 + 1)
        for i, b in born.items():
            if b is None or i not in died and i not in leftovers:
                continue
            delta[b] += rounded(size[i])
            delta[died.get(i, ticks0)] -= rounded(size[i])
        for i in leftovers:
            delta[0] += rounded(size[i])
            delta[min(until(i), ticks0)] -= rounded(size[i])
        running = most = 0
        for d in delta[:ticks0]:
            running += d
            most = max(most, running)
        return math.ceil((most + older_bytes) / GRANULE)

    kept = sum(rounded(size[i]) for i in leftovers) / 2**20
    freed_mib = sum(rounded(size[i]) for i in freed) / 2**20
    first, last = (min(freed.values()), max(freed.values())) if freed else ('-', '-')
    early = sum(1 for t in freed.values() if t < peak_tick)
    whole = load(lambda i: ticks0)
    oracle = load(lambda i: freed[i] * ticks0 // ticks1 if i in freed else ticks0)
    print(f"| {path.split('/')[-1]} | {len(leftovers)} ({kept:.1f} MiB) | {len(freed)} ({freed_mib:.1f} MiB) | "
          f"{first}..{last} of {ticks1} | {early} of {len(freed)} (peak at {peak_tick}) | {whole} | {oracle} | "
          f"{limit // GRANULE} |")


print("| trace | step 0's leftovers | freed in step 1 | at ticks | before step 1's peak | first plan's load bound, "
      "leftovers held all step (granules) | with step 1's free ticks known | limit (granules) |")
print("|---|---:|---:|---|---|---:|---:|---:|")
for trace in sys.argv[1:]:
    analyse(trace)
