"""One PyTorch CPU training process for bench/run_python_step.sh: a small CNN (batch 32, 64x64x3, Adam, one thread),
synthetic data from a fixed seed. Prints one JSON line: the median step time over steps 3..N, every step's time,
the last loss and the process's peak RSS (ru_maxrss)."""
import argparse
import json
import resource
import statistics
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(128 * (args.size // 8) ** 2, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.randn(args.batch, 3, args.size, args.size)
    labels = torch.randint(0, 10, (args.batch,))
    times, loss = [], None
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"median_step_s": statistics.median(times[2:]), "step_s": times, "loss": loss.item(),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
