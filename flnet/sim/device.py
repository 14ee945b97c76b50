"""Compute cost of local training on a device (Yang et al., TWC 2021).

cycles = FLOPs / (FLOPs per cycle); time = cycles / f; energy = kappa * cycles * f^2.
"""

from __future__ import annotations


def cycles(flops, flops_per_cycle):
    return flops / flops_per_cycle


def compute_time_s(flops, cpu_hz, flops_per_cycle):
    return cycles(flops, flops_per_cycle) / cpu_hz


def compute_energy_j(flops, cpu_hz, flops_per_cycle, kappa):
    return kappa * cycles(flops, flops_per_cycle) * cpu_hz**2
