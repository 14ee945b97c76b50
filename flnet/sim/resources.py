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

from flnet.dists import sample
from flnet.rng import Stream, generator
from flnet.schema import Radio, ResourcesConfig
from flnet.sim import allocation, scheduling
from flnet.sim.allocation import Allocation, Members
from flnet.sim.battery import Battery
from flnet.sim.costs import Costs
from flnet.sim.network import Network
from flnet.sim.population import Population
from flnet.sim.radio import dbm_to_w, shannon_rate_bps
from flnet.sim.scheduling import Candidates, History, Work


class World(Protocol):
    """What the policies read of the World (`flnet.sim.world.World`, which owns them)."""

    seed: int
    costs: Costs
    battery: Battery | None
    population: Population
    network: Network
    radio: Radio

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
        self._radiated_w: np.ndarray | None = None  # [N] tx power without circuit, when asked

    @property
    def schedules(self) -> bool:
        """Whether cohorts are chosen by the scheduler rather than drawn uniformly."""
        return self.cfg.schedules

    @property
    def allocates(self) -> bool:
        """Whether a round's band, frequencies or powers are set by a policy."""
        return self.cfg.allocates

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

    def allocate(
        self,
        world: World,
        cohort: np.ndarray,
        down_bits: np.ndarray,
        flops: np.ndarray,
        up_bits: np.ndarray,
    ) -> tuple[Allocation, np.ndarray, np.ndarray]:
        """A round's band, frequency and radiated power for each member ([C] each), planned
        from the round's start (`flnet.sim.allocation`); and each member's uplink SNR (P g /
        N0) and battery power while transmitting (radiated + circuit) at its power."""
        cfg = self.cfg
        m = self.members(world, cohort, down_bits, flops, up_bits)
        net, n = world.network, len(cohort)
        band_hz = net.uplink.bandwidth_hz
        snr_full = m.gain_hz_w * m.p_max_w
        if cfg.bandwidth == "need_proportional":
            bw = allocation.equal_finish(np.zeros(n), m.bits, snr_full, band_hz)
        elif cfg.bandwidth == "min_max":
            ready_s = m.down_s + m.cycles / m.f_max_hz
            bw = allocation.equal_finish(ready_s, m.bits, snr_full, band_hz)
        else:  # equal: processor sharing gives each at least this share while it uploads
            bw = np.full(n, band_hz / n if net.uplink.shared else band_hz)
        deadline_s = cfg.deadline_s
        if cfg.compute_power == "just_in_time":
            assert deadline_s is not None  # the schema checks it
            f, p = allocation.just_in_time(m, bw, deadline_s)
        elif cfg.compute_power == "min_energy":
            assert deadline_s is not None
            f, p = allocation.min_energy(m, bw, deadline_s)
        else:
            f, p = m.f_max_hz, m.p_max_w
        plan = allocation.evaluate(m, bw, f, p, deadline_s)
        self._figures.update(
            {
                "alloc_bandwidth_hz_min": float(bw.min()),
                "alloc_bandwidth_hz_max": float(bw.max()),
                "alloc_cpu_hz_mean": float(f.mean()),
                "alloc_tx_power_w_mean": float(p.mean()),
                "alloc_planned_round_s": float(plan.finish_s.max()),
                "alloc_planned_energy_j": float(plan.energy_j.sum()),
                "alloc_infeasible": float((~plan.feasible).sum()),
            }
        )
        return plan, m.gain_hz_w * p, p + m.circuit_w

    def members(
        self,
        world: World,
        cohort: np.ndarray,
        down_bits: np.ndarray,
        flops: np.ndarray,
        up_bits: np.ndarray,
    ) -> Members:
        """What the server knows of the members at the round's start: downloads on their
        band (a shared downlink: an equal share, a bound on processor sharing), cycles,
        channel gains and their frequency and power bounds."""
        pop, net, n = world.population, world.network, len(cohort)
        down = net.downlink
        users = n if down.shared else 1
        down_s = down_bits / equal_share_rate_bps(
            down.bandwidth_hz, users, net.snr_hz(cohort, down=True)
        )
        radiated = self.radiated_w(world)[cohort]
        f_max = pop.cpu_hz[cohort]
        p_min = np.minimum(float(dbm_to_w(self.cfg.tx_power_min_dbm)), radiated)
        return Members(
            down_s=np.asarray(down_s, dtype=float),
            cycles=flops / pop.flops_per_cycle[cohort],
            bits=np.asarray(up_bits, dtype=float),
            gain_hz_w=net.snr_hz(cohort) / radiated,
            f_min_hz=f_max * self.cfg.cpu_min_fraction,
            f_max_hz=f_max,
            p_min_w=p_min,
            p_max_w=radiated,
            kappa=pop.kappa[cohort],
            circuit_w=np.maximum(pop.tx_power_w[cohort] - radiated, 0.0),
        )

    def radiated_w(self, world: World) -> np.ndarray:
        """[N] each client's radiated transmit power (radio.tx_power_dbm without circuit
        power): the population's column where it keeps one, else its draw again (the first
        of the RADIO stream, `flnet.sim.population.build`), once a run."""
        if self._radiated_w is None:
            pop = world.population
            if len(pop.radiated_w):
                self._radiated_w = pop.radiated_w
            else:
                rng = generator(world.seed, Stream.RADIO)
                self._radiated_w = dbm_to_w(sample(world.radio.tx_power_dbm, rng, pop.size))
        return self._radiated_w

    def delivered(self, clients: np.ndarray, round: int) -> None:
        """`clients` delivered their update in `round` (age-based scheduling's clock)."""
        self.history.delivered(clients, round)

    def state(self) -> dict:
        """What a checkpoint keeps: the history (O(participants))."""
        return self.history.state()

    def restore(self, state: dict) -> None:
        self.history.restore(state)

    def figures(self) -> dict[str, float]:
        """The records' columns of the last round's decisions."""
        return dict(self._figures)


def equal_share_rate_bps(bandwidth_hz: float, users: int, snr_hz: np.ndarray) -> np.ndarray:
    """[C] each link's rate on an equal share bandwidth_hz / users of a band."""
    return np.asarray(shannon_rate_bps(bandwidth_hz / max(users, 1), snr_hz))
