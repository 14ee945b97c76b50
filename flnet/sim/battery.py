"""Per-device batteries fed by the ledger: each row's joules drain its device, a nightly
charging window refills it, and a device below its opt-out threshold is offline until it has
recharged to its resume level.

Nothing is stored per idle client. A client's capacity, initial state of charge and threshold
are drawn on demand from the BATTERY stream keyed (seed, client), and its time zone from the
availability model's (diurnal) or from BATTERY_ZONES keyed (seed, client). Only clients that
have spent energy have an entry: (time, charge, locked) as of their last ledger row. Everything
between two instants (charging in the local window at `charging_power_w`, idle drain at
`idle_power_w`) is computed lazily from that timeline when the device is next consulted, so
the charge is a pure function of the rows charged so far: a resumed run, which replays its
ledger journal, has the identical charge (tests/test_battery.py).

Defaults: a 50 kJ battery (about 3,600 mAh at 3.85 V, a phone's); charging 22:00-07:00 local
at 10 W, after Bonawitz et al. 2019 ("devices are more likely idle and charging at night") and
Ferreira et al. 2011 (overnight charging habits), ../shared/papers/digests/
wireless_energy_models.md sections 5.1 and 5.3; the exact hours are our assumption.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from flnet.dists import AnyDist, PerClient, sample
from flnet.rng import Stream, generator
from flnet.schema import BatteryConfig
from flnet.sim.availability import HOUR_S


class Cell(NamedTuple):
    """One device's drawn battery columns."""

    capacity_j: float
    initial_soc: float  # state of charge at time 0, a fraction of capacity
    threshold_soc: float  # below it, the device opts out


class Level(NamedTuple):
    """A device's charge at an instant and whether it is opted out (below its threshold and
    not yet recharged to its resume level)."""

    t_s: float
    charge_j: float
    locked: bool


class Battery:
    """The batteries of every client (see the module docstring)."""

    def __init__(
        self,
        cfg: BatteryConfig,
        seed: int,
        zone_h: Callable[[int], float],
        capacity_j: Callable[[int], AnyDist] | None = None,
        charging: Callable[[int, float], tuple[bool, float]] | None = None,
    ) -> None:
        """`capacity_j(client)`: the client's capacity distribution where it is not
        `cfg.capacity_j` (a device class's own). `charging(client, t_s)`: (is it charging at
        `t_s`, the instant that next changes), in place of the daily window (a trace's flag)."""
        self.cfg, self.seed, self._zone_of, self._capacity_of = cfg, seed, zone_h, capacity_j
        self._charging = charging
        self._levels: dict[int, Level] = {}  # only clients that have spent energy
        # their drawn columns and zone (nan until asked), kept beside their level (a cache:
        # pure functions of the seed, rebuilt by a resumed run's replayed rows)
        self._drawn: dict[int, tuple[Cell, float]] = {}
        self.optouts_s: list[float] = []  # when a row took a device below its threshold
        self.limited: set[int] = set()  # clients ever opted out or stopped by their battery
        self.empty_stops = 0  # ledger rows that ended as `battery`

    def __len__(self) -> int:
        return len(self._levels)

    # the drawn columns --------------------------------------------------------------------

    def cell(self, client: int) -> Cell:
        """Capacity, initial state of charge (clipped to [0, 1]) and threshold of `client`."""
        drawn = self._drawn.get(client)
        return drawn[0] if drawn is not None else self._draw(client)

    def _draw(self, client: int) -> Cell:
        cfg = self.cfg
        rng = generator(self.seed, Stream.BATTERY, client)
        capacity_d = cfg.capacity_j if self._capacity_of is None else self._capacity_of(client)
        capacity, initial, threshold = (
            _one(d, rng, client) for d in (capacity_d, cfg.initial_soc, cfg.threshold_soc)
        )
        return Cell(capacity, min(max(initial, 0.0), 1.0), min(max(threshold, 0.0), 1.0))

    def zone_h(self, client: int) -> float:
        drawn = self._drawn.get(client)
        if drawn is None:
            return self._zone_of(client)
        if math.isnan(drawn[1]):  # drawn when first needed
            drawn = self._drawn[client] = (drawn[0], self._zone_of(client))
        return drawn[1]

    # the timeline -------------------------------------------------------------------------

    def level(self, client: int, t_s: float) -> Level:
        """`client`'s charge at `t_s` (no earlier than its last row), charging and idle drain
        applied piece by piece between its last row and `t_s`. Pure: stores nothing."""
        cell = self.cell(client)
        start = self._levels.get(client)
        if start is None:
            initial = cell.initial_soc * cell.capacity_j
            start = Level(0.0, initial, cell.initial_soc < cell.threshold_soc)
        return self._advance(cell, start, t_s, client)

    def _charging_of(self, client: int) -> Callable[[float], tuple[bool, float]]:
        """t_s -> (is `client` charging at t_s, the instant that next changes)."""
        if self._charging is not None:
            by_trace = self._charging
            return lambda t: by_trace(client, t)
        zone_h = self.zone_h(client)
        start_h, end_h = self.cfg.charging_start_hour, self.cfg.charging_end_hour

        def window(t: float) -> tuple[bool, float]:
            charging, to_edge_h = _window((t / HOUR_S + zone_h) % 24.0, start_h, end_h)
            return charging, t + to_edge_h * HOUR_S

        return window

    def _advance(self, cell: Cell, lv: Level, t_s: float, client: int) -> Level:
        cfg = self.cfg
        t, charge, locked = lv
        low_j = cell.threshold_soc * cell.capacity_j
        resume_j = min(cell.threshold_soc + cfg.resume_margin_soc, 1.0) * cell.capacity_j
        if cfg.charging_power_w == 0 and cfg.idle_power_w == 0:
            return Level(max(t, t_s), charge, locked)
        charging_at = self._charging_of(client)
        while t < t_s:
            charging, edge_s = charging_at(t)
            end = min(t_s, edge_s)
            if end <= t:  # an edge rounded onto t: step past it
                end = min(t_s, math.nextafter(t, math.inf))
            rate_w = (cfg.charging_power_w if charging else 0.0) - cfg.idle_power_w
            charge = min(max(charge + rate_w * (end - t), 0.0), cell.capacity_j)
            if rate_w < 0 and charge < low_j:
                locked = True
            elif rate_w > 0 and charge >= resume_j:
                locked = False
            t = end
        return Level(max(t, lv.t_s), charge, locked)

    def spend(self, client: int, t_s: float, energy_j: float, outcome: str) -> None:
        """A ledger row of `energy_j` on `client` that ended at `t_s` (a
        `flnet.sim.ledger.Subscriber`)."""
        if client not in self._drawn:
            self._drawn[client] = (self._draw(client), math.nan)
        cell = self.cell(client)
        lv = self.level(client, t_s)
        charge = max(lv.charge_j - energy_j, 0.0)
        locked = lv.locked or charge < cell.threshold_soc * cell.capacity_j
        if locked and not lv.locked:
            self.optouts_s.append(t_s)
            self.limited.add(client)
        if outcome == "battery":
            self.empty_stops += 1
            self.limited.add(client)
        self._levels[client] = Level(t_s, charge, locked)

    def ok(self, clients: np.ndarray, t_s: float) -> np.ndarray:
        """[k] bool: each of `clients` is not opted out at `t_s`."""
        return np.fromiter(
            (not self.level(c, t_s).locked for c in np.asarray(clients).tolist()),
            dtype=bool,
            count=len(clients),
        )

    def empty_s(self, client: int, start_s: float, phases: list[tuple[float, float]]) -> float:
        """When work starting at `start_s` in `phases` ((seconds, watts) each, back to back)
        would run the battery empty (inf: it would not). Charging and idle drain during the
        work are left out: the work's cut is known when it starts."""
        charge = self.level(client, start_s).charge_j
        t = start_s
        for seconds, power_w in phases:
            need_j = seconds * power_w
            if need_j > charge:
                return t + charge / power_w
            charge -= need_j
            t += seconds
        return math.inf

    def levels_at(self, t_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(charge_j, capacity_j, locked) at `t_s` of every client with an entry, in entry
        order: `level` of each, the daily window's timeline walked for all at once (the same
        operations on arrays, so the same numbers: tests/test_battery.py)."""
        clients = list(self._levels)
        cells = [self.cell(c) for c in clients]
        capacity = np.array([c.capacity_j for c in cells], dtype=float)
        if self._charging is not None:  # a trace's flag: one client at a time
            levels = [self.level(c, t_s) for c in clients]
            charge = np.array([lv.charge_j for lv in levels], dtype=float)
            return charge, capacity, np.array([lv.locked for lv in levels], dtype=bool)
        cfg = self.cfg
        start = list(self._levels.values())
        t = np.array([lv.t_s for lv in start], dtype=float)
        charge = np.array([lv.charge_j for lv in start], dtype=float)
        locked = np.array([lv.locked for lv in start], dtype=bool)
        if cfg.charging_power_w == 0 and cfg.idle_power_w == 0:
            return charge, capacity, locked
        threshold = np.array([c.threshold_soc for c in cells], dtype=float)
        low_j = threshold * capacity
        resume_j = np.minimum(threshold + cfg.resume_margin_soc, 1.0) * capacity
        zone_h = np.array([self.zone_h(c) for c in clients], dtype=float)
        active = t < t_s
        while active.any():
            charging, to_edge_h = _windows(
                np.mod(t / HOUR_S + zone_h, 24.0), cfg.charging_start_hour, cfg.charging_end_hour
            )
            end = np.minimum(t_s, t + to_edge_h * HOUR_S)
            end = np.where(end <= t, np.minimum(t_s, np.nextafter(t, math.inf)), end)
            rate_w = np.where(charging, cfg.charging_power_w, 0.0) - cfg.idle_power_w
            new = np.minimum(np.maximum(charge + rate_w * (end - t), 0.0), capacity)
            charge = np.where(active, new, charge)
            locked = np.where(active & (rate_w < 0) & (new < low_j), True, locked)
            locked = np.where(active & (rate_w > 0) & (new >= resume_j), False, locked)
            t = np.where(active, end, t)
            active = t < t_s
        return charge, capacity, locked

    def figures(self, t_s: float) -> dict[str, float]:
        """The records' battery columns at `t_s`: of the clients that have taken part, how
        many are opted out now; clients ever taken below their threshold by a row or stopped
        empty (`limited`); such opt-outs so far and in the last hour; work stopped empty; and
        the participants' mean and minimum state of charge (O(participants), never O(N))."""
        charge_j, capacity_j, locked = self.levels_at(t_s)
        soc = charge_j / capacity_j
        return {
            "battery_opted_out": float(locked.sum()),
            "battery_limited_clients": float(len(self.limited)),
            "battery_optouts": float(len(self.optouts_s)),
            "battery_optouts_last_h": float(
                len(self.optouts_s) - bisect.bisect_right(self.optouts_s, t_s - HOUR_S)
            ),
            "battery_empty_stops": float(self.empty_stops),
            "soc_mean": float(soc.mean()) if len(soc) else math.nan,
            "soc_min": float(soc.min()) if len(soc) else math.nan,
        }


def _one(d: object, rng: np.random.Generator, client: int) -> float:
    """One client's value of a distribution (per_client: its own entry)."""
    if isinstance(d, PerClient):
        return float(d.values[client])
    return float(sample(d, rng, 1)[0])  # type: ignore[arg-type]


def _windows(hour: np.ndarray, start_h: float, end_h: float) -> tuple[np.ndarray, np.ndarray]:
    """`_window` for an array of local hours."""
    if start_h == end_h:
        return np.zeros(len(hour), dtype=bool), np.full(len(hour), 24.0)
    if start_h < end_h:
        inside = (start_h <= hour) & (hour < end_h)
    else:
        inside = (hour >= start_h) | (hour < end_h)
    to_edge_h = np.mod(np.where(inside, end_h, start_h) - hour, 24.0)
    return inside, np.where(to_edge_h == 0, 24.0, to_edge_h)


def _window(hour: float, start_h: float, end_h: float) -> tuple[bool, float]:
    """(is local `hour` in the charging window [start_h, end_h) (wrapping midnight), hours to
    the next edge of the window)."""
    if start_h == end_h:
        return False, 24.0
    inside = (start_h <= hour < end_h) if start_h < end_h else (hour >= start_h or hour < end_h)
    edge = end_h if inside else start_h
    return inside, (edge - hour) % 24.0 or 24.0
