"""Medians of bench/run_cuda_intercept.sh's runs: ns per call without and with the interposer (fake driver)."""
import re
import statistics
import sys

samples = {"with": {"alloc+free": [], "info": []}, "without": {"alloc+free": [], "info": []}}
for line in sys.stdin:
    match = re.match(r"(with|without) bench alloc\+free=([\d.]+) info=([\d.]+)", line)
    if match:
        samples[match[1]]["alloc+free"].append(float(match[2]))
        samples[match[1]]["info"].append(float(match[3]))
runs = len(samples["with"]["info"])
print(f"fake driver (no GPU), {runs} interleaved runs per side, medians of ns per call")
print(f"{'call':<28}{'without':>10}{'with':>10}{'added':>10}{'ratio':>8}")
for key, label in (("alloc+free", "cuMemAlloc + cuMemFree"), ("info", "cuMemGetInfo")):
    without = statistics.median(samples["without"][key])
    with_interposer = statistics.median(samples["with"][key])
    print(f"{label:<28}{without:>10.1f}{with_interposer:>10.1f}{with_interposer - without:>10.1f}"
          f"{with_interposer / without:>8.2f}")
