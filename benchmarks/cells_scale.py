"""What interference costs per event, against the transfers under way and the clients registered.

    .venv/bin/python benchmarks/cells_scale.py [--reps 3]

For n uplinks under way at once in 7 co-channel cells (reuse 1), on a population of N registered
clients, prints the CPU-microseconds per transfer (each start and end re-times all n) of the
cells' band (`flnet.sim.interference.CellBand`) beside the plain shared band. The band reads only
the rows of the clients that transmit, so its cost per event grows with n (and the stations),
not with N. The [N] and [N, B] arrays here stand in for a run's rows; a run keeps none, it
computes a client's when asked (`flnet.sim.cell_clients`; peak RSS at 1,000,000 clients with and
without cells: `bench.py --population`).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import simpy

from flnet.sim.cells import CellLayout, FixedCells
from flnet.sim.channel import SharedBandArrays
from flnet.sim.interference import CellBand

STATIONS = 7


def layout() -> CellLayout:
    angles = np.arange(STATIONS - 1) * np.pi / 3
    xy = np.vstack([[0.0, 0.0], np.stack([np.cos(angles), np.sin(angles)], 1) * 500.0])
    group = np.zeros(STATIONS, dtype=np.int64)
    coupled = ~np.eye(STATIONS, dtype=bool)
    return CellLayout(xy, np.ones(STATIONS), group, 20e6, 20e6, 10 ** (-20.4), coupled)


def per_transfer_us(make, n: int, reps: int) -> float:
    rng = np.random.default_rng(0)
    snr_hz = (10 ** rng.uniform(12, 15, n)).tolist()
    senders = rng.choice(make.registered, n, replace=False).tolist()
    best = float("inf")
    for _ in range(reps):
        env = simpy.Environment()
        band = make(env)
        start = time.process_time()
        for k in range(n):  # all start at once: every start and end re-times n transfers
            band.transmit(1e6, snr_hz[k], senders[k])
        env.run()
        best = min(best, time.process_time() - start)
    return best / n * 1e6


class Cells:
    def __init__(self, registered: int) -> None:
        rng = np.random.default_rng(1)
        self.registered = registered
        self.cells = layout()
        self.attached = rng.integers(0, STATIONS, registered)
        self.radiated_w = np.full(registered, 0.01)
        self.gain = 10 ** rng.uniform(-14, -10, (registered, STATIONS))

    def __call__(self, env: simpy.Environment) -> CellBand:
        rows = FixedCells(self.attached, self.gain)
        return CellBand(env, 20e6, self.cells, rows, self.radiated_w, True, True)

    @property
    def bytes_per_client(self) -> float:
        return (self.attached.nbytes + self.radiated_w.nbytes + self.gain.nbytes) / self.registered


class Plain:
    def __init__(self, registered: int) -> None:
        self.registered = registered

    def __call__(self, env: simpy.Environment) -> SharedBandArrays:
        return SharedBandArrays(env, 20e6)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU-us per transfer, n uplinks at once in {STATIONS} co-channel cells:")
    for registered in (1_000, 1_000_000):
        cells, plain = Cells(registered), Plain(registered)
        print(
            f"  N = {registered:>9,} registered "
            f"({cells.bytes_per_client:.0f} B/client of stand-ins):"
        )
        for n in (10, 100, 1000):
            with_cells = per_transfer_us(cells, n, args.reps)
            alone = per_transfer_us(plain, n, args.reps)
            print(f"    n = {n:4d}: cells {with_cells:8.1f}   plain shared band {alone:8.1f}")


if __name__ == "__main__":
    main()
