"""Random streams. Each stream is a fresh generator keyed by (seed, stream, *keys), so a value
never depends on how many draws other parts of the run made, and a resumed run redraws the same
numbers without saving generator states.

The keys follow the pattern that does the work, so no run reuses a key:

- round patterns (`round_trip`): (seed, stream, round, client). Minibatch indices use
  ``[seed, round, client]`` without a stream tag, the convention of the W1 benchmark
  (``../shared/BENCHMARKS.md``), so flnet reproduces its accuracy curve exactly; fading is keyed
  by (round, sender, receiver, that link's draws so far in the round).
- `exchange` (gossip): (seed, stream, iteration, node), the same shapes with the iteration in
  the round's place.
- `stream` (asynchronous): (seed, stream, client, that client's work count): minibatches
  ``[seed, WORK, client, count]`` (`work_generator`), fading ``[seed, FADING_KEYED, client, count,
  sender, receiver]``. A client's n-th piece of work draws the same numbers whenever it starts.

Stream tags are far above any round number, so the key shapes never meet. Give each stream
tag one key length: numpy's SeedSequence ignores trailing zero words, so ``[seed, tag, a]`` and
``[seed, tag, a, 0]`` are the same generator (`tests/test_rng.py` shows it). PARTITION's
sub-streams break the rule only between partition kinds that never run together (Hsu's
Dirichlet split keeps the bare stream, equal to the SIZES=0 sub-stream).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from numpy.typing import ArrayLike


class Stream(IntEnum):
    SELECTION = 1_000_001
    DEVICES = 1_000_002
    RADIO = 1_000_003
    FADING = 1_000_004
    PARTITION = 1_000_005
    WORK = 1_000_006  # minibatches of a client's n-th piece of work (stream pattern)
    FADING_KEYED = 1_000_007  # fading of a transfer with its own key (stream pattern)
    TOPOLOGY = 1_000_008  # random graphs (exchange pattern)
    ARRIVALS = 1_000_009  # who starts work next (stream pattern)
    D2D = 1_000_010  # a device-to-device link's SNR or shadowing, keyed by (min, max) of its ends
    EVALUATION = 1_000_011  # the clients whose per-client figures are evaluated
    AVAILABILITY = 1_000_012  # Bernoulli availability, keyed (draw, client)
    ZONES = 1_000_013  # a client's time zone (diurnal availability), keyed (client)
    SESSIONS = 1_000_014  # a client's online sessions starting in a day, keyed (client, day + 1)
    BEHAVIOUR = 1_000_015  # a task's slowdown and dropout, keyed (round, client)
    BEHAVIOUR_KEYED = 1_000_016  # the same in a stream, keyed (client, work count)
    TRACE_AVAILABILITY = 1_000_020  # which trace client each client replays (availability)
    TRACE_CAPACITY = 1_000_021  # which trace client each client replays (capacity)
    STRAGGLERS = 1_000_025  # which of a round's cohort straggle, keyed by (round)
    PARTIAL_WORK = 1_000_026  # a straggler's local epochs (or steps), keyed by (round, client)
    WEIGHTED_SELECTION = 1_000_030  # m draws with replacement from lambda (DRFA, DRDM), by round
    DUAL_SELECTION = 1_000_031  # the dual step's uniform clients (DRFA, DRDM), by round
    SNAPSHOT = 1_000_032  # the snapshot step t' (DRFA, DRDM), by round
    DUAL_BATCH = 1_000_033  # a dual-step client's loss minibatch, by (round, client)
    VALIDATION = 1_000_040  # the rows held out of the training set as a validation set
    # which D2D messages are lost, keyed by (iteration, substep: the gossip step within a round
    # of several, 0 otherwise; (it, 0) is the generator (it) was, SeedSequence drops a trailing 0)
    D2D_LOSS = 1_000_045
    POSITIONS = 1_000_046  # every client's position (unkeyed: one draw of all columns)
    NEIGHBOURS = 1_000_047  # random_k topologies: each node's neighbours, keyed by (iteration)
    # compression draws of a gossip step, keyed (round, gossip step, node) (flnet.learn.compress)
    RAND_K = 1_000_050  # rand-k's coordinates
    QSGD = 1_000_051  # QSGD's dither xi ~ U[0, 1]^d
    RANDOM_GOSSIP = 1_000_052  # randomized gossip's coin
    BLOCKS = 1_000_055  # block-cyclic data: rows of each block, local set sizes (sub-streams)
    BLOCK_LOSS = 1_000_056  # MC-PSGD's loss query minibatch, keyed by (round, client)
    BATTERY = (
        1_000_060  # a client's battery columns (capacity, initial charge, threshold), by client
    )
    BATTERY_ZONES = 1_000_061  # a client's time zone for charging (clients.battery), by client
    DEVICE_CLASSES = 1_000_062  # every client's device class (unkeyed: one draw of the column)
    CLASS_DEVICES = 1_000_063  # a device class's own cpu_hz, ..., keyed by (class index)
    # radio.cells: a client's shadowing to the stations, then its uniform position, by (client)
    CELLS = 1_000_070
    MOBILITY = 1_000_071  # a client's random waypoint leg (waypoint, speed), by (client, leg)


def stream_key(seed: int, stream: Stream, *keys: int) -> list[int]:
    """The `default_rng` key of `generator` (for callers that hash many keys at once)."""
    return [seed, int(stream), *map(int, keys)]


def key_rows(head: list[int], *columns: ArrayLike) -> np.ndarray:
    """[C, len(head) + len(columns)] int64: row i is `head` followed by each column's i-th
    entry; the `default_rng` keys of a cohort, one row per client, built as columns (for
    `flnet.draws`, which runs the clients' generators as one block)."""
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    keys = np.empty((len(cols[0]), len(head) + len(cols)), dtype=np.int64)
    keys[:, : len(head)] = head
    for i, c in enumerate(cols, len(head)):
        keys[:, i] = c
    return keys


def stream_keys(seed: int, stream: Stream, step: int, clients: ArrayLike) -> np.ndarray:
    """[C, 4] int64: row i is `stream_key(seed, stream, step, clients[i])`."""
    return key_rows(stream_key(seed, stream, step), clients)


def minibatch_key(seed: int, round: int, client: int) -> list[int]:
    """The `default_rng` key of `minibatch_generator`."""
    return [seed, round, client]


def generator(seed: int, stream: Stream, *keys: int) -> np.random.Generator:
    return np.random.default_rng(stream_key(seed, stream, *keys))


def minibatch_generator(seed: int, round: int, client: int) -> np.random.Generator:
    """Client `client`'s minibatches in round (or iteration) `round`."""
    return np.random.default_rng(minibatch_key(seed, round, client))


def work_generator(seed: int, client: int, count: int) -> np.random.Generator:
    """Client `client`'s minibatches in its `count`-th piece of work (stream pattern)."""
    return generator(seed, Stream.WORK, client, count)
