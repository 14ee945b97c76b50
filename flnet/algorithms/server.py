"""The server's step of a central round over what was delivered (`delivery.Delivered`): the
scenario's `algorithm.server` rule or its `server_optimizer`, applied here once for every
central algorithm that takes them (FedAvg, FedProx, MOON, SCAFFOLD, MM-PSGD, MC-PSGD).

- No rule given (null): the algorithm's own (`own`): FedAvg's (and FedProx's, MOON's) mean
  weighted by sample counts; SCAFFOLD's, MM-PSGD's and MC-PSGD's plain mean, as their papers.
- A server optimizer (Reddi et al. 2021, `flnet.learn.server_optim`) steps along its own mean
  of the deltas instead; a rule beside one is refused (`flnet.config.OptionalServerRule`).
- SCAFFOLD's rule combines its dy (x + eta_g rule(dy)); its control variate c keeps the mean
  of dc, which is what keeps c the mean of the clients' c_i.
- FedDyn, DRFA and DRDM take no rule (their configs have no `server` field, so one is refused
  as an unknown field): FedDyn's model is mean(theta_k) - h / alpha with h summing the same
  deltas, and DRFA's and DRDM's means weigh each client by its draws from lambda (their
  estimator of the lambda-weighted loss); another rule breaks what their papers prove.

The rules are server computations only: the messages, and so the radio's charges, are the
weighted mean's (tests/test_server_rules.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from flnet.learn import server_optim
from flnet.learn.aggregate import combine

if TYPE_CHECKING:  # annotations only
    import torch

    from flnet.algorithms.delivery import Delivered
    from flnet.config import ServerOptimizerConfig, ServerRuleConfig


class Server(NamedTuple):
    """What the server does with the delivered models."""

    rule: str  # flnet.learn.aggregate.RULES
    trim_fraction: float  # trimmed_mean's
    optimizer: server_optim.ServerOptimizer | None  # steps in place of the rule


def from_config(
    rule: ServerRuleConfig | None, optimizer: ServerOptimizerConfig | None, own: str
) -> Server:
    """The scenario's rule (`own`, the algorithm's, where none is given) and optimizer."""
    return Server(
        own if rule is None else rule.rule,
        0.0 if rule is None or rule.trim_fraction is None else rule.trim_fraction,
        None if optimizer is None else server_optim.from_config(optimizer),
    )


def init(server: Server, x: torch.Tensor) -> Any:
    """The server optimizer's state for the model x (None without one)."""
    return server_optim.init(server.optimizer, x)


def aggregate(server: Server, rows: torch.Tensor, got: Delivered) -> torch.Tensor:
    """The delivered rows [D, P] as one [P] by the server's rule."""
    return combine(server.rule, rows, got.num_samples, server.trim_fraction)


def step(
    server: Server, x: torch.Tensor, models: torch.Tensor, got: Delivered, state: Any
) -> tuple[torch.Tensor, Any]:
    """The new model from the delivered models [D, P]: the rule's combination of them, or the
    optimizer's step along their deltas from x; and the optimizer's new state."""
    if server.optimizer is None:
        return aggregate(server, models, got), state
    return server_optim.step(server.optimizer, x, models - x, got.num_samples, state)


def step_along(
    server: Server,
    x: torch.Tensor,
    deltas: torch.Tensor,
    got: Delivered,
    state: Any,
    lr: float = 1.0,
) -> tuple[torch.Tensor, Any]:
    """The new model from the delivered deltas [D, P] from x: x + lr times the rule's
    combination of them, or the optimizer's step along them; and the optimizer's new state."""
    if server.optimizer is None:
        return x + lr * aggregate(server, deltas, got), state
    return server_optim.step(server.optimizer, x, deltas, got.num_samples, state)
