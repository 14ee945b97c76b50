"""The probability simplex: DRFA's and DRDM's dual variable lambda lives on it.

`project` is the Euclidean projection Pi_Lambda(v) = argmin_{l in simplex} ||l - v||_2, by the
sort-based rule DRFA's code uses (`projection_simplex_sort`; Held et al. 1974, Duchi et al.
2008): with u = v sorted decreasingly, rho the largest j with u_j - (sum_{i<=j} u_i - 1) / j > 0
and theta = (sum_{i<=rho} u_i - 1) / rho, the projection is max(v - theta, 0).

`Simplex` is a point of the simplex over N clients stored as explicit entries for the clients
that ever had their own value and one shared value `rest` for all the others: lambda starts
uniform, and a round changes only the entries of the clients whose losses were queried, then
shifts every entry by the same theta. So a run with a million registered clients keeps, draws
from and projects only the entries of clients that took part (plus one number), never an [N]
vector; with ``lambda_init: samples`` every client has its own entry from the start.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


def project(v: np.ndarray) -> np.ndarray:
    """[N] -> [N] the closest point of the simplex {l >= 0, sum l = 1}, in float64."""
    v = np.asarray(v, dtype=np.float64)
    return np.maximum(v - _threshold(v, np.ones(len(v))), 0.0)


def _threshold(values: np.ndarray, counts: np.ndarray) -> float:
    """theta of the sort-based projection of the vector holding each `values[k]` `counts[k]`
    times. Equal values are all in rho's prefix or none are (within a run of ties the sign of
    u_j - (css_j - 1) / j does not change), so a value with its count is one step."""
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    order = np.argsort(-values, kind="stable")
    u, c = values[order], counts[order]
    css, j = np.cumsum(u * c) - 1.0, np.cumsum(c)
    rho = int(np.flatnonzero(u - css / j > 0)[-1])
    return float(css[rho] / j[rho])


def entropy(p: np.ndarray) -> float:
    """-sum p_i ln p_i in nats (0 ln 0 = 0): ln N for uniform lambda, 0 on a single client."""
    p = np.asarray(p, dtype=np.float64)
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


class Simplex(NamedTuple):
    """lambda over `n` clients: `values[k]` for client `clients[k]` (sorted), `rest` for every
    other client."""

    n: int
    clients: np.ndarray  # [K] int64, sorted
    values: np.ndarray  # [K] float64
    rest: float

    @classmethod
    def uniform(cls, n: int) -> Simplex:
        return cls(n, np.empty(0, np.int64), np.empty(0), 1.0 / n)

    @classmethod
    def of(cls, dense: np.ndarray) -> Simplex:
        """Every client explicit (lambda_init: samples, tests)."""
        dense = np.asarray(dense, dtype=np.float64)
        return cls(len(dense), np.arange(len(dense), dtype=np.int64), dense.copy(), 0.0)

    @property
    def others(self) -> int:
        """Clients that read `rest`."""
        return self.n - len(self.clients)

    def dense(self) -> np.ndarray:
        """[N] (for tests and small runs)."""
        out = np.full(self.n, self.rest)
        out[self.clients] = self.values
        return out

    def at(self, clients: np.ndarray) -> np.ndarray:
        """[C] the entries of `clients`."""
        clients = np.asarray(clients, np.int64)
        at = np.minimum(np.searchsorted(self.clients, clients), max(len(self.clients) - 1, 0))
        known = len(self.clients) > 0
        found = (self.clients[at] == clients) if known else np.zeros(len(clients), bool)
        return np.where(found, self.values[at] if known else 0.0, self.rest)

    def ascent(self, clients: np.ndarray, steps: np.ndarray) -> Simplex:
        """Pi(lambda + s): `steps` [C] added at the distinct `clients` [C], then projected."""
        clients = np.asarray(clients, np.int64)
        merged = np.union1d(self.clients, clients)
        values = self.at(merged)
        values[np.searchsorted(merged, clients)] += steps
        counts = np.ones(len(merged))
        others = self.n - len(merged)
        theta = _threshold(np.append(values, self.rest), np.append(counts, others))
        return Simplex(self.n, merged, np.maximum(values - theta, 0.0), max(self.rest - theta, 0.0))

    def entropy(self) -> float:
        """-sum lambda_i ln lambda_i in nats."""
        rest = -self.others * self.rest * np.log(self.rest) if self.rest > 0 else 0.0
        return entropy(self.values) + float(rest)

    def max(self) -> float:
        return float(max(self.values.max(initial=0.0), self.rest if self.others else 0.0))

    def sample(self, rng: np.random.Generator, m: int, replace: bool = True) -> np.ndarray:
        """m clients drawn with replacement, client i with probability lambda_i, in draw order:
        each draw picks an explicit entry or the block of the others (by mass), then a client of
        the block uniformly. Without replacement: draws repeat until m distinct clients are
        found (the same law as drawing each next client in proportion to the weights of those
        not drawn yet), at most as many as have weight."""
        block = self.others * self.rest
        mass = np.append(self.values, block)
        p = mass / mass.sum()
        if replace:
            return self._clients(rng, rng.choice(len(p), size=m, p=p))
        m = min(m, int(np.count_nonzero(self.values)) + (self.others if self.rest > 0 else 0))
        chosen: dict[int, None] = {}
        while len(chosen) < m:
            for c in self._clients(rng, rng.choice(len(p), size=m - len(chosen), p=p)).tolist():
                chosen.setdefault(c, None)
        return np.asarray(list(chosen)[:m], dtype=np.int64)

    def _clients(self, rng: np.random.Generator, picks: np.ndarray) -> np.ndarray:
        """Explicit entries by position; the block (position K) as uniform draws among the
        clients without an entry."""
        k = len(self.clients)
        out = np.where(picks < k, self.clients[np.minimum(picks, max(k - 1, 0))] if k else 0, -1)
        complement: np.ndarray | None = None  # built once a call, only when it is needed
        for pos in np.flatnonzero(picks == k).tolist():
            if self.others * 2 >= self.n:
                out[pos] = self._unlisted(rng)
                continue
            if complement is None:
                complement = np.setdiff1d(np.arange(self.n), self.clients, assume_unique=True)
            out[pos] = int(complement[int(rng.integers(self.others))])
        return out.astype(np.int64)

    def _unlisted(self, rng: np.random.Generator) -> int:
        """A client without an entry, uniformly, by rejection (most clients have none); when
        most have one, `_clients` takes the k-th of the complement instead."""
        while True:
            c = int(rng.integers(self.n))
            i = np.searchsorted(self.clients, c)
            if i == len(self.clients) or self.clients[i] != c:
                return c
