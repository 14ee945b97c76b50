"""Client optimizers against torch.optim (step for step) and against hand computations."""

import copy
import math

import numpy as np
import pytest
import torch
from tolerance import assert_tensors_close
from torch import nn

from flnet.errors import ScenarioError
from flnet.learn import cohort, optim
from flnet.learn.models import Model
from flnet.scenario import load_scenario

C, B, STEPS = 3, 6, 5


def small_model() -> Model:
    torch.manual_seed(0)
    return Model(nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)), (4,))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(C, STEPS, B, 4, generator=g), torch.randint(0, 3, (C, STEPS, B), generator=g)


def flnet_trajectory(model, opt, x, y):
    """[STEPS, C, P] parameters after each step, every client from the model's own init."""
    params = model.init_params().repeat(C, 1)
    state = opt.init(params)
    value_and_grad = cohort.autograd_value_and_grad(model)
    out = []
    for s in range(STEPS):
        loss, grads = value_and_grad(params, x[:, s], y[:, s])
        updates, state = opt.update(grads, state, params, loss=loss)
        params = params + updates
        out.append(params)
    return torch.stack(out)


def torch_trajectory(model, make_opt, x, y):
    """The same with one nn.Module and one torch.optim optimizer per client."""
    out = torch.empty(STEPS, C, model.num_params)
    for c in range(C):
        module = copy.deepcopy(model.module)
        opt = make_opt(module.parameters())
        for s in range(STEPS):
            opt.zero_grad()
            nn.functional.cross_entropy(module(x[c, s]), y[c, s]).backward()
            opt.step()
            out[s, c] = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    return out


TORCH_EQUIVALENTS = [
    ("sgd", optim.sgd(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    (
        "sgd+wd",
        optim.sgd(0.1, weight_decay=0.01),
        lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01),
    ),
    (
        "momentum",
        optim.sgd(0.1, momentum=0.9, weight_decay=0.01),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    ),
    (
        "nesterov",  # DFedAvgM's local step
        optim.sgd(0.1, momentum=0.9, weight_decay=0.01, use_nesterov=True),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    ),
    ("adam", optim.adam(0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    (
        "adam+wd",
        optim.adam(0.01, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.1),
        lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    ),
    ("adagrad", optim.adagrad(0.1), lambda p: torch.optim.Adagrad(p, lr=0.1)),
    (
        "adagrad+acc+wd",
        optim.adagrad(0.1, eps=1e-8, initial_accumulator=0.1, weight_decay=0.01),
        lambda p: torch.optim.Adagrad(
            p, lr=0.1, eps=1e-8, initial_accumulator_value=0.1, weight_decay=0.01
        ),
    ),
]


@pytest.mark.parametrize(
    "name,opt,make_torch", TORCH_EQUIVALENTS, ids=[t[0] for t in TORCH_EQUIVALENTS]
)
def test_matches_torch_optim_step_for_step(name, opt, make_torch):
    model = small_model()
    x, y = data()
    ours = flnet_trajectory(model, opt, x, y)
    ref = torch_trajectory(model, make_torch, x, y)
    assert_tensors_close(ours, ref)


@pytest.mark.parametrize("path", ["batched", "sequential"])
def test_trainer_with_adam_matches_torch_optim(path):
    """The same through the cohort trainer (its dense fast path, in-place updates, masks)."""
    model = small_model()
    x, y = data()
    x_data, y_data = x.reshape(-1, 4), y.reshape(-1)
    batches = torch.arange(C * STEPS * B).view(C, STEPS, B)
    steps = torch.tensor([STEPS, 2, 4])
    res = cohort.Trainer(model, x_data, y_data).train(
        model.init_params().repeat(C, 1), batches, steps, optim.adam(0.01), path=path
    )
    ref = torch_trajectory(model, lambda p: torch.optim.Adam(p, lr=0.01), x, y)
    for c in range(C):
        assert_tensors_close(res.params[c], ref[steps[c] - 1, c])
    assert res.opt_state[0].count.tolist() == steps.tolist()


# ---------------------------------------------------------------- quadratics, by hand

A = np.array([[0.5, 2.0], [20.0, 1.0]])  # client c minimises f_c(x) = 0.5 sum_i A[c, i] x_i^2
X0 = np.array([[1.0, -2.0], [0.5, 1.5]])


def quadratic_run(opt, steps):
    """Our optimizer on the quadratics; returns [steps+1, C, 2] iterates and gradient calls."""
    a = torch.tensor(A)
    x = torch.tensor(X0)
    state = opt.init(x)
    xs, calls = [x], [0]

    def grad_fn(p):
        calls[0] += 1
        return a * p

    for _ in range(steps):
        loss = 0.5 * (a * x * x).sum(1)
        updates, state = opt.update(a * x, state, x, grad_fn=grad_fn, loss=loss)
        x = x + updates
        xs.append(x)
    return torch.stack(xs).numpy(), calls[0]


def test_sps_by_hand():
    c, steps = 0.5, 3
    got, _ = quadratic_run(optim.sps(c=c, eps=0.0), steps)
    for k in range(C - 1):
        x = X0[k].copy()
        for s in range(steps):
            g = A[k] * x
            f = 0.5 * np.sum(A[k] * x * x)
            x = x - f / (c * np.sum(g * g)) * g
            assert got[s + 1, k] == pytest.approx(x, rel=1e-12)


def test_sps_max_step_caps_the_step():
    got, _ = quadratic_run(optim.sps(c=0.5, max_step=0.01, eps=0.0), 1)
    assert got[1] == pytest.approx(X0 - 0.01 * A * X0)


def test_delta_sgd_by_hand():
    """Algorithm 1 with the paper's defaults: eta0 for the first step, then
    eta_k = min(gamma |dx| / (2 |dg|), sqrt(1 + delta theta) eta_{k-1}),
    theta_k = eta_k / eta_{k-1}."""
    gamma, delta, eta0, theta0, steps = 2.0, 0.1, 0.2, 1.0, 4
    got, calls = quadratic_run(optim.delta_sgd(), steps)
    assert calls == steps - 1  # the first step has no previous iterate to compare with
    bound = []
    for k in range(2):
        x_prev, x = None, X0[k].copy()
        eta, theta = eta0, theta0
        for s in range(steps):
            if x_prev is not None:
                dx = np.linalg.norm(x - x_prev)
                dg = np.linalg.norm(A[k] * x - A[k] * x_prev)
                growth = math.sqrt(1 + delta * theta) * eta
                new = min(gamma * dx / (2 * dg), growth)
                bound.append(new < growth)
                theta, eta = new / eta, new
            x_prev, x = x, x - eta * A[k] * x
            assert got[s + 1, k] == pytest.approx(x, rel=1e-12)
    assert any(bound) and not all(bound)  # both terms of the min were exercised


def test_sam_by_hand():
    lr, rho = 0.1, 0.05
    got, calls = quadratic_run(optim.sam(optim.sgd(lr), rho), 2)
    assert calls == 2
    for k in range(2):
        x = X0[k].copy()
        for s in range(2):
            g = A[k] * x
            x = x - lr * A[k] * (x + rho * g / np.linalg.norm(g))
            assert got[s + 1, k] == pytest.approx(x, rel=1e-12)


def test_sam_around_delta_sgd_probes_with_sam_gradients():
    got, calls = quadratic_run(optim.sam(optim.delta_sgd(), 0.05), 3)
    # each step: the ascent point (1); from step 2 on, Delta-SGD's SAM gradient at x_{k-1} (2)
    assert calls == 3 * 1 + 2 * 2
    assert np.isfinite(got).all()


def test_grads_per_step_declares_the_most_a_step_takes():
    assert optim.sgd(0.1).grads_per_step == 1
    assert optim.delta_sgd().grads_per_step == 2
    assert optim.sam(optim.adam(), 0.05).grads_per_step == 2
    assert optim.sam(optim.delta_sgd(), 0.05).grads_per_step == 4


@pytest.mark.parametrize(
    "opt",
    [
        optim.sgd(0.1, momentum=0.9, weight_decay=0.1),
        optim.adam(),
        optim.adagrad(),
        optim.sps(),
        optim.delta_sgd(),
        optim.sam(optim.adam(), 0.1),
    ],
)
def test_updates_never_alias_the_state(opt):
    """Callers may overwrite the updates (the trainer does); the state must not change then."""
    x = torch.tensor(X0)
    a = torch.tensor(A)
    state = opt.init(x)
    for _ in range(2):
        updates, state = opt.update(
            a * x, state, x, grad_fn=lambda p: a * p, loss=0.5 * (a * x * x).sum(1)
        )
        kept = copy.deepcopy(state)
        updates.fill_(float("nan"))
        for before, after in zip(
            torch.utils._pytree.tree_leaves(kept), torch.utils._pytree.tree_leaves(state)
        ):
            assert torch.equal(before, after)
        x = x - 0.01


# ---------------------------------------------------------------- scenario fields

LOCAL_BROKEN = [  # (local section, field named in the message, words the message must hold)
    ({"optimizer": {"name": "adamw"}}, "algorithm.local.optimizer", "'delta_sgd'"),
    ({"optimizer": {"name": "adam", "b2": 1.5}}, "algorithm.local.optimizer.b2", "< 1"),
    ({"optimizer": {"name": "sps", "c": 0}}, "algorithm.local.optimizer.c", "> 0"),
    (
        {"optimizer": {"name": "delta_sgd", "eta": 0.1}},
        "algorithm.local.optimizer.eta",
        "allowed fields here: delta, eta0, gamma, name, theta0",
    ),
    (
        {"optimizer": {"name": "delta_sgd"}, "lr": 0.1},
        "algorithm.local.lr",
        "delta_sgd sets its own step size; remove lr",
    ),
    ({"sam_rho": -0.1}, "algorithm.local.sam_rho", "> 0"),
    ({"optimizer_state": "forever"}, "algorithm.local.optimizer_state", "'reset' or 'persist'"),
    ({"path": "gpu"}, "algorithm.local.path", "'auto', 'batched' or 'sequential'"),
]


@pytest.mark.parametrize("local,field,words", LOCAL_BROKEN)
def test_bad_optimizer_settings_name_the_field(local, field, words):
    with pytest.raises(ScenarioError) as err:
        load_scenario(data={"algorithm": {"name": "fedavg", "local": local}})
    lines = str(err.value).splitlines()[1:]
    assert any(line.strip().startswith(f"{field}:") and words in line for line in lines), lines


def test_optimizer_defaults_are_the_papers():
    def local(opt):
        data = {"algorithm": {"name": "fedavg", "local": {"optimizer": opt}}}
        return load_scenario(data=data).algorithm.local

    sps = local({"name": "sps"}).optimizer
    assert (sps.c, sps.f_star, sps.max_step) == (0.5, 0.0, None)
    delta = local({"name": "delta_sgd"}).optimizer
    assert (delta.gamma, delta.delta, delta.eta0, delta.theta0) == (2.0, 0.1, 0.2, 1.0)
    assert local({"momentum": 0.9}).optimizer.name == "sgd"  # no name: SGD, as before
    assert local({"name": "adam"}).optimizer.default_lr == 1e-3
    assert local({"name": "adagrad"}).optimizer.default_lr == 1e-2


IN_PLACE = [
    ("sgd", lambda: optim.sgd(0.1)),
    ("momentum+wd", lambda: optim.sgd(0.1, momentum=0.9, weight_decay=0.01)),
    ("adam", lambda: optim.adam(0.01)),
    ("adagrad", lambda: optim.adagrad(0.1)),
    ("sps", lambda: optim.sps()),
    ("delta_sgd", lambda: optim.delta_sgd()),
    ("sam_adam", lambda: optim.sam(optim.adam(0.01), 0.1)),
]


@pytest.mark.parametrize("make", [m for _, m in IN_PLACE], ids=[n for n, _ in IN_PLACE])
def test_in_place_apply_is_the_update_added(make):
    """`apply` (the trainer's path: params += -lr g fused) against params + update(...) on the
    same quadratic, step for step, within float rounding; states agree too."""
    a = torch.tensor(A)
    grad_fn = lambda p: a * p  # noqa: E731
    opt = make()
    assert opt.apply is not None  # every named optimizer ends in the descent step
    x_ref = torch.tensor(X0)
    x = x_ref.clone()
    s_ref, s = opt.init(x_ref), opt.init(x)
    for _ in range(4):
        loss = lambda p: 0.5 * (a * p * p).sum(1)  # noqa: E731
        updates, s_ref = opt.update(grad_fn(x_ref), s_ref, x_ref, grad_fn=grad_fn, loss=loss(x_ref))
        x_ref = x_ref + updates
        s = optim.step(opt, grad_fn(x), s, x, grad_fn=grad_fn, loss=loss(x))
        assert_tensors_close(x, x_ref)
    for got, want in zip(
        torch.utils._pytree.tree_leaves(s), torch.utils._pytree.tree_leaves(s_ref)
    ):
        assert_tensors_close(got.double(), want.double())
    assert not torch.equal(x, torch.tensor(X0))


def test_a_transform_without_apply_steps_by_its_updates():
    """`optim.step` falls back to params += updates (bit for bit: the same arithmetic)."""
    opt = optim.chain(optim.trace(0.9))  # ends in a transform with no in-place apply
    assert opt.apply is None
    g = torch.tensor(A)
    x, x_ref = torch.tensor(X0), torch.tensor(X0)
    optim.step(opt, g.clone(), opt.init(x), x)
    updates, _ = opt.update(g.clone(), opt.init(x_ref), x_ref)
    assert torch.equal(x, x_ref + updates)
