"""Block-cyclic data (Ding et al., "Distributed Optimization over Block-Cyclic Data", Sec. 3):
a day (cycle) is split into M blocks and, in block m, client i's data come from its own
block-m distribution D_m^i (eq. 4-5).

The partition is the digest's "label windows" (section 7.2): block m holds the labels
m * C // M, ..., m * C // M + w - 1 (mod C) with w = C // M + 1, so neighbouring blocks share a
label ("several labels, partially crossed", the paper's Sec. 6.1; its exact label map is not
given). A shared label's rows are split evenly between the blocks that hold it. Within a block
the rows are sorted by label and cut "in sequence" into N local sets whose sizes follow
Normal(n / N, (0.2 n / N)^2), at least 2 (the paper's unbalanced sizes). The test set is split
into the same M blocks (each block's test set holds its labels).

Which block is in force (`BlockClock`) follows rounds (E rounds per block, the paper's
experiments) or simulated time (blocks of `block_s` seconds from t = 0, a day of M blocks): a
round belongs to the block in force when it starts, and a switch takes effect at the next round.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from flnet.learn.data import partition
from flnet.learn.data.views import ClientViews
from flnet.rng import Stream, generator

BLOCK_ROWS, BLOCK_SIZES, BLOCK_TEST = 0, 1, 2  # sub-streams of Stream.BLOCKS


def label_windows(num_classes: int, num_blocks: int) -> list[np.ndarray]:
    """[M] the labels of each block: a window of C // M + 1 labels from m * C // M, mod C (one
    block: every label)."""
    if num_blocks == 1:
        return [np.arange(num_classes)]
    width = min(num_classes, num_classes // num_blocks + 1)
    return [
        (m * num_classes // num_blocks + np.arange(width)) % num_classes for m in range(num_blocks)
    ]


def block_rows(labels: np.ndarray, num_blocks: int, rng: np.random.Generator) -> list[np.ndarray]:
    """[M] rows of each block: every row in exactly one block, a label's rows (shuffled) split
    as evenly as can be between the blocks whose window holds it."""
    num_classes = int(labels.max()) + 1 if len(labels) else 0
    windows = label_windows(num_classes, num_blocks)
    out: list[list[np.ndarray]] = [[] for _ in range(num_blocks)]
    for c in range(num_classes):
        owners = [m for m, w in enumerate(windows) if c in w]
        rows = rng.permutation(np.flatnonzero(labels == c))
        for m, part in zip(owners, np.array_split(rows, len(owners))):
            out[m].append(part)
    return [np.sort(np.concatenate(p)) if p else np.empty(0, np.int64) for p in out]


def in_sequence(
    rows: np.ndarray, labels: np.ndarray, num_clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """[N] local sets: `rows` sorted by label and cut in order into sizes ~ Normal(n / N,
    (0.2 n / N)^2), at least 2 each (fewer than 2N rows: as even as can be)."""
    n = len(rows)
    ordered = rows[np.argsort(labels[rows], kind="stable")]
    if n < 2 * num_clients:
        return np.array_split(ordered, num_clients)
    mean = n / num_clients
    raw = np.maximum(rng.normal(mean, 0.2 * mean, num_clients), 2.0)
    sizes = np.maximum(partition.round_to_total(raw, n - 2 * num_clients), 0) + 2
    return np.split(ordered, np.cumsum(sizes)[:-1])


class BlockData(NamedTuple):
    """Each block's training views (client i's rows of D_m^i) and test rows."""

    train: tuple[ClientViews, ...]  # [M]
    test: tuple[np.ndarray, ...]  # [M] rows of the test set


def split(
    y_train: np.ndarray, y_test: np.ndarray, num_blocks: int, num_clients: int, seed: int
) -> BlockData:
    """The block-cyclic partition of a data set (module docstring)."""
    rows = block_rows(y_train, num_blocks, generator(seed, Stream.BLOCKS, BLOCK_ROWS))
    sizes_rng = generator(seed, Stream.BLOCKS, BLOCK_SIZES)
    train = tuple(
        ClientViews.from_lists(in_sequence(r, y_train, num_clients, sizes_rng), num_clients)
        for r in rows
    )
    test = tuple(block_rows(y_test, num_blocks, generator(seed, Stream.BLOCKS, BLOCK_TEST)))
    return BlockData(train, test)


class BlockClock(NamedTuple):
    """Which block is in force: by rounds (`rounds_per_block` rounds each, from round 1) or by
    simulated time (`block_s` seconds each, from t = 0)."""

    num_blocks: int
    rounds_per_block: int | None = None
    block_s: float | None = None

    def block(self, round: int, now_s: float) -> int:
        """The block of round `round` (1-based) starting at `now_s`."""
        if self.rounds_per_block is not None:
            return ((round - 1) // self.rounds_per_block) % self.num_blocks
        assert self.block_s is not None  # validated: one of the two is set
        return int(now_s // self.block_s) % self.num_blocks
