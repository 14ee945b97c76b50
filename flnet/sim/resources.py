"""The World's per-round resource policies (`resources`): the scheduler it draws cohorts
with, and the figures of each round's decisions that the records carry.

Everything the policies read is what the server may know at the round's start: its
candidates' mean uplink SNR (or measured rate), compute speed, battery charge and the
history of who took part (`flnet.sim.scheduling`); nothing that happens later in the round.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from flnet.rng import Stream, generator
from flnet.schema import ResourcesConfig
from flnet.sim import scheduling
from flnet.sim.battery import Battery
from flnet.sim.costs import Costs
from flnet.sim.radio import shannon_rate_bps
from flnet.sim.scheduling import Candidates, History, Work


class World(Protocol):
    """What the policies read of the World (`flnet.sim.world.World`, which owns them)."""

    seed: int
    costs: Costs
    battery: Battery | None

    @property
    def num_clients(self) -> int: ...

    @property
    def now(self) -> float: ...

    def candidates(self, pool: int, round: int) -> np.ndarray: ...

    def up_rate_bps(self, clients: np.ndarray, users: int) -> np.ndarray: ...

    def alone_s(
        self, clients: np.ndarray, down_bits: float, flops: float, up_bits: float
    ) -> Any: ...


class Policies:
    """A run's resource policies and their memory (who took part, the last round's figures)."""

    def __init__(self, cfg: ResourcesConfig) -> None:
        self.cfg = cfg
        self.history = History(cfg.scheduling.fairness_rounds)
        self._figures: dict[str, float] = {}

    @property
    def schedules(self) -> bool:
        """Whether cohorts are chosen by the scheduler rather than drawn uniformly."""
        s = self.cfg.scheduling
        return s.kind != "uniform" or s.deadline_feasible

    def schedule(self, world: World, m: int, round: int, work: Work | None) -> np.ndarray:
        """Round `round`'s cohort of (at most) m clients, sorted: the pool drawn, what the
        server knows of it, the policy's choice (`flnet.sim.scheduling`)."""
        cfg = self.cfg.scheduling
        pool = min(world.num_clients, math.ceil(cfg.candidates * m - 1e-9))
        clients = world.candidates(pool, round)
        cand = self.candidates(world, clients, m, work)
        tiebreak = generator(world.seed, Stream.SELECTION, round, 1).random(len(clients))
        chosen = scheduling.choose(cfg, cand, m, round, self.history, self.cfg.deadline_s, tiebreak)
        self.history.took_part(clients[chosen], cand.rate_bps[chosen], round)
        feasible = (
            int((cand.alone_s <= (self.cfg.deadline_s or math.inf)).sum())
            if cfg.deadline_feasible
            else len(clients)
        )
        self._figures.update(
            {
                "scheduled_candidates": float(len(clients)),
                "scheduled_feasible": float(feasible),
                "scheduled_clients": float(len(chosen)),
                "scheduled_up_rate_bps_mean": float(cand.rate_bps[chosen].mean())
                if len(chosen)
                else math.nan,
            }
        )
        return np.sort(clients[chosen])

    def candidates(
        self, world: World, clients: np.ndarray, m: int, work: Work | None
    ) -> Candidates:
        """What the server knows of `clients` at the round's start: uplink rates on an equal
        share of the band (of m), round times alone (when the feasibility filter asks) and
        states of charge (energy-aware)."""
        rate = world.up_rate_bps(clients, m)
        alone = np.full(len(clients), math.nan)
        if self.cfg.scheduling.deadline_feasible:
            if work is None:
                raise ValueError("the deadline-feasible filter needs the round's work")
            flops = work.flops(clients)
            t = world.alone_s(clients, work.down_bits, 0.0, 0.0)
            alone = t.down_s + world.costs.compute_times_s(flops, clients) + work.up_bits / rate
        soc = np.full(len(clients), math.nan)
        if self.cfg.scheduling.kind == "energy_aware":
            battery = world.battery
            assert battery is not None  # the scenario checks it
            now = world.now
            soc = np.array(
                [battery.level(c, now).charge_j / battery.cell(c).capacity_j for c in clients]
            )
        return Candidates(clients, rate, alone, soc)

    def delivered(self, clients: np.ndarray, round: int) -> None:
        """`clients` delivered their update in `round` (age-based scheduling's clock)."""
        self.history.delivered(clients, round)

    def figures(self) -> dict[str, float]:
        """The records' columns of the last round's decisions."""
        return dict(self._figures)


def equal_share_rate_bps(bandwidth_hz: float, users: int, snr_hz: np.ndarray) -> np.ndarray:
    """[C] each link's rate on an equal share bandwidth_hz / users of a band."""
    return np.asarray(shannon_rate_bps(bandwidth_hz / max(users, 1), snr_hz))
