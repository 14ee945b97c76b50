"""Many fresh generators' ``integers(0, n)`` or ``random()`` at once, bit for bit as numpy
draws them. Both sides use it (numpy only): the minibatches, and the time side's per-member
draws (`flnet.sim.world.World.trip_fates`).

A round's minibatches are one fresh ``default_rng(key)`` per client (keys in `flnet.rng`),
each asked for ``integers(0, n_k, count)``; building the generator (its SeedSequence hash and
PCG64 seeding, about 7 us) and the call (about 3.5 us) cost more than the draws. So the cohort's
keys are hashed together here, SeedSequence's arithmetic on ``[C]`` columns of 32-bit words
(`seed_states`); each PCG64 is seeded from its row and yields raw 64-bit words only; and the
bounded draw runs once over the whole ``[C, count]`` block: numpy (`Generator`, numpy >= 1.17)
draws an int64 in [0, n) with n <= 2**32 by Lemire's multiply-shift on 32-bit words, and
PCG64's 32-bit words are each 64-bit output's low half, then its high half
(``random_bounded_uint64_fill``, ``buffered_bounded_lemire_uint32``, ``pcg64_next32`` in
numpy/random/src; ``SeedSequence.mix_entropy`` and ``generate_state`` in bit_generator.pyx).
A word Lemire would reject (probability below n / 2**32 per draw), a bound outside that range
or a key that is not one 32-bit word per column sends its row to numpy itself. `uniforms` is
the same for ``random(count)``: each double is one raw word's top 53 bits. Tests check the
equality against ``default_rng(key).integers`` and ``.random`` directly. `generators` gives the
generators themselves, their seeds hashed together, for draws numpy makes one at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.random.bit_generator import ISeedSequence

_U32 = 0xFFFFFFFF
_WORD = 1 << 32
# SeedSequence's constants (numpy/random/bit_generator.pyx), pool of 4 words; its arithmetic
# is on uint32, which wraps mod 2**32 as SeedSequence's does
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R = np.uint32(0xCA01F9DD), np.uint32(0x4973F715)
_XSHIFT, _POOL_SIZE = np.uint32(16), 4


class _SeedStates(ISeedSequence):
    """Seed sequences whose state words are already computed (`seed_states`), for PCG64: each
    generator built from it takes the next row. (One object for the block, not one per
    row: a Python object less for every generator.)"""

    __slots__ = ("rows",)

    def __init__(self, states: np.ndarray) -> None:
        self.rows = iter(states)  # [C, 4] uint64

    def generate_state(self, n_words: int, dtype: Any = np.uint64) -> np.ndarray:
        return next(self.rows)  # PCG64 asks for 4 uint64 words


@functools.cache
def _hash_consts(init: int, mult: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """[n, 1] uint32 each: the constant SeedSequence's k-th hash xors in, and the one it
    multiplies by (the hash constant advances once per hash, whatever it hashes)."""
    xors, mults, h = [], [], init
    for _ in range(n):
        xors.append(h)
        h = (h * mult) & _U32
        mults.append(h)
    out = np.array(xors, np.uint32)[:, None], np.array(mults, np.uint32)[:, None]
    for a in out:
        a.setflags(write=False)  # cached, shared by every call
    return out


def _hash(value: np.ndarray, xors: np.ndarray, mults: np.ndarray) -> np.ndarray:
    value = (value ^ xors) * mults
    return value ^ (value >> _XSHIFT)


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # L x - R y, mod 2**32
    r = _MIX_MULT_L * x - _MIX_MULT_R * y
    return r ^ (r >> _XSHIFT)


def seed_states(words: np.ndarray) -> np.ndarray:
    """[C, 4] uint64: ``SeedSequence(row).generate_state(4, np.uint64)`` for each row of
    `words` ([C, L], each entry one 32-bit word of the entropy), all rows at once.

    SeedSequence hashes one value at a time, but a source word's hashes into the other pool
    words are independent of one another, so each runs as one [3 or 4, C] block; likewise
    the 8 output words."""
    c, length = words.shape
    words = words.astype(np.uint32).T  # [L, C]
    xors, mults = _hash_consts(_INIT_A, _MULT_A, 4 * 4 + 4 * max(0, length - _POOL_SIZE))
    pool = np.zeros((_POOL_SIZE, c), dtype=np.uint32)
    pool[: min(length, _POOL_SIZE)] = words[:_POOL_SIZE]
    pool = _hash(pool, xors[:4], mults[:4])
    k = _POOL_SIZE
    for src in range(_POOL_SIZE):
        dst = [d for d in range(_POOL_SIZE) if d != src]
        pool[dst] = _mix(pool[dst], _hash(pool[src], xors[k : k + 3], mults[k : k + 3]))
        k += 3
    for src in range(_POOL_SIZE, length):
        pool = _mix(pool, _hash(words[src], xors[k : k + 4], mults[k : k + 4]))
        k += 4
    xors, mults = _hash_consts(_INIT_B, _MULT_B, 2 * 4)  # 8 words, read as 4 uint64
    out = _hash(pool[[0, 1, 2, 3, 0, 1, 2, 3]], xors, mults)  # [8, C]
    # each uint64 is two consecutive words, the first its low half: rows of little-endian pairs
    return np.ascontiguousarray(out.T, dtype="<u4").view("<u8").astype(np.uint64, copy=False)


# below this many rows numpy's own generators cost less than the block's fixed cost (its
# arithmetic on [C] columns); tests/test_data.py checks both ways give numpy's draws
BLOCK_MIN_ROWS = 6


def _blockwise(keys: np.ndarray) -> np.ndarray:
    """[C] bool: the row is drawn in the block: its key is one 32-bit word per entry (else
    SeedSequence splits them) and the block has BLOCK_MIN_ROWS rows or more."""
    if len(keys) < BLOCK_MIN_ROWS:
        return np.zeros(len(keys), dtype=bool)
    return np.asarray(((keys >= 0) & (keys <= _U32)).all(1))


def _raw(keys: np.ndarray, words: int) -> np.ndarray:
    """[C, words] uint64: the first `words` raw outputs of ``PCG64(SeedSequence(row))`` for
    each row of `keys` (one 32-bit word per entry)."""
    seeds = _SeedStates(seed_states(keys))
    # numpy's stubs name SeedSequence; PCG64 takes any ISeedSequence
    rows = [
        np.random.PCG64(seeds).random_raw(words)  # type: ignore[arg-type]
        for _ in range(len(keys))
    ]
    return np.concatenate(rows).reshape(len(keys), words)


def generators(keys: np.ndarray) -> Iterator[np.random.Generator]:
    """``np.random.default_rng(row)`` for each row of `keys` ([C, L] non-negative ints), in
    turn, their SeedSequences hashed as one block (`seed_states`): for draws numpy's
    algorithms make one generator at a time (a Poisson count, say). Made as they are asked
    for: a generator holds about a kilobyte."""
    keys = np.asarray(keys, dtype=np.int64)
    usual = _blockwise(keys)
    seeds = _SeedStates(seed_states(keys[usual]))
    for block, key in zip(usual.tolist(), keys):
        seed = seeds if block else key.tolist()
        # numpy's stubs name SeedSequence; PCG64 takes any ISeedSequence
        yield np.random.Generator(np.random.PCG64(seed))  # type: ignore[arg-type]


def integers(keys: np.ndarray, highs: np.ndarray, count: int) -> np.ndarray:
    """[C, count] int64: row i is ``np.random.default_rng(keys[i]).integers(0, highs[i],
    count)`` (keys [C, L] non-negative ints)."""
    keys = np.asarray(keys, dtype=np.int64)
    highs = np.asarray(highs, dtype=np.int64)
    out = np.empty((len(highs), count), dtype=np.int64)
    if count == 0 or not len(highs):
        return out
    # numpy's 32-bit path (n = 1: no draw)
    usual = (highs >= 1) & (highs <= _WORD) & _blockwise(keys)
    rows = np.flatnonzero(usual)
    if len(rows):
        raw = _raw(keys[rows], (count + 1) // 2)
        # each 64-bit word's low half, then its high half: its two uint32 in memory order
        halves = raw.astype("<u8", copy=False).view("<u4")[:, :count]
        n = highs[rows].astype(np.uint64)[:, None]
        # m = word x n < 2**64, in place in the output where every row is drawn here: fresh
        # large temporaries each call cost their pages' faults more than the arithmetic
        whole = len(rows) == len(highs)
        m = np.multiply(halves, n, out=out.view(np.uint64) if whole else None)
        # Lemire rejects a leftover (m's low half) below (2**32 - n) mod n: a row has one if
        # its least leftover is (a minimum is one pass over the row; a comparison, a second)
        threshold = ((np.uint64(_WORD) - n[:, 0]) % n[:, 0]).astype(np.uint32)
        rejected = m.astype("<u8", copy=False).view("<u4")[:, 0::2].min(1) < threshold
        np.right_shift(m, np.uint64(32), out=m)  # each < 2**32
        if not whole:
            out[rows] = m.view(np.int64)
        usual[rows[rejected]] = False
    for i in np.flatnonzero(~usual):  # numpy itself: a rejection, or its error for bad input
        out[i] = np.random.default_rng(keys[i].tolist()).integers(0, highs[i], count)
    return out


def uniforms(keys: np.ndarray, count: int) -> np.ndarray:
    """[C, count] float64: row i is ``np.random.default_rng(keys[i]).random(count)`` (keys
    [C, L] non-negative ints): numpy's double is a raw 64-bit word's top 53 bits times 2**-53
    (``next_double`` in numpy/random/src/pcg64)."""
    keys = np.asarray(keys, dtype=np.int64)
    out = np.empty((len(keys), count), dtype=np.float64)
    if count == 0 or not len(keys):
        return out
    usual = _blockwise(keys)
    if usual.any():
        raw = _raw(keys[usual], count)
        out[usual] = np.right_shift(raw, np.uint64(11), out=raw) * 2.0**-53
    for i in np.flatnonzero(~usual):
        out[i] = np.random.default_rng(keys[i].tolist()).random(count)
    return out
