"""SCAFFOLD: Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020, Algorithm 1 with option II control variates and a server step size.

The server keeps x and c, each client i its control variate c_i (0 before its first round).
Each round the server sends (x, c) to S; a client takes K steps y <- y - eta_l (g_i(y) - c_i + c)
from y = x, sets c_i+ = c_i - c + (x - y) / (K eta_l) (option II), and sends
(dy, dc) = (y - x, c_i+ - c_i). The server, with the mean over S of both, sets
x <- x + eta_g mean(dy) and c <- c + |S| / N mean(dc).

Choices where the paper is silent (documented, tested):
- Only delivered uploads count: S in line 17 is the clients whose upload arrived, so
  c <- c + (1/N) sum over delivered dc_i, and c stays the mean of all c_i while no upload is lost.
- c_i follows simulated time: a client's c_i+ takes effect when its local work completes; work cut
  before then leaves c_i as it was; a lost upload (deadline, over-selection) keeps c_i+ on the
  client while the server never adds its dc_i, so c drifts from the mean of the c_i, as on real
  devices.
- The correction c - c_i is added to each minibatch gradient ahead of the client optimizer
  (`optim.add_correction`); option II's formula takes eta_l as the optimizer's learning rate and K
  as each client's own local steps, exact for plain SGD (the paper's setting).
- The means are unweighted, as in Algorithm 1 (FedAvg here weights by sample counts).
- The clients must use plain SGD (`ScaffoldConfig` refuses another optimizer, momentum and
  SAM): option II's formula divides by K eta_l, the distance K plain SGD steps of size eta_l
  travel; with momentum 0.9 (K = 10, eta_l = 0.05, a quadratic) c_i+ came out 5.7 times the
  mean of the K gradients it stands for. Weight decay is
  allowed: it is plain SGD on f_i plus an L2 term, and c_i estimates that objective's gradient.
- With `server_optimizer` (Reddi et al. 2021, `flnet.learn.server_optim`), x takes that
  optimizer's step along the delivered dy in place of x + eta_g mean(dy); with `server` another
  rule replaces mean(dy) (`flnet.algorithms.server`); either way c is updated as above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from flnet.algorithms import delivery, selection, server, train_loss
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import ScaffoldConfig as Config
from flnet.learn import optim
from flnet.learn.cohort import LossFn
from flnet.learn.table import Keep, Keeps
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] server model
    c: torch.Tensor  # [P] server control variate
    server: Any = None  # the server optimizer's state (None: x + eta_g mean(dy))


class Down(NamedTuple):
    """Server -> client (line 5)."""

    x: torch.Tensor  # [P]
    c: torch.Tensor  # [P]


class Up(NamedTuple):
    """Client -> server (line 13)."""

    dy: torch.Tensor  # [P] y_i - x
    dc: torch.Tensor  # [P] c_i+ - c_i


OWN_RULE = "mean"  # line 17: x + eta_g mean(dy)


def server_of(cfg: Config) -> server.Server:
    """The rule over dy (or the server optimizer); Algorithm 1's plain mean by default."""
    return server.from_config(cfg.server, cfg.server_optimizer, OWN_RULE)


def init(learn: Learner, cfg: Config) -> State:
    x = learn.model.init_params()
    return State(0, x, torch.zeros_like(x), server.init(server_of(cfg), x))


def progress(state: State) -> Progress:
    """What observers see after round `state.round`: the server model x is the one judged."""
    return Progress(state.round, state.x, state)


def client_control(
    c_i: torch.Tensor,
    c: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    steps: torch.Tensor,
    lr: float,
) -> torch.Tensor:
    """Option II (line 12): c_i+ = c_i - c + (x - y_i) / (K_i eta_l); c_i, y [C, P]; c, x [P];
    steps K_i [C] (all K with `local.steps`, ceil(n_i / B) * E with `local.epochs`)."""
    return c_i - c + (x - y) / (steps.to(y.dtype)[:, None] * lr)


def server_control(c: torch.Tensor, dc: torch.Tensor, num_clients: int) -> torch.Tensor:
    """Line 17's c over the delivered dc [D, P]: c + D/N mean(dc) (always the mean: it keeps c
    the mean of the clients' c_i; x's step is `server.step_along`)."""
    return c + len(dc) / num_clients * dc.mean(0)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    loss_fn: LossFn | None = None,
) -> Steps:
    """`loss_fn` replaces the clients' cross-entropy (tests use a quadratic)."""
    x, c, opt_state = state.x, state.c, state.server
    rule = server_of(cfg)
    c_table = learn.client_table("scaffold.c_i", torch.zeros_like(x))  # rows only once written
    k = cfg.cohort.k(world.num_clients)
    for t in world.steps(state.round):
        lr = cfg.local.lr_at(t)  # eta_l of this round (local.lr_schedule)
        assert lr is not None  # ScaffoldConfig allows sgd only, which has one
        corrected = optim.chain(optim.add_correction(), optim.from_config(cfg.local, t))
        down_bits = learn.bits(Down(x, c))  # up: two model-shaped tensors as well
        expected = selection.expected_work(learn, cfg.local, down_bits, down_bits)
        cohort = world.sample_clients(k, t, cfg.cohort.over_selection, work=expected)  # S
        c_i = c_table.rows(cohort)  # [C, P]
        work = learn.local_train(
            cohort,
            x,
            cfg.local,
            t,
            optimizer=corrected,  # lines 7-11
            loss_fn=loss_fn,
            aux=c - c_i,
        )
        k_i = torch.as_tensor(work.steps, device=x.device)
        c_new = client_control(c_i, c, x, work.params, k_i, lr)  # line 12
        up = Up(work.params - x, c_new - c_i)  # line 13
        done = yield from round_trip(
            world,
            cohort,
            Packet(Down(x, c), down_bits),
            work.flops,
            Packet(up, learn.bits(Up(up.dy[0], up.dc[0]))),
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
            client_state=Keeps(Keep(c_table, cohort, c_new), work.keep),
        )  # line 14
        got = delivery.delivered(done, cohort, learn.num_samples)
        train_loss.delivered(learn, got, work, "uniform")
        if got is not None:  # lines 16-17
            x, opt_state = server.step_along(
                rule, x, got.rows(up.dy), got, opt_state, cfg.server_lr
            )
            c = server_control(c, got.rows(up.dc), world.num_clients)
        world.publish(progress(State(t, x, c, opt_state)))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import scaffold as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
