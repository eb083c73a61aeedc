"""A small CNN trained on Fashion-MNIST (Debian's dataset-fashion-mnist) with PyTorch on the CPU, one thread, a fixed
seed: the same loss with and without `plimsoll run` (tests/python/run_test.py checks it).

    build/src/cli/plimsoll run -- python3 examples/python/torch_cnn.py --steps 30
"""
import argparse
import gzip
import os

import numpy as np
import torch

DATASET = os.environ.get("PLIMSOLL_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def load(count):
    with gzip.open(os.path.join(DATASET, "train-images-idx3-ubyte.gz")) as file:
        images = np.frombuffer(file.read(), np.uint8, offset=16)[: count * 784].reshape(count, 1, 28, 28)
    with gzip.open(os.path.join(DATASET, "train-labels-idx1-ubyte.gz")) as file:
        labels = np.frombuffer(file.read(), np.uint8, offset=8)[:count]
    return torch.from_numpy(images.astype(np.float32) / 255.0), torch.from_numpy(labels.astype(np.int64))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    images, labels = load(args.steps * args.batch)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = None
    for step in range(args.steps):
        batch = slice(step * args.batch, (step + 1) * args.batch)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images[batch]), labels[batch])
        loss.backward()
        optimizer.step()
    print(f"loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
