"""Staleness functions s(staleness) of asynchronous servers (Xie, Koyejo and Gupta,
"Asynchronous Federated Optimization", 2019), written once for FedAsync's mixing
weight alpha * s and FedBuff's delta weights.

`staleness` is the number of server updates made between a client's start and its update's
arrival (0 when none intervened; `flnet.sim.patterns.Arrival.staleness`). The paper writes
s(t - tau) in its update t of a model stamped tau. Read to the letter, its Algorithm 1 stamps
the model a worker gets x_{t-1} with t - 1, so an update that missed nothing has t - tau = 1
and weighs s(1) (2^-a for the polynomial). We take t - tau to be the updates the client
missed, so a fresh update weighs s(0) = 1 under every function: the polynomial's "+ 1" is then
needed, FedBuff's 1/sqrt(1 + staleness) is the polynomial with a = 1/2 (as FLSim has it), and
the hinge keeps full weight for up to b missed updates. The letter's reading is s(staleness +
1) with these functions.
"""

from __future__ import annotations

from flnet.config import StalenessConfig


def constant(staleness: int) -> float:
    return 1.0


def polynomial(staleness: int, a: float) -> float:
    """(staleness + 1)^-a."""
    return float((staleness + 1.0) ** -a)


def hinge(staleness: int, a: float, b: int) -> float:
    """1 if staleness <= b, else 1 / (a (staleness - b) + 1)."""
    return 1.0 if staleness <= b else 1.0 / (a * (staleness - b) + 1.0)


def weight(staleness: int, fn: StalenessConfig) -> float:
    """s(staleness) as the scenario's `fn` says."""
    if fn.kind == "polynomial":
        return polynomial(staleness, fn.a)
    if fn.kind == "hinge":
        return hinge(staleness, fn.a, fn.b)
    return constant(staleness)
