#!/usr/bin/env python3
"""Which previous copy does each leftover pair with? (docs/engine.md, "pairing is an estimate")

A leftover is a request a step makes and does not free (a gradient, freed by the next step's zero_grad). Its previous
copy is the block the step before made at the same position among the allocations of its size (steps repeat their
requests in order), and the step frees that copy before, or while, it makes the new one. The plan holds the previous
copy's range from the step's start until that free (StepObservation::pair_leftovers), so the tick must be the copy's.
For every step after the first this prints, per trace, how many leftovers have a previous copy freed in the step, and
how many of them each rule pairs with the wrong free (a copy freed after the new one is born cannot share its range:
counted apart, left unpaired by both rules):
  - order: leftovers in allocation order against frees of older blocks of their size in free order (the rule before
    pairing by identity; still the fallback where identity is unknown);
  - identity: the free of the block that was the leftover's previous copy, known by its address (here its trace id)
    from the step before; where the step before has no copy at some leftover's position, the whole step by order.
The rules are re-written here from src/engine/step_plan.cpp; tests/engine_step_plan_test.cpp checks the C++ one.
That first table's "true" copy is found by the identity rule's own premise (same position among its size), so its
"identity: wrong" is 0 by construction wherever every copy is known. The second table does not lean on it: the tick a
rule pairs a leftover of step n with (its held_until: the plan of step n+1 holds the leftover's range from the step's
start until that tick; unpaired, the whole step) against the tick step n+1 actually frees that same block (by its
trace id). exact: the same tick; early: predicted before the real free (the plan lays a request over a range still
live: an `occupied` fallback); late: predicted after it (the range is held longer than needed: space lost, no
fallback); not freed: the block outlives step n+1 (optimizer state) or the trace ends first.
    python3 bench/experiments/leftover_pairing.py ../shared/traces/*.trace
"""
import sys
from collections import defaultdict


def rounded(size):
    return (int(size) + 255) // 256 * 256


def read_steps(path):
    steps, size, current = [], {}, None
    for line in open(path):
        if line.startswith('# step'):
            words = line.split()
            current = [] if words[3] == 'begin' else None
            if current is not None:
                steps.append(current)
            continue
        if line.startswith('#'):
            continue
        event = line.split()
        if event[0] == 'a':
            size[event[1]] = rounded(event[2])
        if current is not None:
            current.append((event[0], event[1]))
    return steps, size


def observe(step, size):
    """requests [(id, size, born)], leftovers {id: request index}, older frees [(id, size, tick)]."""
    requests, live, older = [], {}, []
    for tick, (kind, ident) in enumerate(step):
        if kind == 'a':
            live[ident] = len(requests)
            requests.append((ident, size[ident], tick))
        elif ident in live:
            del live[ident]
        else:
            older.append((ident, size[ident], tick))
    return requests, live, older


def ranks(requests):
    """Each request's position among the step's allocations of its size."""
    seen, out = defaultdict(int), []
    for _, s, _ in requests:
        out.append(seen[s])
        seen[s] += 1
    return out


def order_rule(requests, leftovers, older, claimed=None, only=None):
    frees = defaultdict(list)
    for ident, s, tick in older:
        if claimed is None or ident not in claimed:
            frees[s].append((tick, ident))
    paired = {}
    for index in sorted(leftovers.values()):
        if only is not None and index not in only:
            continue
        ident, s, born = requests[index]
        if frees[s]:
            tick, freed = frees[s].pop(0)
            if tick <= born:
                paired[index] = freed
    return paired


def identity_rule(requests, leftovers, older, previous):
    """By identity when every leftover's previous copy is known; else the whole step by order."""
    rank = ranks(requests)
    freed_at = {ident: tick for ident, _, tick in older}
    copies = {index: previous.get((requests[index][1], rank[index])) for index in leftovers.values()}
    unknown = sum(1 for copy in copies.values() if copy is None)
    if unknown:
        return order_rule(requests, leftovers, older), unknown
    return {i: c for i, c in copies.items() if c in freed_at and freed_at[c] <= requests[i][2]}, 0


def analyse(path):
    steps, size = read_steps(path)
    previous_requests = previous_leftovers = None
    name = path.split('/')[-1]
    for number, step in enumerate(steps):
        requests, leftovers, older = observe(step, size)
        if previous_requests is not None:
            prank = ranks(previous_requests)
            previous = {(previous_requests[i][1], prank[i]): previous_requests[i][0] for i in previous_leftovers.values()}
            rank = ranks(requests)
            freed_at = {ident: tick for ident, _, tick in older}
            truth, late = {}, 0
            for index in leftovers.values():
                copy = previous.get((requests[index][1], rank[index]))
                if copy in freed_at and freed_at[copy] <= requests[index][2]:
                    truth[index] = copy
                elif copy in freed_at:
                    late += 1  # freed after the new copy is born: no range can serve both, left unpaired
            order = order_rule(requests, leftovers, older)
            identity, unknown = identity_rule(requests, leftovers, older, previous)
            wrong = lambda paired: sum(1 for i, c in truth.items() if paired.get(i) != c)
            print(f"| {name} | {number} | {len(leftovers)} | {len(truth)} | {late} | {wrong(order)} | {wrong(identity)} | "
                  f"{unknown} |")
        previous_requests, previous_leftovers = requests, leftovers


def predicted_against_next_step(path):
    """Per rule, (exact, early, late, not freed) of held_until predicted in step n against step n+1's real frees."""
    steps, size = read_steps(path)
    observed = [observe(step, size) for step in steps]
    name = path.split('/')[-1]
    for number in range(1, len(steps) - 1):
        previous_requests, previous_leftovers, _ = observed[number - 1]
        prank = ranks(previous_requests)
        previous = {(previous_requests[i][1], prank[i]): previous_requests[i][0] for i in previous_leftovers.values()}
        requests, leftovers, older = observed[number]
        ticks = len(steps[number])
        freed_at = {ident: tick for ident, _, tick in older}
        freed_next = {ident: tick for ident, _, tick in observed[number + 1][2]}
        cells = []
        for paired in (order_rule(requests, leftovers, older), identity_rule(requests, leftovers, older, previous)[0]):
            exact = early = late = kept = 0
            for index in leftovers.values():
                actual = freed_next.get(requests[index][0])
                if actual is None:
                    kept += 1
                    continue
                predicted = freed_at[paired[index]] if index in paired else ticks
                if predicted == actual:
                    exact += 1
                elif predicted < actual:
                    early += 1
                else:
                    late += 1
            cells.append(f"{exact} | {early} | {late}")
        print(f"| {name} | {number} -> {number + 1} | {len(leftovers)} | {kept} | {cells[0]} | {cells[1]} |")


print("| trace | step | leftovers | with a previous copy freed before its birth | freed after it | order rule: wrong | identity: wrong | "
      "leftovers of unknown identity (then the step by order) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for trace in sys.argv[1:]:
    analyse(trace)
print()
print("| trace | step n -> n+1 | leftovers of step n | not freed in step n+1 | order: exact | order: early | order: late | "
      "identity: exact | identity: early | identity: late |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for trace in sys.argv[1:]:
    predicted_against_next_step(trace)
