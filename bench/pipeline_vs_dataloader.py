#!/usr/bin/env python3
"""Fashion-MNIST through PyTorch's DataLoader: the Python contender of bench/run_pipeline_compare.sh.

The same work as plimsoll_pipeline_compare_bench (bench/pipeline_compare.hpp), written the way a PyTorch user
writes it: a map-style Dataset whose __getitem__ shifts one uint8 28 x 28 image by up to 4 pixels each way with
zero fill (pad 4 + random crop), flips it left to right with probability 1/2 (numpy), normalizes it to float32
((x / 255 - 0.2860) / 0.3530) and returns it with its label; DataLoader(shuffle=True, num_workers, prefetch_factor,
persistent_workers=True) collates with default_collate (images 256 x 1 x 28 x 28 float32, labels int64).
One warm-up epoch, then timed epochs; prints one JSON line with the same fields as the C++ contenders.

Needs Debian's python3-torch and python3-numpy: run it with /usr/bin/python3.
"""
import argparse
import gzip
import json
import os
import random
import struct
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

MEAN = 0.2860
STDDEV = 0.3530
ROWS = COLS = 28
PAD = 4


def read_idx(path):
    """An IDX file of unsigned bytes, gzip-compressed or not (told apart by the magic bytes), as a numpy array."""
    with open(path, "rb") as raw:
        head = raw.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        payload = f.read()
    zero, dtype, ndims = struct.unpack(">HBB", payload[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndims, payload[4:4 + 4 * ndims])
    return np.frombuffer(payload, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def find(directory, name):
    for candidate in (name + ".gz", name):
        path = os.path.join(directory, candidate)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{directory}: no {name}[.gz]; install the Debian package dataset-fashion-mnist")


class FashionMnist(Dataset):
    def __init__(self, directory):
        self.images = read_idx(find(directory, "train-images-idx3-ubyte"))
        self.labels = read_idx(find(directory, "train-labels-idx1-ubyte")).astype(np.int64)
        self.scale = np.float32(1.0 / (255.0 * STDDEV))  # (x / 255 - mean) / stddev = x * scale - offset
        self.offset = np.float32(MEAN / STDDEV)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        # Python's `random` is seeded per worker by the DataLoader (a different seed in each worker and epoch).
        dx = random.randint(-PAD, PAD)
        dy = random.randint(-PAD, PAD)
        image = self.images[index]
        shifted = np.zeros((ROWS, COLS), dtype=np.uint8)
        shifted[max(dy, 0):ROWS + min(dy, 0), max(dx, 0):COLS + min(dx, 0)] = \
            image[max(-dy, 0):ROWS - max(dy, 0), max(-dx, 0):COLS - max(dx, 0)]
        if random.random() < 0.5:
            shifted = shifted[:, ::-1]
        pixels = shifted.astype(np.float32)  # a contiguous copy, flipped or not
        pixels *= self.scale
        pixels -= self.offset
        return torch.from_numpy(pixels).unsqueeze(0), int(self.labels[index])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=4, help="worker processes (num_workers); 0: none")
    parser.add_argument("--prefetch", type=int, default=2, help="prefetch_factor: batches in flight per worker")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs, after one warm-up epoch")
    parser.add_argument("--step-us", type=float, default=0.0, help="the consumer spins this long per batch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-persistent-workers", action="store_true",
                        help="start new worker processes every epoch (PyTorch's default)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)  # the shuffle and the workers' base seed
    random.seed(args.seed)
    load_begin = time.perf_counter()
    dataset = FashionMnist(args.data_dir)
    load_s = time.perf_counter() - load_begin
    # Without workers (--workers 0: everything in the training loop's process) PyTorch refuses both settings.
    worker_options = {} if args.workers == 0 else {
        "prefetch_factor": args.prefetch, "persistent_workers": not args.no_persistent_workers}
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        **worker_options)

    step_s = args.step_us / 1e6
    waits = []
    samples = 0
    pixel_sum = 0.0
    label_sum = 0
    pixels = 0
    start = end = last_consumed = 0.0
    for epoch in range(1 + args.epochs):
        if epoch == 1:
            start = last_consumed  # the end of the consumer's step on the warm-up epoch's last batch
        iterator = iter(loader)
        while True:
            asked = time.perf_counter()
            try:
                images, labels = next(iterator)
            except StopIteration:
                break
            got = time.perf_counter()
            if epoch > 0:
                waits.append(got - asked)
                samples += len(labels)
            # The consumer: read every value, then spin step_us.
            pixel_sum += images.sum(dtype=torch.float64).item()
            label_sum += int(labels.sum().item())
            pixels += images.numel()
            while time.perf_counter() - got < step_s:
                pass
            last_consumed = time.perf_counter()
            if epoch > 0:
                end = last_consumed

    waits.sort()

    def quantile_us(q):
        return waits[int(q * (len(waits) - 1))] * 1e6 if waits else 0.0

    seconds = end - start
    print(json.dumps({
        "loader": "pytorch", "batch_size": args.batch_size, "workers": args.workers, "prefetch": args.prefetch,
        "timed_epochs": args.epochs, "step_us": args.step_us, "samples": samples, "batches": len(waits),
        "seconds": seconds, "samples_per_s": samples / seconds if seconds > 0 else 0.0,
        "wait_p50_us": quantile_us(0.50), "wait_p99_us": quantile_us(0.99), "wait_total_s": sum(waits),
        "mean_pixel": pixel_sum / pixels if pixels else 0.0,
        "mean_label": label_sum / (pixels / (ROWS * COLS)) if pixels else 0.0, "load_s": load_s,
        "in_flight": args.workers * args.prefetch, "persistent_workers": not args.no_persistent_workers,
        "torch_version": torch.__version__,
    }))


if __name__ == "__main__":
    main()
