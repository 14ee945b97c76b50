"""Aggregation, the math side: weighted means of client models and gossip mixing.

Every server rule lives here once, as a function of the delivered rows ``[D, P]``: the mean
weighted by sample counts (FedAvg, MOON), the plain mean (SCAFFOLD, FedDyn: `mean`), the mean
weighted by multiplicity (DRFA and DRDM, whose clients are drawn with replacement:
`weighted_mean` with the draw counts). Robust rules (coordinate-wise median, trimmed mean) would
go here too, with the same shape, so that any algorithm can take them.

Models are stacked and flat: ``[n, P]``, one row per node. Mixing is ``W @ X`` over W's entries
(`flnet.sim.topology.Mixing`): each node's own model times its diagonal weight, plus, along
each directed edge j -> i, ``W[i, j] x_j`` added to row i. O((n + M) P) time for M edges; no
``[n, n]`` array is ever built.

**A message that did not arrive.** Node i mixes ``x_i + sum_j W[i, j] (x_j - x_i)`` over the
neighbours j whose message reached it (with every message there this is ``sum_j W[i, j] x_j``
since W's rows sum to 1): a missing message's weight stays on the node's own model. This is the
time-varying matrix ``W_t`` of gossip with link failures (Boyd et al. 2006, randomized gossip;
Koloskova et al. 2020, time-varying topologies): the failed links' weights moved to the diagonal.
It keeps every row stochastic, costs no memory, and, when a link fails both ways, keeps a
symmetric W symmetric, so the nodes' average is still preserved. Renormalising row i over the
arrivals instead would rescale each row differently and break double stochasticity on every
loss; keeping each neighbour's last message would cost a model per link.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # the time side's sparse W, for annotations only
    from flnet.sim.topology import Mixing


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


def effective_mixing(mixing: Mixing, arrived: np.ndarray | None) -> Mixing:
    """W_t: W without the edges whose message did not arrive, their weight added to the
    receiver's diagonal. `arrived` [M] bool per edge of `mixing` (in its order); None means all
    did, and W itself is returned. O(n + M)."""
    if arrived is None:
        return mixing
    arrived = np.asarray(arrived, dtype=bool)
    lost = ~arrived
    n = len(mixing.self_weight)
    moved = np.bincount(mixing.receiver[lost], mixing.weight[lost], minlength=n)
    return mixing._replace(
        sender=mixing.sender[arrived],
        receiver=mixing.receiver[arrived],
        weight=mixing.weight[arrived],
        self_weight=mixing.self_weight + moved,
    )


def mix(mixing: Mixing, x: torch.Tensor, arrived: np.ndarray | None = None) -> torch.Tensor:
    """Gossip mixing: row i of the result is sum_j W_t[i, j] x_j.

    mixing: W (row-stochastic) with n nodes and M edges, x [n, P], arrived [M] bool per edge or
    None -> [n, P]. The edges are added in rounds (`_rounds`), each a gather of at most n rows
    of x, so beyond the result it holds one more [n, P] at most, whatever the graph's density.
    Each round adds to every receiver once, so the sums run in one fixed order (a node's own
    term, then its senders in increasing order) on every device: the same bits run after run.
    """
    w_t = effective_mixing(mixing, arrived)
    rounds = _rounds(w_t.receiver)

    def put(a: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=x.device)

    out = x * put(w_t.self_weight, x.dtype).unsqueeze(1)
    weight, sender, receiver = put(w_t.weight, x.dtype), put(w_t.sender), put(w_t.receiver)
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
