"""OledFL's stability check of W~ = (1 + beta) W - beta I, from W's spectrum
(`flnet.sim.spectral`), on rings and a directed random_k graph whose eigenvalues are known."""

import numpy as np
import pytest

from flnet.sim import spectral
from flnet.sim import topology as topo


def test_oledfl_warns_when_beta_makes_w_tilde_unstable():
    ring = topo.from_edges(topo.graph_edges("ring", 8), 8)  # weights 1/3, lambda_min = -1/3
    assert spectral.stability_problem(ring, 0.4) is None
    problem = spectral.stability_problem(ring, 0.6)
    assert "beta < 0.5" in problem and "laziness" in problem
    lazy = topo.from_edges(topo.graph_edges("ring", 8), 8, laziness=0.5)
    assert spectral.stability_problem(lazy, 0.99) is None


def test_the_beta_limit_is_where_w_tildes_modes_reach_modulus_one():
    """|(1 + beta) lambda - beta| < 1 for every eigenvalue but consensus: on real eigenvalues
    (1 + lambda_min) / (1 - lambda_min); on a directed random_k W's complex ones lower than
    that, and the check warns there though lambda_min alone would pass."""
    ring = topo.from_edges(topo.graph_edges("ring", 8), 8)
    assert spectral.beta_limit(topo.eigenvalues(ring)) == pytest.approx(0.5)  # (1 - 1/3) / (4/3)
    w = topo.from_directed(topo.random_k(16, 3, np.random.default_rng(1)), 16)
    lam = topo.eigenvalues(w)
    assert np.abs(lam.imag).max() > 0.1  # not symmetric: complex eigenvalues
    lam_min = lam.real.min()
    limit = spectral.beta_limit(lam)
    assert limit < (1 + lam_min) / (1 - lam_min) - 0.05

    def second_modulus(beta):  # W~'s largest modulus besides consensus
        mu = np.linalg.eigvals((1 + beta) * w.dense() - beta * np.eye(16))
        return np.sort(np.abs(mu))[-2]

    assert second_modulus(limit - 1e-6) < 1 < second_modulus(limit + 1e-6)
    beta = (limit + (1 + lam_min) / (1 - lam_min)) / 2  # passes lambda_min's test, not this one
    assert lam_min > (beta - 1) / (beta + 1)
    problem = spectral.stability_problem(w, beta)
    assert "not symmetric" in problem and f"beta < {limit:.4g}" in problem
    assert spectral.stability_problem(w, limit - 1e-3) is None


def test_on_a_large_graph_the_check_takes_gershgorins_bound():
    """Above DENSE_EIGEN_NODES: min_i (2 W_ii - 1) <= lambda_min, exact on an even ring."""
    n = spectral.DENSE_EIGEN_NODES + 2
    ring = topo.from_edges(topo.graph_edges("ring", n), n)
    assert spectral.smallest_eigenvalue(ring) == (pytest.approx(-1 / 3), False)
    assert spectral.stability_problem(ring, 0.45) is None
    assert "may be unstable" in spectral.stability_problem(ring, 0.55)
    small = topo.from_edges(topo.graph_edges("ring", 10), 10)
    assert spectral.smallest_eigenvalue(small) == (pytest.approx(-1 / 3), True)
