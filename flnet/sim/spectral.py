"""What a mixing matrix's spectrum says about mixing with the extrapolated W~ = (1 + beta) W -
beta I (OledFL's opposite lookahead is DFedAvg mixing with W~, the paper's Chebyshev remark).

An eigenvalue lambda of W becomes (1 + beta) lambda - beta, so disagreement contracts only if
every mode but consensus keeps modulus below 1: for a real spectrum, lambda_min(W) > (beta - 1)
/ (beta + 1). A ring with weights 1/3 (lambda_min = -1/3) needs beta < 1/2; the OledFL paper's
beta = 0.99 needs an almost non-negative spectrum (a lazy W). Topology work: the algorithm asks
`stability_problem` and decides what to do with the answer (OledFL warns).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from flnet.sim.topology import Mixing, eigenvalues

DENSE_EIGEN_NODES = 1000  # above this, Gershgorin's bound stands in for lambda_min(W)


def smallest_eigenvalue(
    w: Mixing, eigenvalues: Callable[[Mixing], np.ndarray] = eigenvalues
) -> tuple[float, bool]:
    """(lambda_min of W (its eigenvalues' smallest real part), exact?). Exact (dense
    eigenvalues) up to DENSE_EIGEN_NODES nodes; above, Gershgorin's bound min_i (2 W_ii - 1),
    never above lambda_min for a non-negative row-stochastic W (an iterative eigensolver can
    take minutes on a large ring, whose spectrum clusters), and exact for an even ring.
    (`eigenvalues`: a schedule's kept ones, `topology.Schedule.eigenvalues`.)"""
    if w.num_nodes <= DENSE_EIGEN_NODES:
        return float(eigenvalues(w).real.min()), True
    return float((2.0 * w.self_weight - 1.0).min()), False


def beta_limit(lam: np.ndarray) -> float:
    """The beta below which (1 + beta) W - beta I contracts every mode of W but consensus, from
    W's eigenvalues: |(1 + beta) lambda - beta| < 1 for each lambda != 1, the positive root of
    |lambda - 1|^2 beta^2 + 2 (|lambda|^2 - Re lambda) beta + |lambda|^2 - 1 = 0. For a real
    lambda that is (1 + lambda) / (1 - lambda), least at lambda_min; a W that is not
    symmetric (a directed random_k graph) can have complex eigenvalues, where lambda_min
    alone does not decide."""
    lam = np.asarray(lam, dtype=complex)
    lam = lam[np.abs(lam - 1) > 1e-9]  # consensus (1 for a row-stochastic W) stays put
    if not len(lam):
        return math.inf
    a, b, c = np.abs(lam - 1) ** 2, np.abs(lam) ** 2 - lam.real, np.abs(lam) ** 2 - 1
    return float(((np.sqrt(np.maximum(b * b - a * c, 0.0)) - b) / a).min())


def stability_problem(
    w: Mixing,
    beta: float,
    eigenvalues: Callable[[Mixing], np.ndarray] = eigenvalues,
) -> str | None:
    """Why (1 + beta) W - beta I does not contract disagreement, or None when it does (the
    text names the scenario's fields: algorithm.beta, algorithm.topology)."""
    if beta == 0 or w.num_nodes < 2:
        return None
    if w.num_nodes <= DENSE_EIGEN_NODES:
        lam = eigenvalues(w)
        limit = beta_limit(lam)
        if beta < limit:
            return None
        if np.iscomplexobj(lam) and (np.abs(lam.imag) > 1e-12).any():
            return (
                f"algorithm.beta = {beta:g} is unstable for this W: it is not symmetric and "
                "(1 + beta) W - beta I has a mode besides consensus of modulus >= 1 (W's "
                f"eigenvalues are complex); use beta < {limit:.4g}, a lazy W "
                "(algorithm.topology.laziness), or a symmetric one (random_k: directed: false, "
                "weights: metropolis_hastings)"
            )
        lam_min = float(lam.real.min())
        what = f"is unstable for this W: lambda_min(W) = {lam_min:.4g}"
    else:
        lam_min, _ = smallest_eigenvalue(w)
        limit = (1 + lam_min) / (1 - lam_min)
        if beta < limit:
            return None
        what = f"may be unstable for this W: lambda_min(W) >= {lam_min:.4g} (Gershgorin's bound)"
    return (
        f"algorithm.beta = {beta:g} {what}, and (1 + beta) W - beta I "
        f"contracts disagreement only if lambda_min > (beta - 1) / (beta + 1) = "
        f"{(beta - 1) / (beta + 1):.4g}; use beta < {limit:.4g}, or a lazy W "
        "(algorithm.topology.laziness: 0.5 puts its spectrum in [0, 1])"
    )
