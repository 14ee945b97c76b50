"""The probability simplex: DRFA's and DRDM's dual variable lambda lives on it.

`project` is the Euclidean projection Pi_Lambda(v) = argmin_{l in simplex} ||l - v||_2, by the
sort-based rule DRFA's code uses (`projection_simplex_sort`; Held et al. 1974, Duchi et al.
2008): with u = v sorted decreasingly, rho the largest j with u_j - (sum_{i<=j} u_i - 1) / j > 0
and theta = (sum_{i<=rho} u_i - 1) / rho, the projection is max(v - theta, 0). O(N log N) over
all N clients: lambda is one number per registered client by the paper's definition.
"""

from __future__ import annotations

import numpy as np


def project(v: np.ndarray) -> np.ndarray:
    """[N] -> [N] the closest point of the simplex {l >= 0, sum l = 1}, in float64."""
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    j = np.arange(1, len(v) + 1)
    rho = int(np.flatnonzero(u - css / j > 0)[-1]) + 1
    theta = css[rho - 1] / rho
    return np.maximum(v - theta, 0.0)


def entropy(p: np.ndarray) -> float:
    """-sum p_i ln p_i in nats (0 ln 0 = 0): ln N for uniform lambda, 0 on a single client."""
    p = np.asarray(p, dtype=np.float64)
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())
