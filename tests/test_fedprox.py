"""FedProx: the proximal term by hand, its pull toward x_t, and mu = 0 is FedAvg."""

import numpy as np
import pytest
import torch
from conftest import BASE
from tolerance import assert_tensors_close

from flnet.algorithms.fedprox import proximal_loss
from flnet.errors import ScenarioError
from flnet.learn import models, optim
from flnet.learn.cohort import Trainer, autograd_value_and_grad, cross_entropy
from flnet.runner import Run, run
from flnet.scenario import load_scenario, merge


def test_one_step_adds_mu_times_the_distance_to_the_anchor():
    torch.manual_seed(0)
    x = torch.randn(20, 5)
    y = torch.randint(0, 3, (20,))
    cfg = load_scenario(data={"algorithm": {"name": "fedavg"}, "model": {"kind": "logistic"}}).model
    model = models.build(cfg, (5,), 3, seed=0, device=torch.device("cpu"))
    w0 = model.init_params().expand(2, -1).clone()
    anchor = w0[0] + 0.3 * torch.randn_like(w0[0])
    batches = torch.arange(8).view(1, 1, 8).expand(2, 1, 8).clone()
    steps = torch.tensor([1, 1])
    mu, lr = 0.7, 0.1
    trainer = Trainer(model, x, y)
    plain = trainer.train(w0, batches, steps, optim.sgd(lr), loss_fn=cross_entropy)
    prox = trainer.train(w0, batches, steps, optim.sgd(lr), loss_fn=proximal_loss(mu, anchor))
    # grad of (mu/2)||w - a||^2 is mu (w - a): one SGD step moves lr * mu * (w0 - a) further
    assert torch.allclose(prox.params, plain.params - lr * mu * (w0 - anchor), atol=1e-6)
    expected_loss = plain.loss + 0.5 * mu * (w0 - anchor).square().sum(1)
    assert torch.allclose(prox.loss, expected_loss, atol=1e-6)


def _drift(mu):
    sim = Run(
        load_scenario(
            data=merge(
                BASE,
                {"algorithm": {"name": "fedprox", "mu": mu, "local": {"steps": 20, "lr": 0.1}}},
            )
        ),
        write=False,
    )
    learn, x = sim.learner, sim.state.x
    clients = np.arange(5)
    work = learn.local_train(
        clients, x, sim.scenario.algorithm.local, round=1, loss_fn=proximal_loss(mu, x)
    )
    return (work.params - x).norm(dim=1).mean().item()


def test_a_larger_mu_keeps_clients_closer_to_the_global_model():
    assert _drift(1.0) < 0.8 * _drift(0.0)


def test_mu_zero_is_fedavg():
    rounds = {"run": {"rounds": 3}}
    avg = run(load_scenario(data=merge(BASE, rounds)), write=False)
    prox = run(
        load_scenario(data=merge(BASE, {**rounds, "algorithm": {"name": "fedprox", "mu": 0.0}})),
        write=False,
    )
    assert np.allclose(avg.records.test_loss, prox.records.test_loss, atol=1e-5)
    assert avg.records.sim_time_s.equals(prox.records.sim_time_s)


def test_negative_mu_is_named():
    with pytest.raises(ScenarioError, match="algorithm.mu: must be >= 0"):
        load_scenario(data={"algorithm": {"name": "fedprox", "mu": -1}})


@pytest.mark.parametrize("kind", ["mlp", "cnn_dfl_mnist"])
def test_the_proximal_term_on_a_hand_engine_is_autograds(kind):
    """FedProx (and FedAsync's rho) through the model's hand-derived engine: the engine's
    cross-entropy plus (mu/2)||w - a||^2 and mu (w - a), within tolerance of autograd on the
    whole loss; and Trainer.train takes that path, with the same steps as autograd's."""
    torch.manual_seed(0)
    shape = (5,) if kind == "mlp" else (1, 28, 28)
    data = {"model": {"kind": kind, "hidden": [8]} if kind == "mlp" else {"kind": kind}}
    cfg = load_scenario(data={"algorithm": {"name": "fedavg"}, **data}).model
    model = models.build(cfg, shape, 3, seed=0, device=torch.device("cpu"))
    x, y = torch.randn(20, *shape), torch.randint(0, 3, (20,))
    trainer = Trainer(model, x, y)
    assert trainer.hand is not None
    w0 = model.init_params() + 0.05 * torch.randn(3, model.num_params)
    anchor = w0[0] + 0.3 * torch.randn_like(w0[0])
    prox = proximal_loss(0.7, anchor)
    xb, yb = x[torch.arange(12).view(3, 4)], y[torch.arange(12).view(3, 4)]
    loss, grad = prox.over(trainer.hand)(w0, xb, yb)
    ref_loss, ref_grad = autograd_value_and_grad(model, prox)(w0, xb, yb)
    assert_tensors_close(loss, ref_loss)
    assert_tensors_close(grad, ref_grad)
    batches = torch.randint(0, 20, (3, 4, 8))
    steps = torch.tensor([4, 4, 2])
    taken, over = [], prox.over
    prox.over = lambda engine: taken.append(engine) or over(engine)  # type: ignore[method-assign]
    fast = trainer.train(w0, batches, steps, optim.sgd(0.1), loss_fn=prox)
    assert taken == [trainer.hand, trainer.hand_padded]  # full and short batches
    slow = Trainer(model, x, y)
    slow.hand = None  # the autograd path, as for a model without a hand engine
    ref = slow.train(w0, batches, steps, optim.sgd(0.1), loss_fn=prox)
    assert_tensors_close(fast.params, ref.params)
    assert_tensors_close(fast.loss, ref.loss)
