"""Client sampling by data size (`cohort.sampling`, flnet.algorithms.selection): the draws
follow p_k = n_k / n, the server's mean weighs each draw the same, and nothing is built per
registered client."""

import numpy as np
import pytest
import torch
from conftest import BASE
from scipy.stats import chisquare

from flnet.algorithms import selection, server
from flnet.config import CohortConfig
from flnet.errors import ScenarioError
from flnet.runner import run
from flnet.scenario import load_scenario, merge
from flnet.sim.patterns import Delivery
from flnet.sim.world import World

SIZES = np.array([10, 20, 30, 40, 50, 150])  # n = 300


def world_of(n: int) -> World:
    cohort = {"algorithm": {"cohort": {"clients_per_round": 1}}}
    sc = load_scenario(data=merge(BASE, {"clients": {"count": n}, **cohort}))
    return World(sc.clients, sc.radio, sc.seed)


def frequencies(sampling: str, k: int, rounds: int) -> np.ndarray:
    """How often each of the clients of SIZES took part over `rounds` rounds (with their
    draws, with replacement)."""
    world, sampler = world_of(len(SIZES)), selection.Sampler(CohortConfig(sampling=sampling))
    counts = np.zeros(len(SIZES), dtype=np.int64)
    for r in range(1, rounds + 1):
        c = sampler.draw(world, k, r, SIZES)
        counts[c.clients] += c.draws
    return counts


def test_draws_with_replacement_follow_n_k_over_n_by_chi_square():
    """5000 draws (500 rounds of K = 10): Pearson's chi-square against n_k / n does not reject
    (p > 0.01), while the same test rejects the uniform law the draws would have without the
    sizes (p < 1e-6): the test can tell the two apart."""
    counts = frequencies("by_data_size_with_replacement", 10, 500)
    assert counts.sum() == 5000
    assert chisquare(counts, SIZES / SIZES.sum() * 5000).pvalue > 0.01
    assert chisquare(counts, np.full(6, 5000 / 6)).pvalue < 1e-6


def test_draws_without_replacement_are_successive_sampling_by_size():
    """K = 2 distinct clients a round, the first drawn by n_i / n and the second by size among
    the others: client i is in with probability pi_i = p_i + sum_{j != i} p_j p_i / (1 - p_j).
    Over 3000 rounds the counts match pi (chi-square p > 0.01) and never repeat in a round."""
    world, sampler = (
        world_of(6),
        selection.Sampler(CohortConfig(sampling="by_data_size_without_replacement")),
    )
    counts = np.zeros(6, dtype=np.int64)
    for r in range(1, 3001):
        c = sampler.draw(world, 2, r, SIZES)
        assert len(c.clients) == 2 and (c.draws == 1).all()
        counts[c.clients] += 1
    p = SIZES / SIZES.sum()
    pi = np.array(
        [p[i] + sum(p[j] * p[i] / (1 - p[j]) for j in range(6) if j != i) for i in range(6)]
    )
    assert pi.sum() == pytest.approx(2.0)
    assert chisquare(counts, pi * 3000).pvalue > 0.01


def test_a_client_without_rows_is_never_drawn_and_all_with_rows_is_every_one():
    world = world_of(4)
    sampler = selection.Sampler(CohortConfig(sampling="by_data_size_without_replacement"))
    sizes = np.array([5, 0, 7, 1])
    assert sampler.draw(world, 4, 1, sizes).clients.tolist() == [0, 2, 3]
    drawn = selection.Sampler(CohortConfig(sampling="by_data_size_with_replacement"))
    assert 1 not in np.concatenate([drawn.draw(world, 4, r, sizes).clients for r in range(1, 50)])


def test_the_server_mean_weighs_each_draw_the_same():
    """FedProx's Algorithm 2: w = (1/K) sum over the K draws. A client drawn twice counts twice,
    whatever its sample count; under uniform sampling the weights stay the sample counts."""
    models = torch.tensor([[1.0, 0.0], [4.0, 2.0], [0.0, 9.0]])  # clients 3, 5, 8 of a cohort
    drawn = selection.Cohort(np.array([3, 5, 8]), np.array([2, 1, 1]))  # K = 4 draws
    sizes = np.zeros(10, dtype=np.int64)
    sizes[[3, 5, 8]] = [100, 7, 1]
    done = Delivery(np.array([2, 0, 1]), ["ok"] * 3, np.ones(3, bool), 0.0, 1.0)
    own = server.from_config(None, None, "weighted_mean")
    got = selection.delivered(done, drawn, sizes)
    x, _ = server.step(own, torch.zeros(2), models, got, None)
    assert torch.allclose(x, torch.tensor([(2 * 1 + 4 + 0) / 4, (0 + 2 + 9) / 4]))
    uniform = selection.delivered(done, selection.Cohort(drawn.clients, None), sizes)
    assert uniform.num_samples.tolist() == [100, 7, 1]
    late = Delivery(np.array([1]), ["deadline", "ok", "deadline"], np.ones(3, bool), 0.0, 1.0)
    assert selection.delivered(late, drawn, sizes).num_samples.tolist() == [1]


def test_a_million_clients_cost_one_array_and_a_binary_search_a_draw():
    """The law is the sizes' cumulative sum (8 bytes a client, made once); a round's 100 draws
    from 1,000,000 clients then allocate kilobytes."""
    import tracemalloc

    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 500, size=1_000_000)
    weights = selection.SizeWeights(sizes)
    tracemalloc.start()
    picks = weights.sample(np.random.default_rng(1), 100)
    distinct = weights.sample(np.random.default_rng(2), 100, replace=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(picks) == 100 and len(np.unique(distinct)) == 100
    assert peak < 100_000, peak


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "moon"])
def test_fedavg_fedprox_and_moon_run_with_sampling_by_size(scenario, name):
    """A run draws its cohorts by size (other clients than uniform sampling's) and charges a
    client drawn twice once: the ledger's uploads are the distinct clients."""
    data = {"partition": {"kind": "dirichlet", "alpha": 0.3}}
    algo = {
        "name": name,
        "cohort": {"clients_per_round": 5, "sampling": "by_data_size_with_replacement"},
    }
    by_size = run(scenario(algorithm=algo, data=data), write=False)
    uniform = run(scenario(algorithm={"name": name}, data=data), write=False)
    assert np.isfinite(by_size.records.test_accuracy).all()
    ups = by_size.ledger[by_size.ledger.kind.astype(str) == "upload"]
    assert (ups.groupby("round").node.nunique() == ups.groupby("round").size()).all()
    assert ups.groupby("round").size().max() <= 5
    ups_u = uniform.ledger[uniform.ledger.kind.astype(str) == "upload"]
    assert sorted(ups.node) != sorted(ups_u.node)


def test_timing_only_draws_the_same_cohorts_as_the_full_run(scenario):
    from flnet.reuse import timing_only, why_not

    algo = {"cohort": {"clients_per_round": 5, "sampling": "by_data_size_without_replacement"}}
    sc = scenario(algorithm=algo, data={"partition": {"kind": "dirichlet", "alpha": 0.3}})
    full, timed = run(sc, write=False), timing_only(sc, write=False)
    nodes = ["round", "kind", "node"]
    assert full.ledger[nodes].astype(str).equals(timed.ledger[nodes].astype(str))
    assert "data size" in why_not(sc.model_dump(mode="json"))


@pytest.mark.parametrize(
    "algorithm,message",
    [
        ({"name": "scaffold"}, "samples uniformly"),
        ({"name": "feddyn"}, "samples uniformly"),
        ({"cohort": {"over_selection": 1.5}}, "over_selection"),
    ],
)
def test_what_sampling_by_size_refuses(scenario, algorithm, message):
    cohort = {"clients_per_round": 5, "sampling": "by_data_size_with_replacement"}
    with pytest.raises(ScenarioError, match=message):
        scenario(algorithm=merge({"cohort": cohort}, algorithm))
