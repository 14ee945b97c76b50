"""Server optimizers: Reddi et al., "Adaptive Federated Optimization", ICLR 2021.

Algorithm 1 (FedOpt) has the server step x_{t+1} = ServerOpt(x_t, -Delta_t, eta, t): the mean
client delta Delta_t = (1/|S|) sum_i (x_i - x_t) is a pseudo-gradient, negated, and any
optimizer may take it. So a server optimizer here is a client optimizer of `flnet.learn.optim`
(the same `GradientTransformation`, `chain` and `scale_by_learning_rate`) over one ``[P]`` row,
fed ``-Delta_t``; a centralized algorithm plugs one in with `step` in place of its own
aggregate. Algorithm 2, written with g = -Delta_t (so m here is the paper's m negated):

    m_t = b1 m_{t-1} + (1 - b1) g
    v_t = v_{t-1} + g^2                                  FedAdagrad
    v_t = b2 v_{t-1} + (1 - b2) g^2                      FedAdam
    v_t = v_{t-1} - (1 - b2) g^2 sign(v_{t-1} - g^2)     FedYogi
    x_{t+1} = x_t - eta m_t / (sqrt(v_t) + tau)          no bias correction

with m_{-1} = 0 and v_{-1} = tau^2 (Algorithm 2 asks v_{-1} >= tau^2; we take the bound, as
TFF's Yogi does with its initial preconditioner 1e-6 at tau 1e-3). FedAvgM is server momentum
(Hsu et al. 2019), `torch.optim.SGD` with momentum on g: m = beta m + g, x -= eta m.

``variant: flower`` reproduces Flower 1.41's strategies (`flwr/serverapp/strategy/fedopt.py`,
`fedadam.py`, `fedyogi.py`, `fedadagrad.py`, `fedavgm.py` in adap/flower): Delta_t is the
sample-count-weighted mean (their FedAvg aggregate), v starts at 0, FedAdam's eta is
bias-corrected to eta sqrt(1 - b2^(r+1)) / (1 - b1^(r+1)) with r = 1 at the first server step
(their `server_round + 1.0`), and FedAdagrad has no momentum (beta1 = 0). Flower counts r by
server rounds; here r counts the server steps taken, the same while every round has an upload
to aggregate (a round without one takes no step).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from flnet.config import ServerOptimizerConfig
from flnet.learn import optim
from flnet.learn.aggregate import weighted_mean
from flnet.learn.optim import GradFn, GradientTransformation


class MomentsState(NamedTuple):
    m: torch.Tensor  # [P] first moment of g
    v: torch.Tensor  # [P] second moment


class StepsState(NamedTuple):
    taken: int  # server steps taken before this one


SECOND_MOMENTS = ("adagrad", "adam", "yogi")


def scale_by_moments(
    rule: str, b1: float, b2: float, tau: float, v0: float
) -> GradientTransformation:
    """m_t / (sqrt(v_t) + tau) with Algorithm 2's moments (`rule`: adagrad, adam or yogi),
    m starting at 0 and v at `v0`."""
    if rule not in SECOND_MOMENTS:
        raise ValueError(f"unknown second-moment rule {rule!r}; allowed: {SECOND_MOMENTS}")

    def init(params: torch.Tensor) -> MomentsState:
        return MomentsState(torch.zeros_like(params), torch.full_like(params, v0))

    def update(
        grads: torch.Tensor,
        state: MomentsState,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, MomentsState]:
        m = state.m.mul(b1).add_(grads, alpha=1 - b1)
        g2 = grads.square()
        if rule == "adagrad":
            v = state.v.add(g2)
        elif rule == "adam":
            v = state.v.mul(b2).add_(g2, alpha=1 - b2)
        else:  # yogi
            v = state.v.sub(g2.mul(torch.sign(state.v - g2)), alpha=1 - b2)
        return torch.div(m, v.sqrt().add_(tau), out=grads), MomentsState(m, v)

    return GradientTransformation(init, update)


def scale_by_flower_bias_correction(b1: float, b2: float) -> GradientTransformation:
    """g sqrt(1 - b2^(r+1)) / (1 - b1^(r+1)), r = 1, 2, ... the server step (Flower's
    FedAdam `eta_norm`, Kingma & Ba's alpha_t one step ahead)."""

    def update(
        grads: torch.Tensor,
        state: StepsState,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, StepsState]:
        r = state.taken + 1
        factor = math.sqrt(1 - b2 ** (r + 1.0)) / (1 - b1 ** (r + 1.0))
        return grads.mul_(factor), StepsState(r)

    return GradientTransformation(lambda params: StepsState(0), update)


class ServerOptimizer(NamedTuple):
    """What the server does with the delivered client deltas."""

    transform: GradientTransformation  # over the pseudo-gradient -Delta_t [P]
    weighted: bool  # Delta_t weighted by sample counts (flower), else the plain mean (reddi)


def fedavgm(lr: float, momentum: float, weighted: bool = False) -> ServerOptimizer:
    """Server momentum: m = momentum m + g; x -= lr m (SGD with momentum on g = -Delta)."""
    return ServerOptimizer(optim.sgd(lr, momentum), weighted)


def fedopt(
    rule: str, lr: float, b1: float, b2: float, tau: float, variant: str = "reddi"
) -> ServerOptimizer:
    """FedAdagrad, FedAdam or FedYogi (`rule`), as Algorithm 2 or as Flower (`variant`)."""
    flower = variant == "flower"
    return ServerOptimizer(
        optim.chain(
            scale_by_moments(rule, b1, b2, tau, v0=0.0 if flower else tau**2),
            *((scale_by_flower_bias_correction(b1, b2),) if flower and rule == "adam" else ()),
            optim.scale_by_learning_rate(lr),
        ),
        weighted=flower,
    )


def from_config(cfg: ServerOptimizerConfig) -> ServerOptimizer | None:
    """The server optimizer a scenario's `server_optimizer:` asks for; None for `none` (the
    algorithm's own server step)."""
    if cfg.name == "none":
        return None
    if cfg.name == "fedavgm":
        return fedavgm(cfg.lr, cfg.momentum, weighted=cfg.variant == "flower")
    if cfg.name == "fedadagrad":  # no b2 in Adagrad's rule
        return fedopt("adagrad", cfg.lr, cfg.beta1, 0.0, cfg.tau, cfg.variant)
    rule = {"fedadam": "adam", "fedyogi": "yogi"}[cfg.name]
    return fedopt(rule, cfg.lr, cfg.b1, cfg.b2, cfg.tau, cfg.variant)


def init(opt: ServerOptimizer | None, x: torch.Tensor) -> Any:
    """The optimizer's state for the model x [P]; None without an optimizer."""
    return None if opt is None else opt.transform.init(x)


def step(
    opt: ServerOptimizer,
    x: torch.Tensor,
    deltas: torch.Tensor,
    num_samples: np.ndarray,
    state: Any,
) -> tuple[torch.Tensor, Any]:
    """x_{t+1} = ServerOpt(x_t, -Delta_t) over the delivered deltas x_i - x_t [D, P] with their
    sample counts [D] -> (x_{t+1} [P], the new state)."""
    delta = weighted_mean(deltas, num_samples) if opt.weighted else deltas.mean(0)
    updates, state = opt.transform.update(delta.neg(), state, x)
    return x + updates, state


def labels(cfg: ServerOptimizerConfig | None) -> dict:
    """The server optimizer as record columns: `server_optimizer` (its name, `none` when the
    algorithm steps alone) and its settings as `server_<field>` (lr, b1, b2, tau, momentum,
    variant); b1 is the one in effect."""
    if cfg is None:
        return {}
    own = {f"server_{k}": v for k, v in cfg.model_dump().items() if k != "name"}
    if cfg.name == "fedadagrad":
        own["server_b1"] = cfg.beta1
    return {"server_optimizer": cfg.name, **own}
