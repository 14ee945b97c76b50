"""The records' train_loss: the participating clients' local losses, weighted as the paper
weighs its clients, checked by hand on a two-client logistic model."""

import math

import numpy as np
import torch
from torch.nn import functional as F

from flnet.learn import data as data_mod
from flnet.learn.local import LossTally
from flnet.runner import Run, run

STEPS, BATCH, LR = 3, 8, 0.1


def two_clients(scenario, **extra):
    return scenario(
        data={"dataset": "digits", "partition": {"kind": "zipf", "sigma": 1.0}},
        model={"kind": "logistic"},
        algorithm={
            "name": "fedavg",
            "cohort": {"clients_per_round": 2},
            "local": {"steps": STEPS, "batch_size": BATCH, "lr": LR},
        },
        clients={"count": 2},
        run={"rounds": 2, "eval_every": 1, **extra},
    )


def local_sgd(w0, x, y, rows, k, d):
    """Client's minibatch SGD on softmax regression (W [k, d] then b [k], nn.Linear's order),
    by hand in float64: its final parameters and its mean minibatch loss."""
    w = w0.double().clone()
    losses = []
    for batch in rows:
        w.requires_grad_(True)
        logits = x[batch].double() @ w[: k * d].view(k, d).T + w[k * d :]
        loss = F.cross_entropy(logits, y[batch])
        (grad,) = torch.autograd.grad(loss, w)
        losses.append(float(loss.detach()))
        w = (w - LR * grad).detach()
    return w, sum(losses) / len(losses)


def test_train_loss_is_the_sample_weighted_mean_of_the_clients_minibatch_losses(scenario):
    sim = Run(two_clients(scenario), write=False)
    learner = sim.learner
    data, seed = learner.data, sim.scenario.seed
    x, y = data.x_train.flatten(1), data.y_train  # digits: [N, 1, 8, 8] images
    k, d = data.num_classes, x.shape[1]
    w = sim.state.x.clone()
    # the layout assumed by hand is the model's own
    by_hand = x[:5] @ w[: k * d].view(k, d).T + w[k * d :]
    assert torch.allclose(learner.model.predict(w, data.x_train[:5]), by_hand, atol=1e-6)
    n = data.num_samples[[0, 1]].astype(float)
    assert n[0] != n[1]  # the weights matter
    sim.simulate()
    records = sim.result().records.set_index("round")
    assert math.isnan(records.train_loss.loc[0])  # no local work before round 1
    w = w.double()
    for t in (1, 2):
        rows = data_mod.minibatches(data, np.array([0, 1]), t, np.array([STEPS] * 2), BATCH, seed)
        finals, losses = zip(*(local_sgd(w, x, y, rows[c], k, d) for c in (0, 1)))
        expected = (n[0] * losses[0] + n[1] * losses[1]) / n.sum()
        assert abs(records.train_loss.loc[t] - expected) < 1e-5, t
        assert abs(expected - (losses[0] + losses[1]) / 2) > 1e-4  # not the plain mean
        w = (n[0] * finals[0] + n[1] * finals[1]) / n.sum()  # FedAvg's line 8


def test_global_train_loss_is_the_mean_loss_over_every_training_row(scenario):
    res = run(two_clients(scenario, global_train_loss=True), write=False)
    sim = Run(two_clients(scenario), write=False)  # its initial model, as the run's
    x, y = sim.learner.data.x_train, sim.learner.data.y_train
    logits = sim.learner.model.predict(sim.state.x, x)
    expected = float(F.cross_entropy(logits.double(), y))
    assert abs(res.records.global_train_loss.iloc[0] - expected) < 1e-6
    off = run(two_clients(scenario), write=False)
    assert "global_train_loss" not in off.records  # off by default
    same = [c for c in off.records if c not in ("global_train_loss",)]
    assert (
        off.records[same]
        .drop(columns="sim_time_s")
        .equals(res.records[same].drop(columns="sim_time_s"))
    )


def test_loss_tally_weighs_and_clears():
    tally = LossTally()
    assert math.isnan(tally.take())
    tally.add(torch.tensor([1.0, 4.0]), np.array([3, 1]))
    tally.add(torch.tensor([2.0]))
    assert tally.take() == (3 * 1.0 + 4.0 + 2.0) / 5
    assert math.isnan(tally.take())  # cleared


def test_one_loss_at_a_time_sums_as_a_weighted_add_of_one():
    """`add_one` (a stream upload's loss) is `add` of that one loss, to the bit."""
    losses = torch.randn(200, generator=torch.Generator().manual_seed(0)).exp() * 3
    one, general = LossTally(), LossTally()
    for loss in losses:
        one.add_one(loss)
        general.add(loss.reshape(1))
    assert one._sum is not None and general._sum is not None
    assert one._sum.item() == general._sum.item() and one._weight == general._weight == 200
    assert one.take() == general.take()


def test_every_family_records_a_finite_train_loss_after_round_0(scenario):
    gossip = {"name": "dfedavg", "topology": {"kind": "ring"}, "local": {"steps": 2}}
    stream = {"name": "fedbuff", "buffer_size": 2, "concurrency": 3, "local": {"steps": 2}}
    for algorithm in (gossip, stream):
        res = run(scenario(algorithm=algorithm, run={"rounds": 3}), write=False)
        losses = res.records.set_index("round").train_loss
        assert math.isnan(losses.loc[0]) and np.isfinite(losses.drop(0)).all(), algorithm


def test_delivered_clients_without_a_local_step_have_no_loss_to_count():
    from flnet.algorithms import train_loss
    from flnet.algorithms.delivery import Delivered
    from flnet.learn.local import LocalWork

    class Learn:
        train_loss = LossTally()

    work = LocalWork(
        params=torch.zeros(4, 1),
        opt_state=None,
        loss=torch.tensor([1.0, 2.0, 0.0, 4.0]),  # member 2 took no step: its 0 is no loss
        flops=np.zeros(4),
        steps=np.array([3, 3, 0, 1]),
    )
    got = Delivered(positions=np.array([1, 2, 3]), num_samples=np.array([10, 20, 30]))
    learn = Learn()
    train_loss.delivered(learn, got, work, "samples")  # member 0 was not delivered
    assert learn.train_loss.take() == (10 * 2.0 + 30 * 4.0) / 40
    train_loss.delivered(learn, got, work, "uniform")
    assert learn.train_loss.take() == (2.0 + 4.0) / 2
    train_loss.delivered(learn, got, work, np.array([5, 1, 7, 2]))  # draws, by member
    assert learn.train_loss.take() == (1 * 2.0 + 2 * 4.0) / 3
    train_loss.delivered(learn, None, work, "samples")  # nobody delivered
    assert math.isnan(learn.train_loss.take())
