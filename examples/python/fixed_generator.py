"""The fixed twin of leaky_generator.py: the same Keras-style loop in plain Python and NumPy, but its generator
keeps only the latest batch, so memory stays flat.

    build/src/cli/plimsoll run -- python3 examples/python/fixed_generator.py

plimsoll run reports no leak.
"""
import argparse

import numpy as np

try:  # steps for the leak watch: plimsoll is importable under `plimsoll run`; without it, no steps are marked
    from plimsoll import step as mark_step
except ImportError:
    def mark_step():
        pass

BATCH, SIZE, CHANNELS, CLASSES = 32, 64, 3, 10


def batches(rng, seen):
    while True:
        images = rng.standard_normal((BATCH, SIZE, SIZE, CHANNELS), dtype=np.float32)  # the batch that piles up
        labels = rng.integers(0, CLASSES, BATCH)
        seen[:] = [images]  # the fix: keep the latest batch only
        yield images, labels


class StepCallback:
    """What Keras' on_train_batch_end would do: mark the end of each training step."""

    def on_train_batch_end(self, step):
        mark_step()


def train(steps, generator, callback):
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((SIZE * SIZE * CHANNELS, CLASSES), dtype=np.float32) * 0.01
    loss = 0.0
    for step in range(steps):
        images, labels = next(generator)
        logits = images.reshape(BATCH, -1) @ weights
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        loss = float(-np.log(probabilities[np.arange(BATCH), labels] + 1e-9).mean())
        probabilities[np.arange(BATCH), labels] -= 1
        weights -= 0.001 * (images.reshape(BATCH, -1).T @ probabilities) / BATCH
        callback.on_train_batch_end(step)
    return loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    seen = []
    loss = train(args.steps, batches(np.random.default_rng(1), seen), StepCallback())
    print(f"loss {loss:.4f} after {args.steps} steps; the generator holds {len(seen)} batches")


if __name__ == "__main__":
    main()
