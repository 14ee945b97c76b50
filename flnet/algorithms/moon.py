"""MOON: Li, He and Song, "Model-Contrastive Federated Learning", CVPR 2021, Algorithm 1.

FedAvg whose clients add a model-contrastive term to their loss: with z the representation of
a sample under the local model w, z_glob under the round's global model w^t and z_prev under the
client's own previous local model w_i^{t-1},
    l_con = -log( e(z_glob) / (e(z_glob) + e(z_prev)) ),  e(z') = exp(sim(z, z') / tau),
sim the cosine similarity, and the local loss is l_sup + mu * l_con (mean over the minibatch).
After local training the client keeps w_i^t as its next previous model; the server aggregates
as FedAvg (sample-size weighted mean of the delivered models, its `server` rule, or a step of
its `server_optimizer`: `flnet.algorithms.server`).

Choices (documented, tested):
- z is the penultimate activation, the input of the model's last Linear layer, with no
  projection head, as in the Delta-SGD code the digest follows (its ResNet's 512-d features,
  `two_output=True`); MOON's paper adds a 2-layer projection head, which changes nothing of the
  protocol but the parameters. `Model.forward_with_representation` declares z for every model.
- A client's first previous model is the global model it starts from (digest delta_sgd.md 5.3),
  so its first l_con is ln 2 + its gradient through z only.
- z_glob and z_prev are constants (no gradient), as in MOON's code (the two models are frozen).
- Compute: each gradient evaluation also runs the global and the previous model forward on
  its minibatch, so each client is charged 2 forward passes a sample on top of its training
  FLOPs (`Learner.forward_flops`).
- The previous model follows simulated time (as SCAFFOLD's c_i): it is replaced when the
  client's compute completes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.nn import functional as F

from flnet.algorithms import selection, server, train_loss
from flnet.algorithms.base import Steps
from flnet.algorithms.central import State, init, progress, server_of
from flnet.algorithms.configs import MoonConfig as Config
from flnet.algorithms.records import MOON
from flnet.learn.cohort import PAD, sample_losses
from flnet.learn.models import Model
from flnet.learn.table import Keep, Keeps
from flnet.learn.wire import ModelMessage
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.cohort import LossFn
    from flnet.learn.local import Learner

TABLE = "moon.previous"  # per client: its previous local model w_i^{t-1}
# the global and the previous model, on every minibatch (in the record: timing-only runs read it)
EXTRA_FORWARDS = MOON.extra_forwards

__all__ = ["Config", "State", "init", "progress", "protocol", "contrastive_loss"]


def contrastive_loss(mu: float, temperature: float, global_model: torch.Tensor) -> LossFn:
    """Per-client l_sup + mu * l_con over the real samples; global_model [P] is w^t, the aux
    rows [C, P] each client's previous model."""

    def loss_fn(
        model: Model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, aux: Any = None
    ) -> torch.Tensor:
        z, logits = model.forward_with_representation_stacked(params, x)  # [C, B, D], [C, B, K]
        with torch.no_grad():
            z_glob, _ = model.forward_with_representation_stacked(global_model.expand_as(params), x)
            z_prev, _ = model.forward_with_representation_stacked(aux, x)
        sims = torch.stack(
            [F.cosine_similarity(z, z_glob, dim=-1), F.cosine_similarity(z, z_prev, dim=-1)], -1
        )  # [C, B, 2]
        l_con = -torch.log_softmax(sims / temperature, -1)[..., 0]  # positive pair: the global
        l_sup = sample_losses(logits, y)
        real = y != PAD
        per_sample = l_sup + mu * torch.where(real, l_con, torch.zeros_like(l_con))
        return per_sample.sum(1) / real.sum(1)

    return loss_fn


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
) -> Steps:
    x, opt_state = state.x, state.server
    rule = server_of(cfg)  # FedAvg's
    previous = learn.client_table(TABLE, torch.zeros_like(x))  # rows only once written
    k = cfg.cohort.k(world.num_clients)
    sampler = selection.Sampler(cfg.cohort)
    for t in world.steps(state.round):
        x_bits = learn.bits(ModelMessage(x))
        expected = selection.expected_work(learn, cfg.local, x_bits, x_bits)
        drawn = sampler.draw(world, k, t, learn.num_samples, expected)  # S_t
        cohort = drawn.clients
        prev = previous.rows(cohort, default=x.expand(len(cohort), -1))  # first time: w^t
        work = learn.local_train(
            cohort,
            x,
            cfg.local,
            t,
            loss_fn=contrastive_loss(cfg.mu, cfg.temperature, x),
            aux=prev,
        )
        assert work.samples is not None  # local_train counts them
        flops = work.flops + learn.forward_flops(EXTRA_FORWARDS * work.samples)
        done = yield from round_trip(
            world,
            cohort,
            Packet(x, learn.bits(ModelMessage(x))),
            flops,
            Packet(work.params, learn.bits(ModelMessage(work.params[0]))),
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
            client_state=Keeps(Keep(previous, cohort, work.params), work.keep),
        )
        got = selection.delivered(done, drawn, learn.num_samples)
        train_loss.delivered(learn, got, work, "samples")
        if got is not None:  # FedAvg's server step
            x, opt_state = server.step(rule, x, got.rows(work.params), got, opt_state)
        world.publish(progress(State(t, x, opt_state)))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import moon as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
