"""Who takes part in a central round, by the scenario's `cohort.sampling`, and what each
member's model weighs in the server's mean (the weights `server.step` hands its rule).

- ``uniform`` (the default): ceil(K * over_selection) distinct clients, uniformly
  (`World.sample_clients`); the server's own rule weighs each delivered model by its sample
  count n_k (FedAvg's line 8, McMahan et al. 2017). This is also what the FedProx paper's
  experiments ran (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020,
  Section 5: devices sampled uniformly, updates averaged with weights proportional to their
  local data, McMahan et al.'s scheme; its code, litian96/FedProx, `select_clients` and
  `aggregate`, does the same).
- ``by_data_size_with_replacement``: FedProx's device sampling as its Algorithms 1 and 2 write
  it (the same paper): K devices, device k chosen with probability p_k = n_k / n (n the total
  of the training rows; the p_k of its objective sum_k p_k F_k), and the server averages the
  delivered models with equal weights, w_{t+1} = (1/K) sum_{k in S_t} w_{t+1}^k. The K draws
  are independent (with replacement), which makes that mean an unbiased estimate of
  sum_k p_k w_{t+1}^k (Li et al., "On the Convergence of FedAvg on Non-IID Data", ICLR 2020,
  Scheme I). A client drawn j times trains, is charged and uploads once (its copies would draw
  the same minibatches, keyed by round and client) and weighs j. The same law as DRFA's and
  DRDM's line 5 with lambda = p (`lambda_init: samples`; the DRDM paper, Krouka et al. 2025,
  Algorithm 1, draws clients with probabilities proportional to lambda). The FedProx paper is
  not among the texts in the project's papers folder: the above is its published Algorithm 2
  and its code, not checked against a copy here.
- ``by_data_size_without_replacement``: K distinct clients, each next one drawn in proportion
  to the sizes of those not drawn yet (successive sampling), each delivered model weighing the
  same. No paper of the set defines it; it is DRFA's and DRDM's ``sampling:
  without_replacement`` with lambda = p (`flnet.algorithms.drfa`), and its mean is not an
  unbiased estimate of sum_k p_k w^k (large clients are under-weighted).

Under either by-size sampling the weight a client carries is its number of draws (the draw
already weighed it by size): the own rule (weighted_mean) is the mean per draw; `mean`, and
a server optimizer's plain mean (variant reddi), count each distinct client once; a server
optimizer's sample-weighted mean (variant flower) weighs by draws. The draws cost no
per-client objects: the sizes' cumulative sum ([N] int64, made once a run) and a binary search
per draw, O(K log N) a round with 1,000,000 clients.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from flnet.algorithms import delivery
from flnet.sim.scheduling import Work

if TYPE_CHECKING:  # annotations only
    from flnet.config import CohortConfig, LocalConfig
    from flnet.learn.local import Learner
    from flnet.sim.patterns import Delivery
    from flnet.sim.world import AbstractWorld


class SizeWeights:
    """The distribution p_k = n_k / n over the N clients (`World.Weights`): a draw is a uniform
    integer below n located among the cumulative sizes, so p_k is exact."""

    def __init__(self, sizes: np.ndarray) -> None:
        sizes = np.asarray(sizes, dtype=np.int64)
        self.cumulative = np.cumsum(sizes)  # [N]
        self.with_rows = int(np.count_nonzero(sizes))  # clients that can be drawn
        if not len(sizes) or self.cumulative[-1] <= 0:
            raise ValueError("sampling by data size needs clients with training rows")

    @property
    def n(self) -> int:
        return len(self.cumulative)

    def sample(self, rng: np.random.Generator, m: int, replace: bool = True) -> np.ndarray:
        """m clients drawn with replacement, in draw order; without replacement, draws repeat
        until m distinct clients are found (each next one in proportion to the sizes of those
        not drawn yet), at most every client with rows, in the order first drawn."""
        if replace:
            u = rng.integers(int(self.cumulative[-1]), size=m)
            return np.searchsorted(self.cumulative, u, side="right").astype(np.int64)
        if m >= self.with_rows:  # every client with rows (the order is not used)
            return np.flatnonzero(np.diff(self.cumulative, prepend=0)).astype(np.int64)
        chosen: dict[int, None] = {}
        while len(chosen) < m:
            for c in self.sample(rng, m - len(chosen)).tolist():
                chosen.setdefault(c, None)
        return np.asarray(list(chosen)[:m], dtype=np.int64)


class Cohort(NamedTuple):
    """A round's members and how often each was drawn."""

    clients: np.ndarray  # [C] distinct, sorted
    draws: np.ndarray | None  # [C] draws of each (None: uniform sampling, weights n_k)

    def subset(self, keep: np.ndarray) -> Cohort:
        """The members where `keep` ([C] bool) holds (those that train: FedAvg's stragglers)."""
        return Cohort(self.clients[keep], None if self.draws is None else self.draws[keep])


class Sampler:
    """A run's cohort draws by `cohort.sampling` (see the module's docstring)."""

    def __init__(self, cfg: CohortConfig) -> None:
        self.cfg = cfg
        self._weights: tuple[np.ndarray, SizeWeights] | None = None  # sizes seen, their law

    def draw(
        self,
        world: AbstractWorld,
        k: int,
        round: int,
        sizes: np.ndarray,
        work: Work | None = None,
    ) -> Cohort:
        """Round `round`'s cohort of K = `k` (with over-selection, ceil(K * over_selection)
        distinct clients); `sizes` [N] the clients' training rows (this round's block's);
        `work` what each member is expected to do (a scheduler's deadline filter reads it)."""
        if self.cfg.sampling == "uniform":
            return Cohort(world.sample_clients(k, round, self.cfg.over_selection, work=work), None)
        replace = self.cfg.sampling == "by_data_size_with_replacement"
        m = math.ceil(k * self.cfg.over_selection - 1e-9)  # draws: K may exceed N
        m = m if replace else min(world.num_clients, m)
        drawn = world.sample_weighted(m, round, self.weights(sizes), replace=replace)
        clients, draws = np.unique(drawn, return_counts=True)
        return Cohort(clients.astype(np.int64), draws.astype(np.int64))

    def weights(self, sizes: np.ndarray) -> SizeWeights:
        """p = sizes / sum(sizes), made once per sizes array (block-cyclic data has one per
        block; the last is kept)."""
        if self._weights is None or self._weights[0] is not sizes:
            self._weights = (sizes, SizeWeights(sizes))
        return self._weights[1]


def expected_work(
    learn: Learner, local: LocalConfig, down_bits: float, up_bits: float, block: int | None = None
) -> Work:
    """What the server expects of each member when it draws a cohort (`resources`'
    scheduler): the messages' bits and each candidate's full local work, its steps times a
    full minibatch's FLOPs (only the candidates' rows are read)."""
    step_flops = learn.step_flops(local)
    return Work(down_bits, lambda c: step_flops * learn.full_steps(c, local, block), up_bits)


def delivered(done: Delivery, cohort: Cohort, sizes: np.ndarray) -> delivery.Delivered | None:
    """`delivery.delivered` with the weights the sampling gives: n_k (uniform) or each
    delivered client's draws (by data size)."""
    got = delivery.delivered(done, cohort.clients, sizes)
    if got is None or cohort.draws is None:
        return got
    return got._replace(num_samples=cohort.draws[got.positions])
