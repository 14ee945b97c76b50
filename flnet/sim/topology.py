"""Gossip topologies among the nodes that gossip, and their mixing matrices (numpy, networkx).

A topology is an undirected networkx graph on nodes ``0..n-1`` (the gossiping clients, in
order); a mixing matrix W is ``[n, n]`` with ``W[i, j]`` the weight node i gives to node j's
model (row convention: ``x_i <- sum_j W[i, j] x_j``), non-zero only on the graph's edges and the
diagonal. Weights:

- ``uniform``: ``W[i, j] = 1 / (deg_i + 1)`` over i's neighbours and itself (the DisPFL code's
  rule). Row-stochastic; symmetric (so doubly stochastic) only on a regular graph.
- ``metropolis_hastings``: ``W[i, j] = 1 / (1 + max(deg_i, deg_j))`` on each edge and
  ``W[i, i] = 1 - sum_j W[i, j]`` (Xiao & Boyd 2004): symmetric and doubly stochastic on any
  graph, as D-PSGD's analysis (Lian et al. 2017) and OledFL's Definition 1 assume.
- ``laziness`` a in [0, 1): ``(1 - a) W + a I``; a = 1/2 is the usual lazy walk, whose spectrum
  lies in [0, 1].

The spectral gap is ``1 - max_{i >= 2} |lambda_i(W)|`` (OledFL's 1 - psi), computed from the W
that is built, never from an asymptotic formula. Bad input is a `ScenarioError` naming the field.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np
from numpy.typing import ArrayLike

from flnet.errors import ScenarioError

if TYPE_CHECKING:  # the scenario's section, for annotations only
    from flnet.config import TopologyConfig

KINDS = ("ring", "grid", "torus", "exponential", "full", "erdos_renyi")
WEIGHTS = ("uniform", "metropolis_hastings")
ROW_SUM_TOL = 1e-9  # a row of a given W may be off 1 by float rounding of its entries, no more
ER_TRIES = 100  # Erdos-Renyi draws before giving up on a connected graph


def graph(
    kind: str,
    n: int,
    *,
    p: float | None = None,
    rng: np.random.Generator | None = None,
    field: str = "algorithm.topology",
) -> nx.Graph:
    """The undirected graph of `kind` on nodes 0..n-1.

    ring: i ~ i+1 mod n. grid / torus: a sqrt(n) x sqrt(n) mesh, node r * side + c, without /
    with wrap-around (n must be a square). exponential: i ~ i + 2^k mod n for 2^k < n. full:
    every pair. erdos_renyi: every pair independently with probability p, drawn from `rng`,
    redrawn (from the same generator, so reproducibly) until connected.
    """
    if n < 1:
        raise ScenarioError(f"needs at least one node, got {n}", field=field)
    if kind == "ring":
        g = nx.cycle_graph(n) if n > 2 else nx.path_graph(n)
    elif kind in ("grid", "torus"):
        side = math.isqrt(n)
        if side * side != n:
            raise ScenarioError(
                f"a {kind} needs a square number of nodes, got {n} "
                f"(nearest: {side * side} or {(side + 1) ** 2})",
                field=f"{field}.kind",
            )
        mesh = nx.grid_2d_graph(side, side, periodic=kind == "torus" and side > 2)
        g = nx.relabel_nodes(mesh, {(r, c): r * side + c for r, c in mesh.nodes})
    elif kind == "exponential":
        g = nx.empty_graph(n)
        hops = [2**k for k in range(max(1, n.bit_length())) if 2**k < n]
        g.add_edges_from((i, (i + h) % n) for i in range(n) for h in hops if (i + h) % n != i)
    elif kind == "full":
        g = nx.complete_graph(n)
    elif kind == "erdos_renyi":
        g = erdos_renyi(n, p, rng, field=field)
    else:
        raise ScenarioError(
            f"unknown topology {kind!r}; allowed: {', '.join(KINDS)}", field=f"{field}.kind"
        )
    check_connected(g, field=field)
    return g


def erdos_renyi(
    n: int, p: float | None, rng: np.random.Generator | None, *, field: str = "algorithm.topology"
) -> nx.Graph:
    """G(n, p), redrawn until connected: the number of edges ~ Binomial(n(n-1)/2, p), then
    that many distinct pairs uniformly (the same law as a coin per pair, in O(edges) time and
    memory, not O(n^2)), from numpy draws only, so the graph does not depend on the networkx
    version."""
    if p is None or not 0.0 <= p <= 1.0 or not math.isfinite(p):
        raise ScenarioError(
            f"the edge probability must be in [0, 1], got {p!r}", field=f"{field}.p"
        )
    if rng is None:
        raise ValueError("erdos_renyi needs a generator")
    pairs = n * (n - 1) // 2
    for _ in range(ER_TRIES):
        idx: np.ndarray | list[int] = (
            rng.choice(pairs, size=rng.binomial(pairs, p), replace=False) if pairs else []
        )
        g = nx.empty_graph(n)
        g.add_edges_from(zip(*_pair(np.asarray(idx, dtype=np.int64))))
        if n < 2 or nx.is_connected(g):
            return g
    raise ScenarioError(
        f"{ER_TRIES} draws of G({n}, {p:g}) were all disconnected; raise p "
        f"(connectivity needs about ln(n)/n = {math.log(max(n, 2)) / n:.3g})",
        field=f"{field}.p",
    )


def _pair(idx: np.ndarray) -> tuple[list[int], list[int]]:
    """Pair index -> (i, j), j < i, in the order (1, 0), (2, 0), (2, 1), (3, 0), ...:
    i(i-1)/2 <= idx < i(i+1)/2; the float square root corrected to the exact integer."""
    i = np.floor((1.0 + np.sqrt(1.0 + 8.0 * idx)) / 2.0).astype(np.int64)
    i -= i * (i - 1) // 2 > idx
    i += (i + 1) * i // 2 <= idx
    return i.tolist(), (idx - i * (i - 1) // 2).tolist()


def check_connected(g: nx.Graph, *, field: str = "algorithm.topology") -> None:
    """Gossip on a disconnected graph never reaches consensus: refuse it."""
    if g.number_of_nodes() > 1 and not nx.is_connected(g):
        parts = nx.number_connected_components(g)
        raise ScenarioError(
            f"the graph is disconnected ({parts} components); gossip could never reach consensus",
            field=field,
        )


def mixing_matrix(
    g: nx.Graph,
    weights: str = "metropolis_hastings",
    laziness: float = 0.0,
    *,
    field: str = "algorithm.topology",
) -> np.ndarray:
    """W [n, n] (float64) on graph `g` (nodes 0..n-1) with the given weight rule."""
    if not 0.0 <= laziness < 1.0:
        raise ScenarioError(f"must be in [0, 1), got {laziness!r}", field=f"{field}.laziness")
    n = g.number_of_nodes()
    deg = np.array([g.degree(i) for i in range(n)], dtype=np.float64)
    edges = np.array(list(g.edges), dtype=np.int64).reshape(-1, 2)
    i, j = np.concatenate([edges[:, 0], edges[:, 1]]), np.concatenate([edges[:, 1], edges[:, 0]])
    w = np.zeros((n, n))
    if weights == "uniform":
        w[i, j] = 1.0 / (deg[i] + 1.0)
        w[np.arange(n), np.arange(n)] = 1.0 / (deg + 1.0)
    elif weights == "metropolis_hastings":
        w[i, j] = 1.0 / (1.0 + np.maximum(deg[i], deg[j]))
        w[np.arange(n), np.arange(n)] = 1.0 - w.sum(axis=1)
    else:
        raise ScenarioError(
            f"unknown weights {weights!r}; allowed: {', '.join(WEIGHTS)}", field=f"{field}.weights"
        )
    if laziness:
        w = (1.0 - laziness) * w + laziness * np.eye(n)
    return w


def check_mixing(w: ArrayLike, *, field: str = "algorithm.topology.matrix") -> np.ndarray:
    """A W given by hand: square, finite, non-negative, rows summing to 1, and its support
    connected. Returns it as float64."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] == 0:
        raise ScenarioError(f"must be a non-empty square matrix, got shape {w.shape}", field=field)
    if not np.isfinite(w).all():
        raise ScenarioError("has an entry that is not a finite number", field=field)
    if (w < 0).any():
        i, j = map(int, np.argwhere(w < 0)[0])
        raise ScenarioError(f"entry [{i}][{j}] is {w[i, j]:g}; weights must be >= 0", field=field)
    sums = w.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > ROW_SUM_TOL)
    if len(bad):
        i = int(bad[0])
        raise ScenarioError(
            f"is not row-stochastic: row {i} sums to {sums[i]:.12g}, not 1", field=field
        )
    support = nx.from_numpy_array(((w + w.T) > 0).astype(np.int8))
    support.remove_edges_from(nx.selfloop_edges(support))
    check_connected(support, field=field)
    return w


def is_row_stochastic(w: np.ndarray, tol: float = ROW_SUM_TOL) -> bool:
    return bool((w >= 0).all() and np.allclose(w.sum(axis=1), 1.0, rtol=0, atol=tol))


def is_doubly_stochastic(w: np.ndarray, tol: float = ROW_SUM_TOL) -> bool:
    return is_row_stochastic(w, tol) and bool(np.allclose(w.sum(axis=0), 1.0, rtol=0, atol=tol))


def is_symmetric(w: np.ndarray, tol: float = 0.0) -> bool:
    return bool(np.allclose(w, w.T, rtol=0, atol=tol))


def spectral_gap(w: np.ndarray) -> float:
    """1 - |lambda_2|, the second largest eigenvalue modulus of W (1 for n = 1).

    Symmetric W: exact `eigvalsh`. A row-stochastic W from uniform weights is similar to a
    symmetric one (D^-1 (A + I)), so its eigenvalues are real too; any other W goes through the
    general `eigvals`.
    """
    if len(w) == 1:
        return 1.0
    lam = np.linalg.eigvalsh(w) if is_symmetric(w, 1e-12) else np.linalg.eigvals(w)
    mod = np.sort(np.abs(lam))[::-1]
    return float(1.0 - mod[1])


def from_config(
    cfg: TopologyConfig, n: int, rng: np.random.Generator, *, field: str = "algorithm.topology"
) -> np.ndarray:
    """W [n, n] for a scenario's topology section (`flnet.config.TopologyConfig`); `rng` draws
    random graphs (the run's TOPOLOGY stream)."""
    if cfg.kind == "matrix":
        w = check_mixing(cfg.matrix, field=f"{field}.matrix")
        if len(w) != n:
            raise ScenarioError(f"has {len(w)} rows for {n} nodes", field=f"{field}.matrix")
        return w
    g = graph(cfg.kind, n, p=cfg.p if cfg.kind == "erdos_renyi" else None, rng=rng, field=field)
    return mixing_matrix(g, cfg.weights, cfg.laziness, field=field)


def edges(w: np.ndarray) -> np.ndarray:
    """[M, 2] directed edges (sender j, receiver i) for every W[i, j] > 0, i != j: who sends
    its model to whom, in row-major order of W."""
    receiver, sender = np.nonzero((w > 0) & ~np.eye(len(w), dtype=bool))
    return np.stack([sender, receiver], axis=1).astype(np.int64)
