import math

import networkx as nx
import numpy as np
import pytest

from flnet.config import ErdosRenyiTopology, GraphTopology, MatrixTopology
from flnet.errors import ScenarioError
from flnet.sim import topology as topo


def test_ring_of_four_uniform_by_hand():
    w = topo.mixing_matrix(topo.graph("ring", 4), "uniform")
    third = 1 / 3
    assert np.array_equal(
        w,
        np.array(
            [
                [third, third, 0, third],
                [third, third, third, 0],
                [0, third, third, third],
                [third, 0, third, third],
            ]
        ),
    )
    assert topo.is_doubly_stochastic(w) and topo.is_symmetric(w)


def test_metropolis_hastings_on_a_path_of_three_by_hand():
    """Degrees 1, 2, 1: every edge weighs 1/(1 + 2) = 1/3; the ends keep 2/3, the middle 1/3."""
    w = topo.mixing_matrix(nx.path_graph(3), "metropolis_hastings")
    np.testing.assert_allclose(
        w, [[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]], rtol=0, atol=1e-15
    )
    assert topo.is_doubly_stochastic(w) and topo.is_symmetric(w)


def test_uniform_on_an_irregular_graph_is_row_but_not_column_stochastic():
    w = topo.mixing_matrix(nx.path_graph(3), "uniform")
    np.testing.assert_allclose(w, [[1 / 2, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 2, 1 / 2]])
    assert topo.is_row_stochastic(w)
    assert not topo.is_doubly_stochastic(w) and not topo.is_symmetric(w)


def test_metropolis_hastings_is_doubly_stochastic_on_irregular_graphs():
    rng = np.random.default_rng(3)
    for g in (
        nx.star_graph(5),
        topo.graph("erdos_renyi", 12, p=0.3, rng=rng),
        topo.graph("grid", 9),
    ):
        w = topo.mixing_matrix(g, "metropolis_hastings")
        assert topo.is_doubly_stochastic(w) and topo.is_symmetric(w)


def test_spectral_gaps_of_known_graphs():
    # path of 3 with MH weights: eigenvalues 1, 2/3, 0 (by hand: trace 4/3, det 0)
    w = topo.mixing_matrix(nx.path_graph(3), "metropolis_hastings")
    assert topo.spectral_gap(w) == pytest.approx(1 / 3, abs=1e-12)
    # ring of m, uniform 1/3: lambda_k = 1/3 + 2/3 cos(2 pi k / m); for m = 6 the moduli are
    # 1, 2/3, 2/3, 0, 0, 1/3 -> gap 1/3
    assert topo.spectral_gap(topo.mixing_matrix(topo.graph("ring", 6), "uniform")) == pytest.approx(
        1 / 3, abs=1e-12
    )
    # ring of 16: OledFL digest's table, lambda_2 = 0.9493
    gap16 = topo.spectral_gap(topo.mixing_matrix(topo.graph("ring", 16), "uniform"))
    assert gap16 == pytest.approx((2 / 3) * (1 - math.cos(2 * math.pi / 16)), abs=1e-12)
    # full graph: W = 11^T / n, every other eigenvalue 0
    assert topo.spectral_gap(topo.mixing_matrix(topo.graph("full", 5), "uniform")) == pytest.approx(
        1.0, abs=1e-12
    )
    # uniform weights on a path (not symmetric): eigenvalues 1, 1/2 (eigenvector (1, 0, -1))
    # and 4/3 - 1 - 1/2 = -1/6 (trace 4/3) -> gap 1/2
    wu = topo.mixing_matrix(nx.path_graph(3), "uniform")
    assert topo.spectral_gap(wu) == pytest.approx(1 / 2, abs=1e-12)


def test_laziness_moves_weight_to_the_diagonal():
    w = topo.mixing_matrix(topo.graph("ring", 4), "uniform", laziness=0.5)
    np.testing.assert_allclose(np.diag(w), 0.5 + 0.5 / 3)
    assert topo.is_doubly_stochastic(w)
    assert np.linalg.eigvalsh(w).min() >= -1e-12  # the lazy walk's spectrum lies in [0, 1]


def test_graph_shapes():
    assert sorted(topo.graph("ring", 5).degree(i) for i in range(5)) == [2] * 5
    torus = topo.graph("torus", 16)
    assert all(d == 4 for _, d in torus.degree)
    grid = topo.graph("grid", 9)
    assert sorted(d for _, d in grid.degree) == [2, 2, 2, 2, 3, 3, 3, 3, 4]
    expo = topo.graph("exponential", 8)  # hops 1, 2, 4: 4 is its own inverse mod 8
    assert all(d == 5 for _, d in expo.degree)
    assert topo.graph("full", 4).number_of_edges() == 6
    assert topo.graph("ring", 1).number_of_nodes() == 1


def test_erdos_renyi_is_seeded_and_connected():
    er = ErdosRenyiTopology(kind="erdos_renyi", p=0.3)
    a, b, c = (topo.from_config(er, 20, np.random.default_rng(s)).dense() for s in (1, 1, 2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert topo.spectral_gap(a) > 0


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: topo.graph("torus", 10), "algorithm.topology.kind"),
        (lambda: topo.graph("grid", 8), "algorithm.topology.kind"),
        (lambda: topo.erdos_renyi(10, 1.5, np.random.default_rng(0)), "algorithm.topology.p"),
        (lambda: topo.erdos_renyi(10, -0.1, np.random.default_rng(0)), "algorithm.topology.p"),
        (lambda: topo.erdos_renyi(30, 0.0, np.random.default_rng(0)), "algorithm.topology.p"),
        (lambda: topo.check_connected(4, np.array([[0, 1], [2, 3]])), "algorithm.topology"),
        (lambda: topo.mixing_matrix(topo.graph("ring", 4), "equal"), "algorithm.topology.weights"),
        (lambda: topo.graph("hypercube", 4), "algorithm.topology.kind"),
    ],
)
def test_impossible_topologies_name_their_field(make, field):
    with pytest.raises(ScenarioError) as err:
        make()
    assert err.value.field == field


@pytest.mark.parametrize(
    "matrix, words",
    [
        ([[0.5, 0.4], [0.5, 0.5]], "row 0 sums to 0.9"),
        ([[1.5, -0.5], [0.5, 0.5]], "must be >= 0"),
        ([[1.0, 0.0], [0.0, 1.0]], "disconnected"),
        ([[1.0, 0.0, 0.0]], "square"),
    ],
)
def test_a_given_matrix_must_be_stochastic_and_connected(matrix, words):
    with pytest.raises(ScenarioError, match=words) as err:
        topo.from_config(
            MatrixTopology(kind="matrix", matrix=matrix), len(matrix), np.random.default_rng(0)
        )
    assert err.value.field == "algorithm.topology.matrix"


def test_a_given_matrix_is_used_as_is_and_its_neighbours_read_off_it():
    m = [[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.0, 1.0, 0.0]]
    w = topo.from_config(MatrixTopology(kind="matrix", matrix=m), 3, np.random.default_rng(0))
    assert np.array_equal(w.dense(), np.array(m))
    assert w.links().tolist() == [[1, 0], [0, 1], [2, 1], [1, 2]]  # (sender j, receiver i)


def test_default_topology_is_a_metropolis_hastings_ring():
    w = topo.from_config(GraphTopology(), 5, np.random.default_rng(0))
    assert np.array_equal(
        w.dense(), topo.mixing_matrix(topo.graph("ring", 5), "metropolis_hastings")
    )


def test_erdos_renyi_pairs_are_every_pair_once():
    i, j = topo._pair(np.arange(10 * 9 // 2))
    assert sorted(zip(i, j)) == [(a, b) for a in range(10) for b in range(a)]
    big = np.array([2**40 + 12345, 2**52 - 1])  # where a float square root alone is off
    i, j = topo._pair(big)
    for k, a, b in zip(big.tolist(), i, j):
        assert a * (a - 1) // 2 + b == k and 0 <= b < a


def test_erdos_renyi_edge_count_follows_p():
    """n = 200, p = 0.1: 19900 pairs, about 1990 edges (std 42)."""
    e = topo.erdos_renyi(200, 0.1, np.random.default_rng(0))
    assert abs(len(e) - 1990) < 5 * 42
    assert len(topo.erdos_renyi(5, 1.0, np.random.default_rng(0))) == 10


def networkx_graph(kind: str, n: int) -> nx.Graph:
    """The graphs as networkx's generators make them (what flnet built before it went sparse)."""
    if kind == "ring":
        return nx.cycle_graph(n) if n > 2 else nx.path_graph(n)
    if kind in ("grid", "torus"):
        side = math.isqrt(n)
        mesh = nx.grid_2d_graph(side, side, periodic=kind == "torus" and side > 2)
        return nx.relabel_nodes(mesh, {(r, c): r * side + c for r, c in mesh.nodes})
    if kind == "exponential":
        g = nx.empty_graph(n)
        hops = [2**k for k in range(n.bit_length()) if 2**k < n]
        g.add_edges_from((i, (i + h) % n) for i in range(n) for h in hops if (i + h) % n != i)
        return g
    if kind == "star":
        return nx.star_graph(n - 1) if n > 1 else nx.empty_graph(1)
    return nx.complete_graph(n)


def dense_rule(g: nx.Graph, weights: str, laziness: float) -> np.ndarray:
    """W [n, n] from the weight rules' formulas, entry by entry."""
    n = g.number_of_nodes()
    w = np.zeros((n, n))
    for i, j in g.edges:
        for a, b in ((i, j), (j, i)):
            deg_a, deg_b = g.degree(a), g.degree(b)
            w[a, b] = 1 / (deg_a + 1) if weights == "uniform" else 1 / (1 + max(deg_a, deg_b))
    for i in range(n):
        w[i, i] = 1 / (g.degree(i) + 1) if weights == "uniform" else 1 - w[i].sum()
    return (1 - laziness) * w + laziness * np.eye(n)


@pytest.mark.parametrize(
    "kind, sizes",
    [
        ("ring", [1, 2, 3, 4, 7]),
        ("grid", [1, 4, 9, 16]),
        ("torus", [1, 4, 9, 16, 25]),
        ("exponential", list(range(1, 20))),
        ("full", [1, 2, 3, 6]),
        ("star", [1, 2, 3, 7]),
    ],
)
def test_edge_arrays_are_networkxs_graphs_and_the_mixing_their_rule(kind, sizes):
    for n in sizes:
        g = networkx_graph(kind, n)
        edges = topo.graph_edges(kind, n)
        assert len(edges) == g.number_of_edges()  # each edge once
        assert {frozenset(e) for e in edges.tolist()} == {frozenset(e) for e in g.edges}
        for weights in topo.WEIGHTS:
            for laziness in (0.0, 0.3):
                m = topo.from_edges(edges, n, weights, laziness)
                w = dense_rule(g, weights, laziness)
                np.testing.assert_allclose(m.dense(), w, rtol=0, atol=1e-15)
                receiver, sender = np.nonzero((w > 0) & ~np.eye(n, dtype=bool))
                assert np.array_equal(m.receiver, receiver)  # W's row-major order
                assert np.array_equal(m.sender, sender)
                assert (m.weight > 0).all()


def test_building_a_100k_ring_takes_memory_in_its_edges_not_n_squared():
    """W of a 100,000-node ring as an array: 80 GB. Its `Mixing`: 200,000 edges x 24 bytes +
    100,000 x 8 = 5.6 MB kept. numpy's allocations while building it (tracemalloc sees them)
    peak at about twice that (10 MB measured: the directed edges before and after sorting);
    the bound, 32 MiB, is 2,500 times below the dense W."""
    import tracemalloc

    cfg = GraphTopology(kind="ring")
    topo.from_config(cfg, 10, np.random.default_rng(0))  # imports scipy outside the count
    tracemalloc.start()
    try:
        m = topo.from_config(cfg, 100_000, np.random.default_rng(0))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(m.sender) == 200_000 and m.num_nodes == 100_000
    assert peak_bytes < 32 * 2**20


@pytest.mark.parametrize(
    "n,k",
    [(2, 1), (3, 2), (5, 4), (12, 3), (52, 1), (53, 1), (200, 3), (200, 16), (200, 17), (3000, 5)],
)
def test_random_k_draws_what_one_choice_per_node_draws(n, k):
    """`random_k`'s picks drawn at once are those of numpy's ``choice(n - 1, k, replace=False)``
    once per node in node order (its Floyd's algorithm and shuffle, or the loop itself past
    FLOYD_MAX_K), and leave the stream where the loop does: the graph of a seed is unchanged."""
    for seed in range(3):
        loop = np.random.default_rng([seed, n, k])
        by_node = np.stack([loop.choice(n - 1, size=k, replace=False) for _ in range(n)])
        at_once = np.random.default_rng([seed, n, k])
        assert np.array_equal(topo._choices(n - 1, k, n, at_once), by_node)
        assert at_once.bit_generator.state == loop.bit_generator.state
        picks = by_node + (by_node >= np.arange(n)[:, None])  # skip i itself
        edges = topo.random_k(n, k, np.random.default_rng([seed, n, k]))
        assert np.array_equal(edges[:, 0], picks.ravel())
