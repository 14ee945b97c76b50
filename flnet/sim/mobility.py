"""Clients that move: random waypoint positions on the simulated clock (`radio.cells.mobility`).

Each client walks from its position to a waypoint drawn uniformly in the square of
`clients.positions` (side L), at a speed drawn uniformly in [min_speed, max_speed], pauses
`pause_s` there, and draws the next (Camp, Boleng and Davies, "A survey of mobility models for
ad hoc network research", 2002, section 2.1.1). Positions are taken at epochs: a transfer that
starts in epoch k = floor(t / epoch_s) uses the positions, gains and attachment at k * epoch_s,
so they change between rounds, never under a transfer.

Every client walks on its own, from t = 0: its leg j (j = 0, 1, ...) starts where leg j - 1
ended (leg 0 at its position), when leg j - 1's pause is over, toward a waypoint with a speed
drawn from ``default_rng([seed, MOBILITY, client, j]).random(3)`` = (u0, u1, u2): the waypoint
(L u0, L u1), the speed ``min + (max - min) u2``. So a client's position at an instant depends
only on the seed, the client and the instant: never on which clients are asked, in what order
or when. It is computed for the clients asked about, walking on from the leg each was last seen
on (kept for at most `LEGS_KEPT` clients; one dropped walks again from leg 0, to the same
numbers): O(legs walked) a client asked, nothing per registered client.
"""

from __future__ import annotations

import math

import numpy as np

from flnet import draws
from flnet.rng import Stream, key_rows, stream_key
from flnet.schema import RandomWaypoint
from flnet.sim.kept import KeptRows

LEGS_KEPT = 16_384  # clients whose current leg is kept (7 floats each, flnet.sim.kept)
# a leg's columns: its index, start instant, from (x, y), to (x, y), speed
LEG, START_S, X0, Y0, X1, Y1, SPEED = range(7)


class Waypoints:
    """Every client's random walk in the square [0, `side_m`]^2, each from its own start."""

    def __init__(self, model: RandomWaypoint, side_m: float, seed: int) -> None:
        self.model, self.side_m, self.seed = model, side_m, seed
        self._legs = KeptRows(7, LEGS_KEPT)  # each client's leg as last seen

    def epoch_of(self, t_s: float) -> int:
        return math.floor(t_s / self.model.epoch_s)

    @property
    def kept(self) -> int:
        """How many clients' legs are kept."""
        return len(self._legs)

    def at(self, clients: np.ndarray, t_s: float, start_xy_m: np.ndarray) -> np.ndarray:
        """[C, 2] where `clients` are at instant `t_s` (>= 0), `start_xy_m` [C, 2] their
        positions at t = 0."""
        clients = np.asarray(clients, dtype=np.int64)
        known, legs = self._legs.get(clients)
        # one never seen, or last seen on a leg after t_s: from its first leg
        fresh = ~known | (legs[:, START_S] > t_s)
        if fresh.any():
            first = np.zeros((int(fresh.sum()), 7))
            first[:, X0:X1] = start_xy_m[fresh]
            legs[fresh] = self._draw(clients[fresh], first)
        while True:
            done = np.flatnonzero(self._end_s(legs) <= t_s)
            if not len(done):
                break
            nxt = np.empty((len(done), 7))
            nxt[:, LEG] = legs[done, LEG] + 1
            nxt[:, START_S] = self._end_s(legs[done])
            nxt[:, X0:X1] = legs[done, X1:SPEED]  # from the waypoint just reached
            legs[done] = self._draw(clients[done], nxt)
        self._legs.put(clients, legs)
        return self._position(legs, t_s)

    def _draw(self, clients: np.ndarray, legs: np.ndarray) -> np.ndarray:
        """`legs` with their waypoints and speeds drawn (by client and leg index)."""
        keys = key_rows(stream_key(self.seed, Stream.MOBILITY), clients, legs[:, LEG])
        if len(keys) < draws.BLOCK_MIN_ROWS:  # numpy's own: the block's fixed cost is more
            u = np.array([np.random.default_rng(k).random(3) for k in keys.tolist()])
        else:
            u = draws.uniforms(keys, 3)
        model = self.model
        legs[:, X1:SPEED] = self.side_m * u[:, :2]
        legs[:, SPEED] = model.min_speed_m_s + (model.max_speed_m_s - model.min_speed_m_s) * u[:, 2]
        return legs

    def _end_s(self, legs: np.ndarray) -> np.ndarray:
        """When each leg's pause at its waypoint is over (the next leg's start)."""
        dx, dy = legs[:, X1] - legs[:, X0], legs[:, Y1] - legs[:, Y0]
        return legs[:, START_S] + np.hypot(dx, dy) / legs[:, SPEED] + self.model.pause_s

    @staticmethod
    def _position(legs: np.ndarray, t_s: float) -> np.ndarray:
        """[C, 2] each on its leg at `t_s`: along the line, or at the waypoint once reached."""
        dx, dy = legs[:, X1] - legs[:, X0], legs[:, Y1] - legs[:, Y0]
        distance_m = np.hypot(dx, dy)
        walked_m = legs[:, SPEED] * (t_s - legs[:, START_S])
        there = walked_m >= distance_m  # so short of it, distance_m > 0
        frac = walked_m / np.where(there, 1.0, distance_m)
        xy = np.empty((len(legs), 2))
        xy[:, 0] = np.where(there, legs[:, X1], legs[:, X0] + dx * frac)
        xy[:, 1] = np.where(there, legs[:, Y1], legs[:, Y0] + dy * frac)
        return xy
