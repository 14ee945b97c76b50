"""Client scheduling (`resources.scheduling`): who of a round's candidates takes part.

The server draws a candidate pool of ceil(candidates * m) clients uniformly (m the cohort
with over-selection; only online ones under an availability model, `World._sample_online`),
then keeps the best m by the policy's score, ties broken by a uniform draw of the round
(generator (seed, SELECTION, round, 1)), so a tie never favours small client ids:

- ``uniform``: no score (m of the pool in the tie-breaking order: a uniform draw);
- ``best_channel``: the uplink rate r_k on an equal share B / m of the band (alone, without
  fading: the mean channel the server can know), highest first;
- ``proportional_fair``: r_k / R_k, R_k the client's average served rate, an exponential
  average with time constant t_c rounds: R_k <- (1 - 1/t_c) R_k (+ r_k / t_c if it took
  part), kept for clients that ever took part and decayed lazily (R_k(t) = R_k(t0)
  (1 - 1/t_c)^(t - t0)); a client never served has R_k = 0 and comes first (by r_k);
- ``age_based``: rounds since the client's last delivered update (never: first);
- ``energy_aware``: the battery's state of charge now, highest first.

``deadline_feasible`` first drops candidates whose download, compute and upload alone (the
upload on the share B / m) would exceed the deadline. Everything is O(pool) a round: the
history holds only clients that took part, never an [N] column (tests/test_scheduling.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from flnet.schema import SchedulingConfig


class Work(NamedTuple):
    """What the server expects a round's member to do, as it draws the cohort: the model's
    bits each way and each candidate's local FLOPs (a function of the candidates: O(pool))."""

    down_bits: float
    flops: Callable[[np.ndarray], np.ndarray]
    up_bits: float


class Candidates(NamedTuple):
    """What the server knows of its candidates ([C] each): their uplink rate on an equal
    share, their round time alone (nan: not asked) and their battery's state of charge."""

    clients: np.ndarray  # [C] in draw order
    rate_bps: np.ndarray
    alone_s: np.ndarray
    soc: np.ndarray


class History:
    """Who took part and when: each participant's last delivered round and its average served
    rate (proportional fair). Sparse: only clients that took part have entries."""

    def __init__(self, fairness_rounds: float) -> None:
        self.decay = 1.0 - 1.0 / fairness_rounds
        self.last_round: dict[int, int] = {}
        self.served: dict[int, tuple[float, int]] = {}  # client -> (average rate, as of round)

    def average_bps(self, clients: np.ndarray, round: int) -> np.ndarray:
        """[C] each client's average served rate at `round` (0: never served)."""
        out = np.zeros(len(clients))
        for i, c in enumerate(clients.tolist()):
            got = self.served.get(c)
            if got is not None:
                out[i] = got[0] * self.decay ** (round - got[1])
        return out

    def age(self, clients: np.ndarray, round: int) -> np.ndarray:
        """[C] rounds since each client's last delivered update (inf: never)."""
        return np.array([round - self.last_round.get(c, -math.inf) for c in clients.tolist()])

    def took_part(self, clients: np.ndarray, rate_bps: np.ndarray, round: int) -> None:
        """`clients` were scheduled in `round` with these expected rates (proportional fair's
        served rate)."""
        avg = self.average_bps(clients, round) * self.decay
        new = avg + rate_bps * (1.0 - self.decay)
        for c, r in zip(clients.tolist(), new.tolist()):
            self.served[c] = (r, round)

    def delivered(self, clients: np.ndarray, round: int) -> None:
        for c in clients.tolist():
            self.last_round[c] = round

    def state(self) -> dict:
        """The history as plain lists (a checkpoint's), in insertion order."""
        return {
            "last_round": [[c, r] for c, r in self.last_round.items()],
            "served": [[c, avg, r] for c, (avg, r) in self.served.items()],
        }

    def restore(self, state: dict) -> None:
        self.last_round = {int(c): int(r) for c, r in state["last_round"]}
        self.served = {int(c): (float(avg), int(r)) for c, avg, r in state["served"]}


def choose(
    cfg: SchedulingConfig,
    cand: Candidates,
    m: int,
    round: int,
    history: History,
    deadline_s: float | None,
    tiebreak: np.ndarray,
) -> np.ndarray:
    """The indices into `cand` of the (at most) m scheduled, best first; `tiebreak` [C]
    uniforms that order equal scores."""
    keep = np.arange(len(cand.clients))
    if cfg.deadline_feasible:
        assert deadline_s is not None  # the schema checks it
        keep = keep[cand.alone_s <= deadline_s]
    if cfg.kind == "uniform":  # in the round's random order (an online pool is by id)
        return keep[np.argsort(tiebreak[keep], kind="stable")[:m]]
    primary, secondary = scores(cfg, cand, round, history)
    # lexsort: last key first; highest score, then highest secondary, then the draw
    order = np.lexsort((tiebreak[keep], -secondary[keep], -primary[keep]))
    return keep[order[:m]]


def scores(
    cfg: SchedulingConfig, cand: Candidates, round: int, history: History
) -> tuple[np.ndarray, np.ndarray]:
    """[C] each candidate's score under `cfg.kind` and a second score for its ties."""
    rate = cand.rate_bps
    if cfg.kind == "best_channel":
        return rate, np.zeros(len(rate))
    if cfg.kind == "proportional_fair":
        avg = history.average_bps(cand.clients, round)
        with np.errstate(divide="ignore"):
            return np.where(avg > 0, rate / np.where(avg > 0, avg, 1.0), math.inf), rate
    if cfg.kind == "age_based":
        return history.age(cand.clients, round), np.zeros(len(rate))
    if cfg.kind == "energy_aware":
        return cand.soc, np.zeros(len(rate))
    raise ValueError(f"unknown scheduler {cfg.kind}")
