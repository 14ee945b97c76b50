"""Partial work: how many local steps each client of a round can do, as in the systems-
heterogeneity experiments of FedProx (Li et al., "Federated Optimization in Heterogeneous
Networks", MLSys 2020, Section 5.2). Used by FedAvg and FedProx (`central.rounds`).

- ``deadline``: a client does floor((deadline_s - down_s - up_s) / step_s) steps, its download
  and upload time alone on the band and its step time (`World.alone_s`, no fading: what the
  client can know when the round starts), at least 1 and at most its full work. A client made
  later by contention for a shared band is still dropped at the deadline (`round_trip`).
- ``stragglers``: the paper's code (github.com/litian96/FedProx, flearn/trainers/fedprox.py):
  of the C selected clients, round(C * (1 - fraction)) chosen at random are active and the
  others straggle, each doing a number of local epochs drawn uniformly from [1, E] (in steps
  mode, of steps from [1, tau]). Which clients straggle is drawn from (seed, STRAGGLERS,
  round); each straggler's amount from (seed, PARTIAL_WORK, round, client). Python's `round`
  (half to even) as the code's. The range [1, E] is the paper's text ("chosen uniformly at
  random between [1, E]"); the code's ``np.random.randint(low=1, high=self.num_epochs)``
  excludes E (numpy's high is exclusive, and E = 1 would raise): the paper decides.

The paper's FedProx aggregates the stragglers' partial updates; its FedAvg drops them: in the
code it trains only the active clients (`fedavg.py`: ``for c in active_clients``), and under
a deadline a FedAvg client that cannot finish is cut at the deadline (the text: "FedAvg will
simply drop devices that fail to complete E epochs within the global time").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from flnet.config import LocalConfig, PartialWorkConfig
from flnet.rng import Stream
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner


class Plan(NamedTuple):
    """A round's partial work, per member of the cohort."""

    steps: np.ndarray  # [C] local steps each member does
    straggles: np.ndarray  # [C] bool: the member cannot do its full work


def steps_that_fit(
    deadline_s: float, down_s: np.ndarray, up_s: np.ndarray, step_s: np.ndarray, full: np.ndarray
) -> np.ndarray:
    """[C] floor((deadline_s - down_s - up_s) / step_s), at least 1, at most `full`."""
    with np.errstate(divide="ignore", invalid="ignore"):  # a step of no time fits any number
        fit = np.floor((deadline_s - down_s - up_s) / step_s)
    return np.clip(np.nan_to_num(fit, nan=1.0), 1, full).astype(np.int64)


def stragglers(world: AbstractWorld, size: int, fraction: float, t: int) -> np.ndarray:
    """[size] bool: the cohort positions that straggle this round (all but
    round(size * (1 - fraction)), chosen uniformly) in round `t`."""
    active = round(size * (1.0 - fraction))
    chosen = world.generator(Stream.STRAGGLERS, t).choice(size, size - active, replace=False)
    out = np.zeros(size, dtype=bool)
    out[chosen] = True
    return out


def random_amount(world: AbstractWorld, upper: int, t: int, client: int) -> int:
    """Uniform in [1, upper] (the paper's [1, E]; see the module docstring)."""
    return int(world.generator(Stream.PARTIAL_WORK, t, client).integers(1, upper + 1))


def plan(
    world: AbstractWorld,
    learn: Learner,
    partial: PartialWorkConfig,
    local: LocalConfig,
    cohort: np.ndarray,
    t: int,
    model_bits: float,
    deadline_s: float | None,
    block: int | None = None,
) -> Plan:
    """How many local steps each member of `cohort` does in round `t` (on its rows of data
    block `block`, with block-cyclic data)."""
    full = learn.full_steps(cohort, local, block)
    if partial.kind == "deadline":
        assert deadline_s is not None  # the config checks it
        alone = world.alone_s(cohort, model_bits, learn.step_flops(local), model_bits)
        steps = steps_that_fit(deadline_s, alone.down_s, alone.up_s, alone.compute_s, full)
        return Plan(steps, steps < full)
    straggles = stragglers(world, len(cohort), partial.fraction, t)
    steps = full.copy()
    upper = int(local.epochs or local.steps or 1)  # E, or tau in steps mode (one is set)
    for pos in np.flatnonzero(straggles).tolist():
        amount = random_amount(world, upper, t, int(cohort[pos]))
        # E epochs are E times one epoch's steps: `amount` epochs are `amount` times
        steps[pos] = amount if local.epochs is None else full[pos] // local.epochs * amount
    return Plan(steps, straggles)
