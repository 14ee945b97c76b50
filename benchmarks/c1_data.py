"""C1's data (shared/BENCHMARKS.md): synthetic CIFAR-shaped images written in CIFAR-10's python
pickle layout, so that flnet reads them as `data.dataset: cifar10` from `data.root`.

    .venv/bin/python benchmarks/c1_data.py ROOT    # writes ROOT/cifar-10-batches-py/

10,000 training images (5 batches of 2,000: 200 clients x 50) and 1,000 test images: each image
is its class's prototype (grey plus a faint smooth random pattern, 10 classes) plus
pixel noise, from a fixed
seed, as uint8 bytes (1024 red, 1024 green, 1024 blue per row), labels uniform.

The files are pickled as CIFAR-10's own were, by Python 2 (protocol 2, byte strings as Python
2's str): Python 3's pickler writes bytes in protocol 2 as text to re-encode, which took a
reader 25 times longer to load than the real files (one-off)."""

from __future__ import annotations

import argparse
import pickle
import struct
from pathlib import Path

import numpy as np

TRAIN_BATCHES, TRAIN_PER_BATCH, TEST_ROWS = 5, 2000, 1000
NUM_CLASSES = 10
BASE, SPREAD = 128.0, 20.0  # prototypes: a grey base plus a class pattern of this deviation
NOISE = 70.0  # pixel noise's standard deviation, in bytes: the classes overlap


def images(rng: np.random.Generator, prototypes: np.ndarray, n: int):
    """n rows [n, 3072] uint8 and their labels [n]."""
    y = rng.integers(0, NUM_CLASSES, n)
    x = prototypes[y] + rng.normal(0.0, NOISE, (n, prototypes.shape[1]))
    return np.clip(np.rint(x), 0, 255).astype(np.uint8), y


class Python2Pickler(pickle._Pickler):  # the pure-Python pickler: its dispatch table is open
    """Protocol 2 with bytes as Python 2's str (BINSTRING), which Python 3 reads back, with
    encoding latin1, as a str that numpy takes for an array's bytes (the real CIFAR files)."""

    def save_python2_str(self, obj: bytes) -> None:
        self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch = {**pickle._Pickler.dispatch, bytes: save_python2_str}


def write(root: Path, seed: int = 0) -> Path:
    """ROOT/cifar-10-batches-py with data_batch_1..5 and test_batch; returns the folder."""
    rng = np.random.default_rng(seed)
    coarse = BASE + rng.normal(0.0, SPREAD, (NUM_CLASSES, 3, 8, 8))  # smooth: 4x4 blocks
    prototypes = coarse.repeat(4, axis=2).repeat(4, axis=3).reshape(NUM_CLASSES, -1)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, TRAIN_BATCHES + 1)] + ["test_batch"]
    for name in names:
        x, y = images(rng, prototypes, TEST_ROWS if name == "test_batch" else TRAIN_PER_BATCH)
        with open(folder / name, "wb") as f:
            Python2Pickler(f, protocol=2).dump({b"data": x, b"labels": y.tolist()})
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path)
    p.add_argument("--seed", type=int, default=0)
    print(write(p.parse_args().root))


if __name__ == "__main__":
    main()
