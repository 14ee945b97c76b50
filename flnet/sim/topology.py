"""Gossip topologies among the nodes that gossip, and their mixing matrices (numpy, scipy).

A topology is an undirected graph on nodes ``0..n-1`` (the gossiping clients, in order), kept
as its ``[E, 2]`` edge array; a mixing matrix W (``[n, n]`` in the maths) has ``W[i, j]`` the
weight node i gives to node j's model (row convention: ``x_i <- sum_j W[i, j] x_j``), non-zero
only on the graph's edges and the diagonal. A run never builds W as an array: it is a sparse
`Mixing`, one entry per directed edge (j sends x_j to i) plus the diagonal: O(n + M) memory for
M directed edges, built in O(n + M log d) time for the largest degree d (putting the edges in
W's row-major order sorts each row's d columns). `Mixing.dense` and `mixing_matrix` give the
``[n, n]`` array for small-n analysis and tests (spectral gap, stochasticity). Weights:

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
import warnings
from typing import TYPE_CHECKING, NamedTuple

import networkx as nx
import numpy as np
from numpy.typing import ArrayLike

from flnet.errors import ScenarioError, TopologyWarning
from flnet.rng import Stream

if TYPE_CHECKING:  # the scenario's section and the World, for annotations only
    from flnet.config import TopologyConfig
    from flnet.sim.world import AbstractWorld

KINDS = ("ring", "grid", "torus", "exponential", "full", "star", "erdos_renyi")
PROPERTIES = ("row_stochastic", "doubly_stochastic", "symmetric", "connected")
PROPERTY_TOL = 1e-9  # float rounding of built weights, no more
WEIGHTS = ("uniform", "metropolis_hastings")
ROW_SUM_TOL = 1e-9  # a row of a given W may be off 1 by float rounding of its entries, no more
ER_TRIES = 100  # Erdos-Renyi draws before giving up on a connected graph
GAP_MAX_NODES = 1000  # spectral gaps (dense eigenvalues, O(n^3)) of static graphs up to this
GAP_MAX_NODES_VARYING = 200  # ... and of each iteration's W of a time-varying graph


class Mixing(NamedTuple):
    """A mixing matrix W by its entries: ``W[receiver[e], sender[e]] = weight[e]`` for each
    directed edge e (node sender[e] sends its model to node receiver[e]; every weight > 0),
    ``W[i, i] = self_weight[i]``, every other entry 0.

    The edges are in W's row-major order (by receiver, then sender): the order `exchange` sends
    in, and the one `flnet.learn.aggregate.mix` relies on.
    """

    sender: np.ndarray  # [M] int64, j
    receiver: np.ndarray  # [M] int64, i
    weight: np.ndarray  # [M] float64, W[i, j]
    self_weight: np.ndarray  # [n] float64, W[i, i]

    @property
    def num_nodes(self) -> int:
        return len(self.self_weight)

    def links(self) -> np.ndarray:
        """[M, 2] (sender, receiver): the `exchange` pattern's directed edges."""
        return np.stack([self.sender, self.receiver], axis=1)

    def dense(self) -> np.ndarray:
        """W [n, n] float64: n^2 memory, for small-n analysis and tests only."""
        w = np.diag(self.self_weight)
        w[self.receiver, self.sender] = self.weight
        return w


def effective_mixing(mixing: Mixing, arrived: np.ndarray | None) -> Mixing:
    """W_t: W without the edges whose message did not arrive, their weight added to the
    receiver's diagonal. `arrived` [M] bool per edge of `mixing` (in its order); None means all
    did, and W itself is returned. O(n + M).

    A lost message: node i mixes ``x_i + sum_j W[i, j] (x_j - x_i)`` over the neighbours j
    whose message reached it (with every message there this is ``sum_j W[i, j] x_j`` since W's
    rows sum to 1), so a missing message's weight stays on the node's own model. This is the
    time-varying ``W_t`` of gossip with link failures (Boyd et al. 2006, randomized gossip;
    Koloskova et al. 2020, time-varying topologies). It keeps every row stochastic, costs no
    memory, and, when a link fails both ways, keeps a symmetric W symmetric, so the nodes'
    average is still preserved. Renormalising row i over the arrivals instead would rescale each
    row differently and break double stochasticity on every loss; keeping each neighbour's last
    message would cost a model per link.
    """
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


def graph_edges(
    kind: str,
    n: int,
    *,
    p: float | None = None,
    rng: np.random.Generator | None = None,
    field: str = "algorithm.topology",
) -> np.ndarray:
    """[E, 2] int64: the undirected graph of `kind` on nodes 0..n-1, each edge once, checked
    connected. O(n + E) time and memory.

    ring: i ~ i+1 mod n. grid / torus: a sqrt(n) x sqrt(n) mesh, node r * side + c, without /
    with wrap-around (n must be a square; a 2 x 2 torus is the grid). exponential: i ~ i + 2^k
    mod n for 2^k < n. full: every pair. star: 0 ~ i for every other i. erdos_renyi: every
    pair independently with probability p, drawn from `rng`, redrawn (from the same generator,
    so reproducibly) until connected.
    """
    if n < 1:
        raise ScenarioError(f"needs at least one node, got {n}", field=field)
    if kind == "ring":
        i = np.arange(n if n > 2 else n - 1, dtype=np.int64)
        e = np.stack([i, (i + 1) % n], axis=1)
    elif kind in ("grid", "torus"):
        e = _mesh(kind, n, field)
    elif kind == "exponential":
        e = _exponential(n)
    elif kind == "full":
        e = np.stack(np.triu_indices(n, 1), axis=1).astype(np.int64)
    elif kind == "star":
        leaf = np.arange(1, n, dtype=np.int64)
        e = np.stack([np.zeros_like(leaf), leaf], axis=1)
    elif kind == "erdos_renyi":
        return erdos_renyi(n, p, rng, field=field)  # drawn until connected
    else:
        raise ScenarioError(
            f"unknown topology {kind!r}; allowed: {', '.join(KINDS)}", field=f"{field}.kind"
        )
    check_connected(n, e, field=field)
    return e


def _mesh(kind: str, n: int, field: str) -> np.ndarray:
    side = math.isqrt(n)
    if side * side != n:
        raise ScenarioError(
            f"a {kind} needs a square number of nodes, got {n} "
            f"(nearest: {side * side} or {(side + 1) ** 2})",
            field=f"{field}.kind",
        )
    node = np.arange(n, dtype=np.int64).reshape(side, side)
    pairs = [(node[:, :-1], node[:, 1:]), (node[:-1, :], node[1:, :])]
    if kind == "torus" and side > 2:  # on 2 x 2 the wrap-around edges are the mesh's own
        pairs += [(node[:, -1], node[:, 0]), (node[-1, :], node[0, :])]
    return np.concatenate([np.stack([a.ravel(), b.ravel()], axis=1) for a, b in pairs])


def _exponential(n: int) -> np.ndarray:
    """i ~ i + h mod n for each hop h = 2^k < n. Hops h and n - h give the same edges, so each
    distance d = min(h, n - h) is taken once; at d = n / 2, i ~ i + d only for i < d."""
    hops = [2**k for k in range(n.bit_length()) if 2**k < n]
    parts = [np.empty((0, 2), dtype=np.int64)]
    for d in sorted({min(h, n - h) for h in hops}):
        i = np.arange(d if 2 * d == n else n, dtype=np.int64)
        parts.append(np.stack([i, (i + d) % n], axis=1))
    return np.concatenate(parts)


def graph(
    kind: str,
    n: int,
    *,
    p: float | None = None,
    rng: np.random.Generator | None = None,
    field: str = "algorithm.topology",
) -> nx.Graph:
    """`graph_edges` as a networkx graph, for analysis and plots (a run never builds one)."""
    g = nx.empty_graph(n)
    g.add_edges_from(graph_edges(kind, n, p=p, rng=rng, field=field).tolist())
    return g


def erdos_renyi(
    n: int, p: float | None, rng: np.random.Generator | None, *, field: str = "algorithm.topology"
) -> np.ndarray:
    """[E, 2] edges of G(n, p), redrawn until connected: the number of edges ~
    Binomial(n(n-1)/2, p), then that many distinct pairs uniformly (the same law as a coin per
    pair, in O(edges) time and memory, not O(n^2)), from numpy draws only."""
    if p is None or not 0.0 <= p <= 1.0 or not math.isfinite(p):
        raise ScenarioError(
            f"the edge probability must be in [0, 1], got {p!r}", field=f"{field}.p"
        )
    if rng is None:
        raise ValueError("erdos_renyi needs a generator")
    pairs = n * (n - 1) // 2
    for _ in range(ER_TRIES):
        idx: np.ndarray = (
            rng.choice(pairs, size=rng.binomial(pairs, p), replace=False)
            if pairs
            else np.empty(0, np.int64)
        )
        i, j = _pair(np.asarray(idx, dtype=np.int64))
        e = np.stack([i, j], axis=1)
        if n < 2 or _components(n, e[:, 0], e[:, 1]) == 1:
            return e
    raise ScenarioError(
        f"{ER_TRIES} draws of G({n}, {p:g}) were all disconnected; raise p "
        f"(connectivity needs about ln(n)/n = {math.log(max(n, 2)) / n:.3g})",
        field=f"{field}.p",
    )


def _pair(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pair index -> (i, j), j < i, in the order (1, 0), (2, 0), (2, 1), (3, 0), ...:
    i(i-1)/2 <= idx < i(i+1)/2; the float square root corrected to the exact integer."""
    i = np.floor((1.0 + np.sqrt(1.0 + 8.0 * idx)) / 2.0).astype(np.int64)
    i -= i * (i - 1) // 2 > idx
    i += (i + 1) * i // 2 <= idx
    return i, idx - i * (i - 1) // 2


def _components(n: int, a: np.ndarray, b: np.ndarray) -> int:
    """Connected components of the graph with edges a[e] - b[e] (direction ignored), O(n + E).
    scipy is imported here, not at the top, so that loading the module stays light."""
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    adj = coo_array((np.ones(len(a), dtype=bool), (a, b)), shape=(n, n))
    return int(connected_components(adj, directed=True, connection="weak", return_labels=False))


def check_connected(n: int, edges: np.ndarray, *, field: str = "algorithm.topology") -> None:
    """Gossip on a disconnected graph never reaches consensus: refuse it. `edges` [E, 2]."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if n > 1 and (parts := _components(n, e[:, 0], e[:, 1])) > 1:
        raise ScenarioError(
            f"the graph is disconnected ({parts} components); gossip could never reach consensus",
            field=field,
        )


def from_edges(
    edges: ArrayLike,
    n: int,
    weights: str = "metropolis_hastings",
    laziness: float = 0.0,
    *,
    field: str = "algorithm.topology",
) -> Mixing:
    """The `Mixing` of the undirected graph with `edges` ([E, 2], each edge once, no self
    loops) on nodes 0..n-1 under a weight rule: O(n + E log d), d the largest degree."""
    if not 0.0 <= laziness < 1.0:
        raise ScenarioError(f"must be in [0, 1), got {laziness!r}", field=f"{field}.laziness")
    if weights not in WEIGHTS:
        raise ScenarioError(
            f"unknown weights {weights!r}; allowed: {', '.join(WEIGHTS)}", field=f"{field}.weights"
        )
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    sender = np.concatenate([e[:, 0], e[:, 1]])
    receiver = np.concatenate([e[:, 1], e[:, 0]])
    sender, receiver = _row_major(n, sender, receiver)
    deg = np.bincount(receiver, minlength=n).astype(np.float64)
    weight: np.ndarray
    self_weight: np.ndarray
    if weights == "uniform":
        weight = 1.0 / (deg[receiver] + 1.0)
        self_weight = 1.0 / (deg + 1.0)
    else:
        weight = 1.0 / (1.0 + np.maximum(deg[receiver], deg[sender]))
        self_weight = 1.0 - np.bincount(receiver, weight, minlength=n)
    if laziness:
        weight = (1.0 - laziness) * weight
        self_weight = (1.0 - laziness) * self_weight + laziness
    return Mixing(sender, receiver, weight, self_weight)


def _row_major(n: int, sender: np.ndarray, receiver: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The directed edges sorted by receiver, then sender (W's row-major order): scipy's CSR
    conversion, a counting sort by row (O(n + M)) and a sort within each row (O(M log d))."""
    from scipy.sparse import coo_array

    m = len(sender)
    w = coo_array((np.ones(m, dtype=bool), (receiver, sender)), shape=(n, n)).tocsr()
    w.sum_duplicates()  # sorts each row's columns too
    if w.nnz != m:
        raise ValueError(f"{m - w.nnz} duplicate edges")  # a bug in an edge generator
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(w.indptr))
    return w.indices.astype(np.int64), rows


def mixing_matrix(
    g: nx.Graph,
    weights: str = "metropolis_hastings",
    laziness: float = 0.0,
    *,
    field: str = "algorithm.topology",
) -> np.ndarray:
    """W [n, n] (float64) on the networkx graph `g` (nodes 0..n-1): small-n analysis only."""
    edges = np.array(list(g.edges), dtype=np.int64).reshape(-1, 2)
    return from_edges(edges, g.number_of_nodes(), weights, laziness, field=field).dense()


def check_mixing(w: ArrayLike, *, field: str = "algorithm.topology.matrix") -> np.ndarray:
    """A W given by hand: square, finite, non-negative, rows summing to 1, and its support
    connected. Returns it as float64."""
    if isinstance(w, list | tuple) and any(
        not isinstance(r, list | tuple) or len(r) != len(w) for r in w
    ):  # ragged: numpy would refuse it with its own words
        raise ScenarioError(
            f"must be a square matrix: {len(w)} rows of {len(w)} entries each", field=field
        )
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
    mixing = from_dense(w)
    check_connected(len(w), mixing.links(), field=field)
    return w


def from_dense(w: np.ndarray) -> Mixing:
    """The `Mixing` of a W [n, n] array (a matrix given by hand, small by nature): an edge
    j -> i for every W[i, j] > 0, i != j, in row-major order."""
    w = np.asarray(w, dtype=np.float64)
    receiver, sender = np.nonzero((w > 0) & ~np.eye(len(w), dtype=bool))
    return Mixing(
        sender.astype(np.int64), receiver.astype(np.int64), w[receiver, sender], np.diag(w).copy()
    )


def is_row_stochastic(w: np.ndarray, tol: float = ROW_SUM_TOL) -> bool:
    return bool((w >= 0).all() and np.allclose(w.sum(axis=1), 1.0, rtol=0, atol=tol))


def is_doubly_stochastic(w: np.ndarray, tol: float = ROW_SUM_TOL) -> bool:
    return is_row_stochastic(w, tol) and bool(np.allclose(w.sum(axis=0), 1.0, rtol=0, atol=tol))


def is_symmetric(w: np.ndarray, tol: float = 0.0) -> bool:
    return bool(np.allclose(w, w.T, rtol=0, atol=tol))


def spectral_gap(w: np.ndarray | Mixing) -> float:
    """1 - |lambda_2|, the second largest eigenvalue modulus of W (1 for n = 1); dense
    eigenvalues, so for small-n analysis.

    Symmetric W: exact `eigvalsh`. A row-stochastic W from uniform weights is similar to a
    symmetric one (D^-1 (A + I)), so its eigenvalues are real too; any other W goes through the
    general `eigvals`.
    """
    return gap_of(eigenvalues(w))


def gap_of(lam: np.ndarray) -> float:
    """`spectral_gap` from W's eigenvalues."""
    if len(lam) == 1:
        return 1.0
    mod = np.sort(np.abs(lam))[::-1]
    return float(1.0 - mod[1])


def eigenvalues(w: np.ndarray | Mixing) -> np.ndarray:
    """W's eigenvalues, dense (O(n^3)): `eigvalsh` where W is symmetric, else `eigvals`
    (complex). (`Schedule.eigenvalues` keeps its last W's.)"""
    if isinstance(w, Mixing):
        w = w.dense()
    return np.linalg.eigvalsh(w) if is_symmetric(w, 1e-12) else np.linalg.eigvals(w)


def edge_list(edges: ArrayLike, n: int, *, field: str = "algorithm.topology") -> np.ndarray:
    """[E, 2] edges given by hand: nodes in 0..n-1, no self loops, each pair once (either
    order), the graph connected."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    for i, (a, b) in enumerate(e.tolist()):
        if not (0 <= a < n and 0 <= b < n) or a == b:
            raise ScenarioError(
                f"[{a}, {b}] must join two different nodes in 0..{n - 1}",
                field=f"{field}.edges[{i}]",
            )
    pairs = np.sort(e, axis=1)
    _, first, count = np.unique(pairs, axis=0, return_index=True, return_counts=True)
    if (count > 1).any():
        a, b = pairs[first[np.argmax(count > 1)]].tolist()
        raise ScenarioError(f"the edge [{a}, {b}] is listed twice", field=f"{field}.edges")
    check_connected(n, e, field=field)
    return e


def random_geometric(
    xy_m: np.ndarray, radius_m: float, *, field: str = "algorithm.topology"
) -> np.ndarray:
    """[E, 2] edges of the random geometric graph: i ~ j when |p_i - p_j| <= radius_m, for
    positions xy_m [n, 2] (a k-d tree: O(n log n + E)); refused when disconnected."""
    from scipy.spatial import cKDTree

    n = len(xy_m)
    e = cKDTree(xy_m).query_pairs(radius_m, output_type="ndarray").astype(np.int64)
    e = e.reshape(-1, 2)
    if n > 1 and (parts := _components(n, e[:, 0], e[:, 1])) > 1:
        raise ScenarioError(
            f"a radio range of {radius_m:g} m leaves the graph disconnected ({parts} "
            "components); gossip could never reach consensus: raise it",
            field=f"{field}.radius_m",
        )
    return e


def random_k(n: int, k: int, rng: np.random.Generator, directed: bool = True) -> np.ndarray:
    """One iteration's draw: each node i picks k distinct other nodes uniformly (one `choice`
    per node, in node order, drawn at once: `_choices`). Directed: [n k, 2] edges j -> i (i
    hears the k it picked); undirected: the picks as undirected [E, 2] edges, each pair once.
    O(n k^2) for k <= FLOYD_MAX_K, else O(n k)."""
    if not 1 <= k <= n - 1:
        raise ValueError(f"k = {k} must be in 1..{n - 1}")
    picks = _choices(n - 1, k, n, rng)
    me = np.arange(n, dtype=np.int64)[:, None]
    picks = picks + (picks >= me)  # skip i itself
    if directed:
        return np.stack([picks.ravel(), np.repeat(me.ravel(), k)], axis=1).astype(np.int64)
    pairs = np.sort(np.stack([np.repeat(me.ravel(), k), picks.ravel()], axis=1), axis=1)
    return np.unique(pairs, axis=0).astype(np.int64)


FLOYD_MAX_K = 16  # beyond this, Floyd's collision check over [n, k] costs more than the loop


def _choices(pop: int, k: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """[rows, k]: ``rng.choice(pop, k, replace=False)`` once per row in turn, the same numbers
    and the same stream state after, drawn at once where numpy uses Floyd's algorithm (pop at
    most 10,000 or k at most pop / 50; here also k <= FLOYD_MAX_K), else by that loop.

    What numpy's ``Generator.choice`` does there (numpy/random/_generator.pyx): for j = pop - k
    .. pop - 1 a draw v in [0, j], kept unless already taken, then j; then a Fisher-Yates
    shuffle of the k, a draw in [0, i] for i = k - 1 .. 1. Each draw is one
    ``random_bounded_uint64`` call, which ``integers`` with an array of bounds makes for each
    element in order, so one `integers` call over every row's bounds consumes the stream
    exactly as the loop does (tests/test_topology.py checks it draw for draw)."""
    if k > FLOYD_MAX_K or (pop > 10_000 and k > pop // 50):
        return np.stack([rng.choice(pop, size=k, replace=False) for _ in range(rows)])
    picked = np.arange(pop - k, pop)
    swaps = np.arange(k - 1, 0, -1)
    bounds = np.concatenate([picked, swaps])
    draws = rng.integers(0, np.tile(bounds, rows) + 1).reshape(rows, len(bounds))
    out = np.empty((rows, k), dtype=np.int64)
    for t, j in enumerate(picked.tolist()):  # Floyd: a draw already taken gives j
        v = draws[:, t]
        out[:, t] = np.where((out[:, :t] == v[:, None]).any(axis=1), j, v)
    every = np.arange(rows)
    for t, i in enumerate(swaps.tolist(), start=k):  # the shuffle: swap i with the draw
        j = draws[:, t]
        here, there = out[:, i].copy(), out[every, j]
        out[:, i], out[every, j] = there, here
    return out


def from_directed(edges: np.ndarray, n: int) -> Mixing:
    """The uniform Mixing of directed edges j -> i ([M, 2] (sender, receiver), no duplicates):
    W[i, j] = 1 / (in_deg_i + 1) on i's senders and itself. Row-stochastic; doubly stochastic
    only when every node is heard by as many as it hears."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    sender, receiver = _row_major(n, e[:, 0], e[:, 1])
    deg = np.bincount(receiver, minlength=n).astype(np.float64)
    return Mixing(sender, receiver, 1.0 / (deg[receiver] + 1.0), 1.0 / (deg + 1.0))


def is_time_varying(cfg: TopologyConfig) -> bool:
    """A topology drawn afresh every iteration (`from_config` with that iteration's rng)."""
    return cfg.kind == "random_k"


def from_config(
    cfg: TopologyConfig,
    n: int,
    rng: np.random.Generator,
    *,
    xy_m: np.ndarray | None = None,
    field: str = "algorithm.topology",
) -> Mixing:
    """The `Mixing` of a scenario's topology section (`flnet.config.TopologyConfig`) on n nodes,
    O(n + edges) for every graph kind; `rng` draws random graphs (the run's TOPOLOGY stream, or
    for a time-varying kind that iteration's NEIGHBOURS stream); `xy_m` [n, 2] the nodes'
    positions (random_geometric)."""
    if cfg.kind == "matrix":
        w = check_mixing(cfg.matrix, field=f"{field}.matrix")
        if len(w) != n:
            raise ScenarioError(f"has {len(w)} rows for {n} nodes", field=f"{field}.matrix")
        return from_dense(w)
    if cfg.kind == "random_k":
        if cfg.k > n - 1:
            raise ScenarioError(
                f"{cfg.k} neighbours, but there are {n - 1} other nodes", field=f"{field}.k"
            )
        e = random_k(n, cfg.k, rng, cfg.directed)
        if cfg.directed:
            return _lazy(from_directed(e, n), cfg.laziness)
        return from_edges(e, n, cfg.weights, cfg.laziness, field=field)
    if cfg.kind == "edges":
        edges = edge_list(cfg.edges, n, field=field)
    elif cfg.kind == "random_geometric":
        if xy_m is None:
            raise ScenarioError("random_geometric needs clients.positions", field=f"{field}.kind")
        edges = random_geometric(xy_m, cfg.radius_m, field=field)
    else:
        p = cfg.p if cfg.kind == "erdos_renyi" else None
        edges = graph_edges(cfg.kind, n, p=p, rng=rng, field=field)
    return from_edges(edges, n, cfg.weights, cfg.laziness, field=field)


def _lazy(w: Mixing, laziness: float) -> Mixing:
    if not laziness:
        return w
    return w._replace(
        weight=(1.0 - laziness) * w.weight, self_weight=(1.0 - laziness) * w.self_weight + laziness
    )


# ---------------------------------------------------------------- what an algorithm needs of W


def violations(w: Mixing, properties: tuple[str, ...]) -> dict[str, str]:
    """For each of `properties` (names in PROPERTIES) that W lacks, why: O(n + M) on the sparse
    entries. Connected means weakly connected (for an undirected graph, connected)."""
    n = w.num_nodes
    why: dict[str, str] = {}
    rows = w.self_weight + np.bincount(w.receiver, w.weight, minlength=n)
    cols = w.self_weight + np.bincount(w.sender, w.weight, minlength=n)
    for prop in properties:
        if prop == "row_stochastic" and (bad := _off_one(rows)) is not None:
            why[prop] = f"row {bad} sums to {rows[bad]:.6g}, not 1"
        elif prop == "doubly_stochastic" and (bad := _off_one(cols)) is not None:
            why[prop] = f"column {bad} sums to {cols[bad]:.6g}, not 1 (the nodes' average drifts)"
        elif prop == "symmetric" and (pair := _asymmetric(w)) is not None:
            i, j = pair
            why[prop] = f"W[{i}, {j}] != W[{j}, {i}]"
        elif prop == "connected" and n > 1 and (parts := _components(n, w.sender, w.receiver)) > 1:
            why[prop] = f"the graph has {parts} components"
        elif prop not in PROPERTIES:
            raise ValueError(f"unknown property {prop!r}; known: {', '.join(PROPERTIES)}")
    return why


def _off_one(sums: np.ndarray) -> int | None:
    bad = np.flatnonzero(np.abs(sums - 1.0) > PROPERTY_TOL)
    return int(bad[0]) if len(bad) else None


def _asymmetric(w: Mixing) -> tuple[int, int] | None:
    """A pair (i, j) with W[i, j] != W[j, i], or None: the transpose's entries sorted into W's
    row-major order must be W's own."""
    n = w.num_nodes
    from scipy.sparse import coo_array

    a = coo_array((w.weight, (w.receiver, w.sender)), shape=(n, n)).tocsr()
    diff = (a - a.T).tocoo()
    big = np.flatnonzero(np.abs(diff.data) > PROPERTY_TOL)
    if not len(big):
        return None
    return int(diff.row[big[0]]), int(diff.col[big[0]])


def check_properties(
    w: Mixing,
    *,
    algorithm: str,
    needs: tuple[str, ...] = (),
    assumes: tuple[str, ...] = (),
    field: str = "algorithm.topology",
) -> None:
    """Refuse a W that lacks a property `algorithm` needs to run as written (a ScenarioError
    naming the property); warn (`TopologyWarning`, naming it) when it lacks one the algorithm's
    analysis assumes."""
    for prop, why in violations(w, needs).items():
        raise ScenarioError(f"{algorithm} needs a {prop.replace('_', ' ')} W: {why}", field=field)
    for prop, why in violations(w, assumes).items():
        warnings.warn(
            f"{field}: {algorithm}'s analysis assumes a {prop.replace('_', ' ')} W, and this "
            f"one is not: {why}; it runs anyway",
            TopologyWarning,
            stacklevel=2,
        )


class Schedule:
    """The W of every iteration of a gossip algorithm: one W built once, or, for a time-varying
    topology, a fresh draw per iteration (stream NEIGHBOURS keyed by the iteration, so a resumed
    run draws the same). The first W is checked against what the algorithm needs and assumes
    (`check_properties`; a time-varying graph need not be connected in any one iteration)."""

    def __init__(
        self,
        world: AbstractWorld,
        cfg: TopologyConfig,
        n: int,
        *,
        algorithm: str,
        needs: tuple[str, ...] = ("row_stochastic", "connected"),
        assumes: tuple[str, ...] = (),
    ) -> None:
        self.world, self.cfg, self.n = world, cfg, n
        self.varying = is_time_varying(cfg)
        self._static: Mixing | None = None
        self._last: tuple[int, Mixing] | None = None  # a time-varying graph's last W drawn
        self._spectrum: tuple[Mixing, np.ndarray] | None = None  # the last W's eigenvalues
        if self.varying:
            needs = tuple(p for p in needs if p != "connected")
            first = self.at(1)
        else:
            xy = world.positions_m(np.arange(n)) if cfg.kind == "random_geometric" else None
            first = self._static = from_config(cfg, n, world.generator(Stream.TOPOLOGY), xy_m=xy)
        check_properties(first, algorithm=algorithm, needs=needs, assumes=assumes)
        limit = GAP_MAX_NODES_VARYING if self.varying else GAP_MAX_NODES
        self._gap = gap_of(self.eigenvalues(first)) if n <= limit else None

    def at(self, k: int) -> Mixing:
        """W of iteration k (a time-varying graph's drawn once however often it is asked: the
        checks at the start and the first iteration all ask for W_1)."""
        if self._static is not None:
            return self._static
        if self._last is not None and self._last[0] == k:
            return self._last[1]
        w = from_config(self.cfg, self.n, self.world.generator(Stream.NEIGHBOURS, k))
        self._last = (k, w)
        return w

    def eigenvalues(self, w: Mixing) -> np.ndarray:
        """`eigenvalues` of W, kept for the next question about the same W: the start's
        spectral gap and OledFL's lambda_min both ask of round 1's (O(n^3) each time)."""
        if self._spectrum is None or self._spectrum[0] is not w:
            self._spectrum = (w, eigenvalues(w))
        return self._spectrum[1]

    def figures(self, w: Mixing) -> dict[str, float]:
        """`spectral_gap` of W (this iteration's, for a time-varying graph) for the records:
        empty above GAP_MAX_NODES nodes (GAP_MAX_NODES_VARYING when time-varying)."""
        if not self.varying:
            return {} if self._gap is None else {"spectral_gap": self._gap}
        if self.n > GAP_MAX_NODES_VARYING:
            return {}
        return {"spectral_gap": spectral_gap(w)}
