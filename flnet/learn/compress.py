"""Compression operators for gossip messages (the DFL paper's Section V-A, after Koloskova et
al. 2019): pure functions over ``[C, P]`` tensors, one row a node's message, each with the bits
that message puts on the wire.

`Q(x)` is what the receiver reconstructs (zeros where nothing was sent); quality
``E ||Q(x) - x||^2 <= (1 - delta) ||x||^2``. Bits follow the DFL digest's message model, with d
the parameters a message is charged as (`flnet.learn.wire.Wire`) and 32-bit values:

- identity: ``32 d``.
- top-k (k largest |x_i|): ``32 k + min(k ceil(log2 d), d)``: the values, plus their positions
  or a d-bit mask, whichever is smaller.
- rand-k (k coordinates drawn uniformly, not rescaled, delta = k / d): ``32 k + 64``: the values
  and a 64-bit seed from which the receiver redraws the positions.
- QSGD with s levels: ``32 + d (1 + ceil(log2(s + 1)))``: the norm, and per coordinate a sign
  and a level in 0..s. Scaled by 1/c, c = 1 + min(d / s^2, sqrt(d) / s), as the paper writes it
  (delta = 1 / c).
- random gossip (send x with probability p, else nothing; delta = p): ``32 d`` when sent, 1 bit
  (a "skip" flag) otherwise.

Random draws come from generators the caller passes, one per row (`flnet.rng`: RAND_K, QSGD,
RANDOM_GOSSIP keyed by (round, gossip step, node)), so a row's draws never depend on the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from flnet.rng import Stream
from flnet.schema import CompressionConfig

VALUE_BITS = 32
SEED_BITS = 64
SKIP_BITS = 1


class Compressed(NamedTuple):
    q: torch.Tensor  # [C, P] Q(x) as the receivers reconstruct it
    bits: np.ndarray  # [C] float: each row's message on the wire


def keep_count(fraction: float, d: int) -> int:
    """k = round(delta d), at least 1."""
    return max(1, min(d, round(fraction * d)))


def identity_bits(d: int) -> int:
    return VALUE_BITS * d


def top_k_bits(k: int, d: int) -> int:
    return VALUE_BITS * k + min(k * math.ceil(math.log2(d)) if d > 1 else 0, d)


def rand_k_bits(k: int) -> int:
    return VALUE_BITS * k + SEED_BITS


def qsgd_bits(levels: int, d: int) -> int:
    return VALUE_BITS + d * (1 + math.ceil(math.log2(levels + 1)))


def top_k(x: torch.Tensor, k: int) -> torch.Tensor:
    """Each row's k entries of largest magnitude, the rest 0 (ties: torch.topk's choice)."""
    idx = x.abs().topk(k, dim=1).indices
    return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))


def rand_k(x: torch.Tensor, k: int, gens: Sequence[np.random.Generator]) -> torch.Tensor:
    """Each row keeps k coordinates drawn uniformly without replacement from its generator."""
    idx = np.stack([g.choice(x.shape[1], size=k, replace=False) for g in gens])
    at = torch.as_tensor(idx, device=x.device)
    return torch.zeros_like(x).scatter_(1, at, x.gather(1, at))


def qsgd_scale(levels: int, d: int) -> float:
    """c = 1 + min(d / s^2, sqrt(d) / s)."""
    return 1.0 + min(d / levels**2, math.sqrt(d) / levels)


def qsgd(x: torch.Tensor, levels: int, gens: Sequence[np.random.Generator]) -> torch.Tensor:
    """sign(x) ||x|| / (s c) * floor(s |x| / ||x|| + xi), xi ~ U[0, 1]^d per row (a row of
    zeros stays zero)."""
    xi = torch.as_tensor(np.stack([g.random(x.shape[1]) for g in gens]), device=x.device)
    x64 = x.double()
    norm = x64.norm(dim=1, keepdim=True)
    level = torch.floor(levels * x64.abs() / norm.clamp_min(1e-300) + xi)
    q = x64.sign() * norm / (levels * qsgd_scale(levels, x.shape[1])) * level
    return q.to(x.dtype)


def random_gossip(
    x: torch.Tensor, p: float, gens: Sequence[np.random.Generator]
) -> tuple[torch.Tensor, np.ndarray]:
    """Each row is sent whole with probability p, else not at all: (Q(x), [C] sent)."""
    sent = np.array([g.random() < p for g in gens], dtype=bool)
    mask = torch.as_tensor(sent, device=x.device).unsqueeze(1)
    return torch.where(mask, x, torch.zeros_like(x)), sent


STREAMS = {"rand_k": Stream.RAND_K, "qsgd": Stream.QSGD, "random_gossip": Stream.RANDOM_GOSSIP}


def compress(
    cfg: CompressionConfig,
    x: torch.Tensor,
    draws: Callable[[Stream], Sequence[np.random.Generator]],
    wire_d: int,
) -> Compressed:
    """The operator `cfg` names on every row of x [C, P]; bits as messages of `wire_d`
    parameters (k scaled with it: the same delta). `draws(stream)` gives one generator per row,
    asked only by the random kinds, with their own stream (`STREAMS`)."""
    c, d = x.shape
    gens = draws(STREAMS[cfg.kind]) if cfg.kind in STREAMS else []
    if cfg.kind == "identity":
        return Compressed(x.clone(), np.full(c, float(identity_bits(wire_d))))
    if cfg.kind == "top_k":
        q, bits = (
            top_k(x, keep_count(cfg.fraction, d)),
            top_k_bits(keep_count(cfg.fraction, wire_d), wire_d),
        )
        return Compressed(q, np.full(c, float(bits)))
    if cfg.kind == "rand_k":
        q = rand_k(x, keep_count(cfg.fraction, d), gens)
        return Compressed(q, np.full(c, float(rand_k_bits(keep_count(cfg.fraction, wire_d)))))
    if cfg.kind == "qsgd":
        return Compressed(
            qsgd(x, cfg.levels, gens), np.full(c, float(qsgd_bits(cfg.levels, wire_d)))
        )
    q, sent = random_gossip(x, cfg.p, gens)
    return Compressed(q, np.where(sent, float(identity_bits(wire_d)), float(SKIP_BITS)))
