"""Compute speed from a measurement: how fast this host trains the scenario's model, and the
``clients.cpu_hz`` that makes a simulated client's local work take as long as it takes here.

A simulated client's local work takes ``FLOPs / (flops_per_cycle * cpu_hz)`` seconds. `measure`
times one client's real local work (the scenario's `local` section, client 0, from the initial
model, one torch thread: a device trains alone), counts its training FLOPs with the model's own
counter, and `setting` turns the FLOP/s into the ``cpu_hz`` for the scenario's
``flops_per_cycle``. The FLOPs are those of the model trained here, also under
``model.costs_as``: the host's FLOP/s then charges the reference model's FLOPs at the same rate.
Compute energy follows from ``kappa * cycles * cpu_hz^2`` at the calibrated frequency.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from flnet.dists import Constant
from flnet.errors import ScenarioError
from flnet.runner import build
from flnet.scenario import Scenario


class Measurement(NamedTuple):
    works: int  # local works timed (one client each)
    samples: float  # per-sample gradients they took in all
    flops: float  # their training FLOPs, of the model trained
    seconds: float  # wall-clock seconds they took here

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds


def measure(
    scenario: Scenario, repeats: int = 5, clock: Callable[[], float] = time.perf_counter
) -> Measurement:
    """Time `repeats` local works of client 0 after one untimed warm-up (rounds 1..repeats, so
    each draws its own minibatches)."""
    local = getattr(scenario.algorithm, "local", None)
    if local is None:
        raise ScenarioError("has no local training to time", field="algorithm")
    if repeats < 1:
        raise ScenarioError(f"repeats must be >= 1, got {repeats}", field="repeats")
    _, learner = build(scenario)
    client, x = np.array([0]), learner.model.init_params()
    own = learner.model.training_flops_per_sample()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        learner.local_train(client, x, local, 0)  # warm-up: first-call costs are not training
        start = clock()
        charged = sum(
            float(learner.local_train(client, x, local, r).flops[0]) for r in range(1, repeats + 1)
        )
        seconds = clock() - start
    finally:
        torch.set_num_threads(threads)
    samples = round(charged / learner.flops_per_sample)  # what the learner charged, per sample
    return Measurement(repeats, samples, samples * own, seconds)


def setting(scenario: Scenario, m: Measurement) -> dict[str, float]:
    """The ``clients`` fields that make simulated compute take the measured time: ``cpu_hz`` at
    the scenario's ``flops_per_cycle`` when that is one number, else both (1 FLOP a cycle)."""
    fpc = scenario.clients.flops_per_cycle
    if isinstance(fpc, Constant):
        return {"clients.cpu_hz": m.flops_per_s / fpc.value}
    return {"clients.flops_per_cycle": 1.0, "clients.cpu_hz": m.flops_per_s}
