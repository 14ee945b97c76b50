"""Clients that move: random waypoint positions on the simulated clock (`radio.cells.mobility`).

Each client walks from its position to a waypoint drawn uniformly in the square of
`clients.positions` (side L), at a speed drawn uniformly in [min_speed, max_speed], pauses
`pause_s` there, and draws the next (Camp, Boleng and Davies, "A survey of mobility models for
ad hoc network research", 2002, section 2.1.1). Positions are taken at epochs: a transfer that
starts in epoch k = floor(t / epoch_s) uses the positions, gains and attachment at k * epoch_s,
so they change between rounds, never under a transfer. Epoch k's new waypoints and speeds are
drawn from stream MOBILITY keyed by k, in client order, so the walk depends only on the epoch,
never on when it is asked for. Each epoch moves every client (O(N) array work an epoch, none
per event); the shadowing of each client-station link is kept (drawn once).
"""

from __future__ import annotations

import math

import numpy as np

from flnet.rng import Stream, generator
from flnet.schema import ClientsConfig, PhysicalRadio, Radio, RandomWaypoint
from flnet.sim import cells as cells_mod
from flnet.sim.population import Population


class Waypoints:
    """Every client's random walk in the square [0, `side_m`]^2, from (`x_m`, `y_m`)."""

    def __init__(
        self, model: RandomWaypoint, side_m: float, x_m: np.ndarray, y_m: np.ndarray, seed: int
    ) -> None:
        self.model, self.side_m, self.seed = model, side_m, seed
        self.x_m, self.y_m = x_m.astype(float), y_m.astype(float)
        n = len(x_m)
        self.target = np.empty((2, n))
        self.speed_m_s = np.empty(n)
        self.pause_left_s = np.zeros(n)
        self.epoch = 0
        self._draw(np.arange(n), generator(seed, Stream.MOBILITY, 0))

    def epoch_of(self, t_s: float) -> int:
        return math.floor(t_s / self.model.epoch_s)

    def advance_to(self, epoch: int) -> bool:
        """Walk on to `epoch` (epochs only go forward); whether anyone moved."""
        moved = epoch > self.epoch
        while self.epoch < epoch:
            self.epoch += 1
            self._walk(self.model.epoch_s, generator(self.seed, Stream.MOBILITY, self.epoch))
        return moved

    def _draw(self, who: np.ndarray, rng: np.random.Generator) -> None:
        """New waypoints and speeds for `who`."""
        m = len(who)
        self.target[:, who] = rng.uniform(0.0, self.side_m, (2, m))
        self.speed_m_s[who] = rng.uniform(self.model.min_speed_m_s, self.model.max_speed_m_s, m)

    def _walk(self, seconds: float, rng: np.random.Generator) -> None:
        left = np.full(len(self.x_m), seconds)
        while True:
            pause = np.minimum(self.pause_left_s, left)
            self.pause_left_s -= pause
            left -= pause
            walking = np.flatnonzero(left > 0)
            if not len(walking):
                return
            dx = self.target[0, walking] - self.x_m[walking]
            dy = self.target[1, walking] - self.y_m[walking]
            distance = np.hypot(dx, dy)
            reach = self.speed_m_s[walking] * left[walking]
            arrive = reach >= distance
            on = walking[~arrive]  # still on the way at the epoch's end
            frac = reach[~arrive] / distance[~arrive]
            self.x_m[on] += dx[~arrive] * frac
            self.y_m[on] += dy[~arrive] * frac
            left[on] = 0.0
            there = walking[arrive]  # at the waypoint: pause, then the next
            self.x_m[there], self.y_m[there] = self.target[0, there], self.target[1, there]
            left[there] -= distance[arrive] / self.speed_m_s[there]
            self.pause_left_s[there] = self.model.pause_s
            self._draw(there, rng)


class MovingCells:
    """Keeps the population's cell columns (`cell`, `cell_gain`, the star SNRs) at the
    positions of the clock's epoch: `at(t_s)` walks on to t_s's epoch and recomputes them in
    place (the bands read them when a transfer starts)."""

    def __init__(self, radio: PhysicalRadio, population: Population, side_m: float, seed: int):
        assert radio.cells is not None and radio.cells.mobility is not None
        self.radio, self.population, self.seed = radio, population, seed
        self.layout = cells_mod.layout(radio)
        self.walk = Waypoints(radio.cells.mobility, side_m, population.x_m, population.y_m, seed)

    def at(self, t_s: float) -> None:
        walk = self.walk
        if not walk.advance_to(walk.epoch_of(t_s)):
            return
        pop, layout = self.population, self.layout
        assert self.radio.cells is not None
        gain = cells_mod.gains(self.radio, layout, walk.x_m, walk.y_m, self.seed)
        cell = cells_mod.attach(self.radio.cells.attach, gain, layout, walk.x_m, walk.y_m)
        serving = gain[np.arange(len(cell)), cell]
        pop.cell_gain[:] = gain
        pop.cell[:] = cell
        pop.up_snr_hz[:] = pop.radiated_w * serving / layout.noise_w_hz
        pop.down_snr_hz[:] = layout.station_power_w[cell] * serving / layout.noise_w_hz


def moving_cells(
    radio: Radio, clients: ClientsConfig, seed: int, population: Population
) -> MovingCells | None:
    """The walk of `radio.cells.mobility` (None where clients stand still)."""
    cells = radio.cells if radio.mode == "physical" else None
    if cells is None or cells.mobility is None:
        return None
    assert radio.mode == "physical"
    side_m = cells.mobility.side_m
    if side_m is None:
        positions = clients.positions
        assert positions is not None and positions.kind == "uniform"  # the scenario's check
        side_m = positions.side_m
    return MovingCells(radio, population, side_m, seed)
