"""MOON: the contrastive loss and its gradient by hand on a two-layer model, the representation
layer each model declares, and the compute charged: FedAvg's plus two forward passes a step."""

import math

import numpy as np
import pytest
import torch
from conftest import BASE
from tolerance import assert_tensors_close
from torch import nn

from flnet.algorithms import moon
from flnet.learn.cohort import autograd_value_and_grad
from flnet.learn.models import Model
from flnet.runner import Run
from flnet.scenario import load_scenario, merge


def test_loss_and_gradient_by_hand():
    """z = W1 x with x = 1, so z is W1's column: local (1, 1), global (1, 0), previous (0, 1).
    Both cosines are 1/sqrt(2), so l_con = ln 2; with W2 = 0 the logits are 0 and l_sup = ln 2.
    d l_con / d(s_g - s_p) = -(1 - sigmoid(0)) / tau = -1 / (2 tau), and
    d(s_g - s_p)/dW1 = (b^2 + ab, -ab - a^2) / (a^2 + b^2)^1.5 = (1, -1) / sqrt(2), so
    d l_con / dW1 = (-1, 1) / (2 tau sqrt(2)); d l_sup / dW2 = (softmax - onehot) z^T =
    [[-0.5, -0.5], [0.5, 0.5]] for label 0, and d l_sup / dW1 = W2^T (...) = 0."""
    model = Model(nn.Sequential(nn.Linear(1, 2, bias=False), nn.Linear(2, 2, bias=False)), (1,))
    mu, tau = 0.7, 0.5
    local = torch.tensor([1.0, 1.0, 0, 0, 0, 0])  # W1 = (1, 1), W2 = 0
    glob = torch.tensor([1.0, 0.0, 0, 0, 0, 0])
    prev = torch.tensor([0.0, 1.0, 0, 0, 0, 0])
    x, y = torch.ones(1, 1, 1), torch.zeros(1, 1, dtype=torch.long)
    value_and_grad = autograd_value_and_grad(model, moon.contrastive_loss(mu, tau, glob))
    loss, grad = value_and_grad(local[None], x, y, aux=prev[None])
    assert loss.item() == pytest.approx((1 + mu) * math.log(2))
    g1 = mu / (2 * tau * math.sqrt(2))
    expected = [-g1, g1, -0.5, -0.5, 0.5, 0.5]
    assert grad[0].tolist() == pytest.approx(expected, abs=1e-6)


def test_padding_slots_do_not_count():
    model = Model(nn.Sequential(nn.Linear(1, 2, bias=False), nn.Linear(2, 2, bias=False)), (1,))
    params = torch.randn(1, 6, generator=torch.Generator().manual_seed(0))
    loss_fn = moon.contrastive_loss(1.0, 0.5, params[0] * 0.5)
    x, y = torch.tensor([[[1.0], [2.0]]]), torch.tensor([[1, -100]])
    two = loss_fn(model, params, x, y, params * 2)
    one = loss_fn(model, params, x[:, :1], y[:, :1], params * 2)
    assert two.item() == pytest.approx(one.item())


def test_every_model_declares_its_representation():
    """z is the input of the last Linear layer: the hidden layer of an MLP, the input of a
    logistic model; a module that is not such a stack is refused by name."""
    mlp = Model(nn.Sequential(nn.Flatten(), nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), (3,))
    params = mlp.init_params()
    x = torch.randn(5, 3)
    z, logits = mlp.forward_with_representation(params, x)
    assert z.shape == (5, 4) and (z >= 0).all()
    assert_tensors_close(logits, mlp.forward(params, x))  # trunk + head vs the whole stack
    logistic = Model(nn.Sequential(nn.Flatten(), nn.Linear(3, 2)), (3,))
    z, _ = logistic.forward_with_representation(logistic.init_params(), x)
    assert torch.equal(z, x)
    with pytest.raises(ValueError, match="representation"):
        Model(nn.Linear(3, 2), (3,)).forward_with_representation(torch.zeros(8), x)


def test_forward_flops_are_counted_without_the_backward_pass():
    """A 784 -> 10 linear model: 2 * 7840 FLOPs forward; training adds the weight gradient
    (another 2 * 7840) and no input gradient."""
    model = Model(nn.Sequential(nn.Flatten(), nn.Linear(784, 10)), (1, 28, 28))
    assert model.forward_flops_per_sample() == 2 * 7840
    assert model.training_flops_per_sample() == 4 * 7840


SMALL = {
    "data": {"dataset": "digits"},
    "model": {"kind": "mlp", "hidden": [16]},
    "clients": {"count": 6},
    "algorithm": {"cohort": {"clients_per_round": 3}, "local": {"steps": 3, "batch_size": 4}},
    "run": {"rounds": 1},
}


def ledger_of(name: str, extra: dict | None = None):
    sc = load_scenario(
        data=merge(BASE, merge(SMALL, {"algorithm": {"name": name, **(extra or {})}}))
    )
    sim = Run(sc, write=False)
    sim.simulate()
    return sim.result().ledger, sim.learner


def test_flops_are_fedavgs_plus_two_forward_passes_a_step():
    fedavg, _ = ledger_of("fedavg")
    moon_ledger, learn = ledger_of("moon")
    compute = lambda ledger: ledger[ledger.kind == "compute"].set_index("node").flops  # noqa
    samples = 3 * 4  # steps * batch size
    extra = 2 * samples * learn.model.forward_flops_per_sample()
    np.testing.assert_allclose(compute(moon_ledger), compute(fedavg) + extra, rtol=1e-12)
    for kind in ("download", "upload"):  # one model each way, as FedAvg
        bits = lambda ledger: ledger[ledger.kind == kind].bits.tolist()  # noqa: B023,E731
        assert bits(moon_ledger) == bits(fedavg)


def test_the_previous_model_is_the_clients_last_local_model():
    """After round 1 each participant's row is its local model, trained again here from the
    initial model with the global model as its first previous model; nobody else has a row."""
    sc = load_scenario(data=merge(BASE, merge(SMALL, {"algorithm": {"name": "moon"}})))
    sim = Run(sc, write=False)
    sim.simulate()
    learn, cfg = sim.learner, sc.algorithm
    table = learn.tables[moon.TABLE]
    cohort = sim.world.sample_clients(3, 1)
    assert table.written(np.arange(6)).tolist() == [c in cohort for c in range(6)]
    x0 = learn.model.init_params()
    local = learn.local_train(
        cohort,
        x0,
        cfg.local,
        1,
        loss_fn=moon.contrastive_loss(cfg.mu, cfg.temperature, x0),
        aux=x0.expand(3, -1),
    )
    torch.testing.assert_close(table.rows(cohort), local.params, rtol=0, atol=0)


def test_batched_and_sequential_paths_agree():
    """The previous models travel as aux rows, sliced with the cohort on every path."""
    from tolerance import assert_records_close, assert_tensors_close

    out = {}
    for path in ("batched", "sequential"):
        extra = {"algorithm": {"name": "moon", "local": {"path": path}}, "run": {"rounds": 2}}
        sc = load_scenario(data=merge(BASE, merge(SMALL, extra)))
        sim = Run(sc, write=False)
        sim.simulate()
        out[path] = (sim.result().records, sim.learner.tables[moon.TABLE].rows(np.arange(6)))
    assert_records_close(out["batched"][0], out["sequential"][0], eval_rows=360)
    assert_tensors_close(out["batched"][1], out["sequential"][1])
