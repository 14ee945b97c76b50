"""Aggregation, the math side: weighted means of client models and gossip mixing.

Every server rule lives here once, as a function of the delivered rows ``[D, P]``: the mean
weighted by sample counts (FedAvg, MOON), the plain mean (SCAFFOLD, FedDyn: `mean`), the mean
weighted by multiplicity (DRFA and DRDM, whose clients are drawn with replacement:
`weighted_mean` with the draw counts), and the robust rules, coordinate-wise `median` and
`trimmed_mean` (Yin et al., "Byzantine-Robust Distributed Learning", ICML 2018), which weigh
every delivered row the same: a client's sample count is its own claim, and a rule that
trusted it would not be robust. `combine` picks one by name (a scenario's `server.rule`).

Models are stacked and flat: ``[n, P]``, one row per node. Mixing is ``W @ X`` over W's entries
(`Entries`: the arrays of `flnet.sim.topology.Mixing`, which the algorithms pass): each node's
own model times its diagonal weight, plus, along each directed edge j -> i, ``W[i, j] x_j``
added to row i. O((n + M) P) time for M edges; no ``[n, n]`` array is ever built.

A message that did not arrive leaves its weight on the receiver's own model: the algorithms
mix with W_t, `flnet.sim.topology.effective_mixing` (which says why).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import torch

RULES = ("weighted_mean", "mean", "median", "trimmed_mean")


class Entries(Protocol):
    """W by its entries, ``W[receiver[e], sender[e]] = weight[e]`` and ``W[i, i] =
    self_weight[i]``, edges sorted by receiver (`flnet.sim.topology.Mixing` is one)."""

    @property
    def sender(self) -> np.ndarray: ...  # [M] int64

    @property
    def receiver(self) -> np.ndarray: ...  # [M] int64

    @property
    def weight(self) -> np.ndarray: ...  # [M] float64

    @property
    def self_weight(self) -> np.ndarray: ...  # [n] float64


def delivered_rows(rows: torch.Tensor, positions: np.ndarray) -> torch.Tensor:
    """rows[positions] for sorted cohort `positions`: `rows` itself (no copy) when every member
    delivered."""
    if len(positions) == rows.shape[0]:
        return rows
    return rows.index_select(0, torch.as_tensor(positions, device=rows.device))


# the numpy types of the torch dtypes models train in (numpy has no bfloat16)
_HOST_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


def weighted_mean(params: torch.Tensor, weights: np.ndarray) -> torch.Tensor:
    """sum_k w_k / sum(w) * params[k]: [C, P], [C] -> [P]. The weights are cast to the
    models' dtype on the host where numpy has it: the same numbers, for a fraction of what
    torch's cast of a fresh tensor costs between rounds."""
    host = _HOST_DTYPES.get(params.dtype)
    if host is None:
        w = torch.as_tensor(weights, dtype=params.dtype, device=params.device)
    else:
        w = torch.from_numpy(np.asarray(weights, dtype=host)).to(params.device)
    return (w @ params) / w.sum()


def mean(params: torch.Tensor) -> torch.Tensor:
    """(1/D) sum_k params[k]: [D, P] -> [P], every delivered client weighing the same."""
    return params.mean(0)


def trimmed_mean(params: torch.Tensor, trim_fraction: float) -> torch.Tensor:
    """Per coordinate, the mean of the D values left once the floor(trim_fraction * D) largest
    and as many smallest are dropped: [D, P] -> [P]. trim_fraction in [0, 1/2) leaves at
    least one; 0 is `mean`."""
    if not 0 <= trim_fraction < 0.5:
        raise ValueError(f"trim_fraction must be in [0, 0.5), got {trim_fraction}")
    return _middle_mean(params, math.floor(trim_fraction * params.shape[0]))


def median(params: torch.Tensor) -> torch.Tensor:
    """The coordinate-wise median: [D, P] -> [P]; for an even D the mean of the two middle
    values (numpy's), not torch.median's lower one, so it is symmetric in the values."""
    return _middle_mean(params, (params.shape[0] - 1) // 2)


def _middle_mean(params: torch.Tensor, drop: int) -> torch.Tensor:
    """Per coordinate, the mean of the sorted values without the `drop` lowest and highest."""
    if drop == 0:
        return mean(params)
    return params.sort(dim=0).values[drop : params.shape[0] - drop].mean(0)


def combine(
    rule: str, params: torch.Tensor, num_samples: np.ndarray, trim_fraction: float = 0.0
) -> torch.Tensor:
    """The delivered rows [D, P] as one [P] by `rule` (one of RULES); `num_samples` [D] weigh
    them only under weighted_mean."""
    if rule == "weighted_mean":
        return weighted_mean(params, num_samples)
    if rule == "mean":
        return mean(params)
    if rule == "median":
        return median(params)
    if rule == "trimmed_mean":
        return trimmed_mean(params, trim_fraction)
    raise ValueError(f"unknown server rule {rule!r}; allowed: {RULES}")


def mix(w: Entries, x: torch.Tensor) -> torch.Tensor:
    """Gossip mixing: row i of the result is sum_j W[i, j] x_j.

    w: W (row-stochastic; W_t, `flnet.sim.topology.effective_mixing`, where messages were
    lost) with n nodes and M edges, x [n, P] -> [n, P]. The edges are added in rounds
    (`_rounds`), each a gather of at most n rows of x, so beyond the result it holds one more
    [n, P] at most, whatever the graph's density. Each round adds to every receiver once, so
    the sums run in one fixed order (a node's own term, then its senders in increasing order)
    on every device: the same bits run after run.
    """
    rounds = _rounds(w.receiver)

    def put(a: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=x.device)

    out = x * put(w.self_weight, x.dtype).unsqueeze(1)
    weight, sender, receiver = put(w.weight, x.dtype), put(w.sender), put(w.receiver)
    for edges in rounds:
        e = put(edges)
        rows = x.index_select(0, sender[e]).mul_(weight[e].unsqueeze(1))
        out.index_add_(0, receiver[e], rows)
    return out


def _rounds(receiver: np.ndarray) -> list[np.ndarray]:
    """The edges (positions, edges sorted by receiver as `Mixing` keeps them) split into rounds:
    round k holds each receiver's k-th edge, so no receiver appears twice in a round. As many
    rounds as the largest in-degree; O(M log M) numpy on the indices (a stable sort by rank)."""
    m = len(receiver)
    if m == 0:
        return []
    if (receiver[1:] < receiver[:-1]).any():
        raise ValueError("the mixing's edges must be sorted by receiver (W's row-major order)")
    count = np.bincount(receiver)
    rank = np.arange(m) - (np.cumsum(count) - count)[receiver]  # k: the receiver's k-th edge
    order = np.argsort(rank, kind="stable")
    return np.split(order, np.cumsum(np.bincount(rank))[:-1])


def consensus_distance(x: torch.Tensor) -> float:
    """(1/n) sum_i ||x_i - x_bar||_2^2 over nodes x [n, P]: the mean squared Euclidean distance
    of the nodes' models to their average (OledFL's consensus term, Lemma 4), in float64."""
    x64 = x.double()
    return float((x64 - x64.mean(dim=0)).square().sum(dim=1).mean())
