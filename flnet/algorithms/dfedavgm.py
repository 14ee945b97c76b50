"""DFedAvgM: Sun, Li and Wang, "Decentralized Federated Averaging", IEEE TPAMI 2022, DFedAvg
with local momentum (a baseline of OledFL, whose paper gives no update rule for it).

Round t at every node i: y_0 = x_0 = x_i^t, then K local steps
  y_{k+1} = x_k - eta g_i(x_k; eps_k),   x_{k+1} = y_{k+1} + theta (y_{k+1} - y_k),
then the gossip mix of x_K as DFedAvg's. This is Nesterov's form, `torch.optim.SGD(nesterov=
True)` step for step (`flnet.learn.optim.nesterov` shows it), not PyTorch's plain heavy ball;
the momentum restarts every round (`local.optimizer_state: reset`; `persist` keeps it).

Unverified: the form is the OledFL digest's recollection of Sun et al. (their paper is not in
shared/papers and could not be read here). An audit recalled a heavy-ball step instead,
y_{k+1} = y_k - eta g(y_k) + theta (y_k - y_{k-1}), y_{-1} = y_0 = x_i^t, sending y_K
(`optim.sgd(lr, theta)` without Nesterov). Check Sun et al.'s Algorithm 1 before relying on
DFedAvgM's figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flnet.algorithms import decentralized, gossip_rounds
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DfedavgmConfig as Config
from flnet.algorithms.gossip_rounds import State, init, progress
from flnet.learn import optim
from flnet.learn.cohort import LossFn
from flnet.sim import topology
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:
    from flnet.learn.local import Learner

NAME = "DFedAvgM"  # as its messages name it

__all__ = ["Config", "State", "init", "progress", "protocol", "check", "local_optimizer"]


def local_optimizer(cfg: Config, round: int | None = None) -> optim.GradientTransformation:
    """SGD with Nesterov momentum theta (and the scenario's weight decay and SAM, if any), at
    round `round`'s learning rate (`local.lr_schedule`)."""
    local = cfg.local
    lr = local.lr_at(round)
    assert lr is not None and local.optimizer.name == "sgd"  # the Config checks it
    base = optim.sgd(lr, cfg.momentum, local.optimizer.weight_decay, use_nesterov=True)
    return base if local.sam_rho is None else optim.sam(base, local.sam_rho)


def check(world: AbstractWorld, learn: Learner, cfg: Config) -> None:
    """Round 1's checks of W, without the run (`flnet validate`)."""
    decentralized.check(world, cfg, NAME)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    loss_fn: LossFn | None = None,
    mixing: topology.Mixing | None = None,
) -> Steps:
    """DFedAvg's rounds (`gossip_rounds.rounds`) with the momentum steps of `local_optimizer`."""
    return gossip_rounds.rounds(
        world,
        learn,
        cfg,
        state,
        NAME,
        optimizer=lambda t: local_optimizer(cfg, t),
        loss_fn=loss_fn,
        mixing=mixing,
    )


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import dfedavgm as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
