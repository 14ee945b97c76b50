"""Short batches on the hand-derived engines (`kernels.padded`): an epoch's last batch, its
empty slots masked, equals its readable path, autograd through `cohort.cross_entropy` (the mean
over the batch's real samples), within tests/tolerance.py; and epoch-mode local training with
short batches (`drop_last: false`) trains in the engines' batched call as the generic engine
does, for a logistic model, an MLP and a CNN, with SGD, momentum, Adam, SAM and FedProx's
term."""

import numpy as np
import pytest
import torch
from test_kernels_conv import EVAL_ROWS, model_of
from tolerance import assert_ledgers_close, assert_records_close, assert_tensors_close
from torch import nn

from flnet.config import LocalConfig
from flnet.learn import cohort, optim
from flnet.learn.data import FederatedData
from flnet.learn.kernels.conv import ConvStack
from flnet.learn.kernels.dense import DenseStack
from flnet.learn.kernels.padded import PAD, cross_entropy_head
from flnet.learn.local import Learner
from flnet.learn.models import Model
from flnet.runner import run


def test_the_head_is_the_mean_over_real_slots_and_empty_slots_carry_no_gradient():
    """Client 0: 2 real slots of 3; client 1: all 3. By hand: loss = mean of -log p[label]
    over the real slots; gradient (softmax - onehot) / n there, 0 in the empty slot."""
    logits = torch.tensor(
        [[[1.0, 0.0, 5.0], [0.0, 2.0, 5.0]], [[0.5, -1.0, 0.0], [0.0, 1.0, 3.0]]],
        dtype=torch.float64,
    )  # [C=2, K=2, B=3]
    y = torch.tensor([[0, 1, PAD], [1, 1, 0]])
    logp = torch.log_softmax(logits, 1)
    p = logp.exp()
    loss = cross_entropy_head(logp.clone(), y)
    dz = logp.clone()
    cross_entropy_head(dz, y)
    want0 = -(logp[0, 0, 0] + logp[0, 1, 1]) / 2
    want1 = -(logp[1, 1, 0] + logp[1, 1, 1] + logp[1, 0, 2]) / 3
    assert_tensors_close(loss, torch.stack([want0, want1]))
    onehot = torch.tensor([[[1, 0, 0], [0, 1, 0]], [[0, 0, 1], [1, 1, 0]]], dtype=torch.float64)
    n = torch.tensor([2.0, 3.0], dtype=torch.float64)[:, None, None]
    want = (p - onehot) / n
    want[0, :, 2] = 0  # the empty slot
    assert_tensors_close(dz, want)
    assert torch.equal(dz[0, :, 2], torch.zeros(2, dtype=torch.float64))


def logistic() -> Model:
    torch.manual_seed(0)
    return Model(nn.Sequential(nn.Linear(6, 4)), (6,))


def mlp() -> Model:
    torch.manual_seed(0)
    return Model(nn.Sequential(nn.Flatten(), nn.Linear(12, 7), nn.ReLU(), nn.Linear(7, 4)), (3, 4))


def cnn() -> Model:
    return model_of("stacked_cnn")


MODELS = {"logistic": logistic, "mlp": mlp, "cnn": cnn}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_padded_engine_equals_autograd_on_a_batch_with_empty_slots(name):
    model = MODELS[name]()
    engine = cohort.Trainer(model, torch.zeros(1, *model.input_shape), torch.zeros(1)).hand
    assert isinstance(engine, ConvStack if name == "cnn" else DenseStack)
    g = torch.Generator().manual_seed(1)
    c, b = 3, 5
    x = torch.randn(c, b, *model.input_shape, generator=g)
    y = torch.randint(0, 4, (c, b), generator=g)
    y[0, 2:], y[2, 4:] = PAD, PAD  # 2 and 4 real slots of 5; client 1's batch is full
    params = model.init_params() + 0.05 * torch.randn(c, model.num_params, generator=g)
    loss, grad = engine.padded()(params, x, y)
    ref_loss, ref_grad = cohort.autograd_value_and_grad(model)(params, x, y)
    assert_tensors_close(loss, ref_loss)
    assert_tensors_close(grad, ref_grad)
    x[0, 2:] += 100.0  # what an empty slot holds changes nothing
    again_loss, again_grad = engine.padded()(params, x, y)
    assert torch.equal(again_loss, loss) and torch.equal(again_grad, grad)
    full_loss, full_grad = engine(params[1:2], x[1:2], y[1:2])  # the twin, unchanged
    assert_tensors_close(full_loss, loss[1:2])
    assert_tensors_close(full_grad, grad[1:2])


SIZES = [13, 7, 30, 4, 16]  # B = 5: short last batches of 3, 2, none, 4 (alone), 1


def learner(model: Model) -> Learner:
    n = sum(SIZES)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, *model.input_shape, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    bounds = np.cumsum([0, *SIZES])
    parts = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    return Learner(model, FederatedData("toy", x, y, x[:4], y[:4], parts, 4), seed=0)


OPTIMIZERS = {  # LocalConfig's fields
    "sgd": {"lr": 0.1},  # plain SGD: the engine's own step (`descend`)
    "momentum": {"lr": 0.1, "optimizer": {"name": "sgd", "momentum": 0.9}},
    "adam": {"lr": 0.01, "optimizer": {"name": "adam"}},
    "sam": {"lr": 0.1, "sam_rho": 0.05},  # a second gradient, at the perturbed point
}


@pytest.mark.parametrize("prox", [False, True], ids=["ce", "prox"])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_epochs_with_short_batches_train_batched_as_the_generic_engine(name, opt, prox):
    """Two epochs of B = 5 over clients of different sizes, `drop_last: false`: steps 6, 4,
    12, 2 and 8, short batches at different steps, one client with none. Through the hand
    engine (its `padded` twin at the short steps) and through autograd (the generic engine):
    the same parameters and losses within tests/tolerance.py, the same counts."""
    model = MODELS[name]()
    learn = learner(model)
    clients = np.arange(len(SIZES))
    local = LocalConfig(epochs=2, batch_size=5, **OPTIMIZERS[opt])
    start = model.init_params()
    term = cohort.ProximalLoss(0.5, start + 0.1) if prox else None
    hand_calls = []  # each hand-engine call: through the padded twin?
    with pytest.MonkeyPatch.context() as patch:
        for kind, method in ((DenseStack, "_pieces"), (ConvStack, "_forward")):
            inner = getattr(kind, method)
            patch.setattr(
                kind,
                method,
                lambda self, *a, inner=inner, **k: (
                    hand_calls.append(self.pads) or inner(self, *a, **k)
                ),
            )
        fast = learn.local_train(clients, start, local, round=1, loss_fn=term)
    assert learn.last_steps.tolist() == [6, 4, 12, 2, 8]
    assert sum(hand_calls) > 0 and len(hand_calls) >= 12  # short steps, in the batched call
    generic_loss = (lambda *a: term(*a)) if prox else cohort.cross_entropy  # autograd
    generic = learn.local_train(clients, start, local, round=1, loss_fn=generic_loss)
    assert not torch.equal(fast.params, start.expand_as(fast.params))
    assert_tensors_close(fast.params, generic.params)
    assert_tensors_close(fast.loss, generic.loss)
    assert np.array_equal(fast.samples, generic.samples)
    grads = 2 if opt == "sam" else 1
    assert fast.samples.tolist() == [2 * n * grads for n in SIZES]  # every real sample, twice


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox"])
def test_the_epochs_scenario_records_equal_those_of_short_batches_through_autograd(
    algorithm, monkeypatch
):
    """scenarios/epochs.yaml (`drop_last: false`: clients of Dirichlet sizes, short batches at
    many steps) gives the records it gave when its short steps took autograd and the
    optimizer's step (the path before the padded twins), within tests/tolerance.py."""

    def go():
        return run(
            "scenarios/epochs.yaml",
            {"algorithm": {"name": algorithm}, "run": {"rounds": 3, "eval_every": 1}},
            write=False,
        )

    padded = []
    spy = cohort.Trainer._engines
    monkeypatch.setattr(
        cohort.Trainer,
        "_engines",
        lambda self, loss_fn: padded.append(1) or spy(self, loss_fn),
    )
    fast = go()
    assert padded

    def old_engines(self, loss_fn):
        (full, _), engine = spy(self, loss_fn)
        generic = cohort.autograd_value_and_grad(self.model, loss_fn or cohort.cross_entropy)
        return (full, generic), engine

    monkeypatch.setattr(cohort.Trainer, "_engines", old_engines)
    old = go()
    assert len(fast.records) == 4
    assert not fast.records.train_loss.equals(old.records.train_loss)  # another path ...
    assert_records_close(fast.records, old.records, eval_rows=EVAL_ROWS)  # ... the same run
    assert_ledgers_close(fast.ledger, old.ledger)


def test_a_short_batch_repeated_past_a_clients_own_steps_keeps_the_full_engine():
    """Client 0 takes one step, a short one; its repeats at steps 2 and 3 are masked, so they
    take the full-batch engine: the padded twin only at step 1. The same as autograd's."""
    model = mlp()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(20, *model.input_shape, generator=g), torch.randint(0, 4, (20,))
    trainer = cohort.Trainer(model, x, y)
    rows = torch.randint(0, 20, (2, 3, 4), generator=g)
    steps, sizes = torch.tensor([1, 3]), np.array([[2, 2, 2], [4, 4, 4]])
    pads = []
    with pytest.MonkeyPatch.context() as patch:
        inner = DenseStack._pieces
        patch.setattr(
            DenseStack,
            "_pieces",
            lambda self, *a, **k: pads.append(self.pads) or inner(self, *a, **k),
        )
        fast = trainer.train(
            model.init_params()[None].repeat(2, 1), rows, steps, optim.sgd(0.1), sizes=sizes
        )
    assert pads == [True, False, False]
    generic = trainer.train(
        model.init_params()[None].repeat(2, 1),
        rows,
        steps,
        optim.sgd(0.1),
        sizes=sizes,
        loss_fn=cohort.cross_entropy,
    )
    assert_tensors_close(fast.params, generic.params)
    assert_tensors_close(fast.loss, generic.loss)
    assert fast.sample_grads.tolist() == [2, 12]
