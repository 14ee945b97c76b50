"""Compute cost of local training on a device (Yang et al., TWC 2021).

cycles = FLOPs / (FLOPs per cycle); time = cycles / f; energy = kappa * cycles * f^2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Each takes one client's floats or [N] arrays of them and returns the same shape.
Num = float | np.ndarray


def cycles(flops: Num, flops_per_cycle: Num) -> Any:
    return flops / flops_per_cycle


def compute_time_s(flops: Num, cpu_hz: Num, flops_per_cycle: Num) -> Any:
    return cycles(flops, flops_per_cycle) / cpu_hz


def compute_energy_j(flops: Num, cpu_hz: Num, flops_per_cycle: Num, kappa: Num) -> Any:
    # f * f, not f ** 2: a float's ** is C's pow, an array's a product, and they round apart
    # in about one value in a thousand; a product is the same for one client as for an array
    return kappa * cycles(flops, flops_per_cycle) * (cpu_hz * cpu_hz)
