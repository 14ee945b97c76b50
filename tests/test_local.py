"""Local work as the papers define it: E epochs without replacement, per-client step counts,
costs of the samples really processed, and cohort sizes from a fraction."""

import numpy as np
import pytest
import torch
from conftest import BASE
from tolerance import assert_tensors_close
from torch import nn

from flnet.config import CohortConfig, LocalConfig
from flnet.errors import ScenarioError
from flnet.learn import optim
from flnet.learn.cohort import Trainer, cross_entropy
from flnet.learn.data import FederatedData, epoch_batches
from flnet.learn.local import Learner
from flnet.learn.models import Model
from flnet.runner import run
from flnet.scenario import load_scenario, merge


def _data(sizes: list[int], features: int = 4, classes: int = 3) -> FederatedData:
    n = sum(sizes)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    bounds = np.cumsum([0, *sizes])
    return FederatedData(
        "toy",
        x,
        y,
        x[:4],
        y[:4],
        [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])],
        classes,
    )


def _learner(sizes: list[int]) -> Learner:
    torch.manual_seed(0)
    return Learner(Model(nn.Sequential(nn.Linear(4, 3)), (4,)), _data(sizes), seed=0)


def test_ten_rows_batch_four_two_epochs_take_six_steps_and_see_each_row_twice():
    learn = _learner([10])
    rows, sizes = epoch_batches(learn.data, np.array([0]), 1, 2, 4, False, seed=0)
    assert sizes[0].tolist() == [4, 4, 2, 4, 4, 2]
    seen = np.concatenate([rows[0, s, :n].numpy() for s, n in enumerate(sizes[0])])
    assert np.bincount(seen, minlength=10).tolist() == [2] * 10
    work = learn.local_train(
        np.array([0]), learn.model.init_params(), LocalConfig(epochs=2, batch_size=4), round=1
    )
    assert learn.last_steps.tolist() == [6]
    assert work.flops[0] == pytest.approx(20 * learn.flops_per_sample)  # not 24


def test_drop_last_takes_four_full_steps_over_sixteen_samples():
    learn = _learner([10])
    rows, sizes = epoch_batches(learn.data, np.array([0]), 1, 2, 4, True, seed=0)
    assert sizes[0].tolist() == [4, 4, 4, 4]
    for e in range(2):  # each epoch: 8 distinct rows of the 10
        assert len(set(rows[0, 2 * e : 2 * e + 2].reshape(-1).tolist())) == 8
    work = learn.local_train(
        np.array([0]),
        learn.model.init_params(),
        LocalConfig(epochs=2, batch_size=4, drop_last=True),
        round=1,
    )
    assert learn.last_steps.tolist() == [4]
    assert work.flops[0] == pytest.approx(16 * learn.flops_per_sample)


def test_epoch_permutations_are_fresh_and_repeat_with_the_key():
    learn = _learner([10])
    a, _ = epoch_batches(learn.data, np.array([0]), 1, 2, 10, False, seed=0)
    b, _ = epoch_batches(learn.data, np.array([0]), 1, 2, 10, False, seed=0)
    c, _ = epoch_batches(learn.data, np.array([0]), 2, 2, 10, False, seed=0)
    assert torch.equal(a, b)  # same key, same permutations
    assert not torch.equal(a[0, 0], a[0, 1])  # epoch 2 is a fresh permutation
    assert not torch.equal(a, c)  # another round, another key


def test_a_short_batch_is_the_mean_over_its_own_samples():
    """One SGD step on a batch of 2 real samples in 4 slots equals plain autograd on the 2."""
    model = Model(nn.Sequential(nn.Linear(4, 3)), (4,))
    data = _data([6])
    p0 = model.init_params()[None]
    rows = torch.tensor([[[4, 5, 0, 0]]])
    res = Trainer(model, data.x_train, data.y_train).train(
        p0, rows, torch.tensor([1]), optim.sgd(0.5), sizes=np.array([[2]])
    )
    w = p0.clone().requires_grad_(True)
    loss = cross_entropy(model, w, data.x_train[4:6][None], data.y_train[4:6][None]).sum()
    (g,) = torch.autograd.grad(loss, w)
    assert_tensors_close(res.params, p0 - 0.5 * g)
    assert_tensors_close(res.loss, loss.detach()[None])
    assert res.sample_grads.tolist() == [2]


@pytest.mark.parametrize("path", ["batched", "sequential"])
def test_clients_of_10_and_40_rows_take_6_and_20_steps_and_match_training_alone(path):
    learn = _learner([10, 40])
    local = LocalConfig(
        epochs=2, batch_size=4, lr=0.1, path=path, optimizer={"name": "sgd", "momentum": 0.9}
    )
    x0 = learn.model.init_params()
    both = learn.local_train(np.array([0, 1]), x0, local, round=3)
    assert learn.last_steps.tolist() == [6, 20]
    assert both.flops.tolist() == pytest.approx(
        [20 * learn.flops_per_sample, 80 * learn.flops_per_sample]
    )
    for pos in (0, 1):
        alone = learn.local_train(np.array([pos]), x0, local, round=3)
        assert_tensors_close(both.params[pos], alone.params[0])
        assert_tensors_close(both.loss[pos], alone.loss[0])


def test_epochs_runs_are_repeatable_and_resume_on_the_same_trajectory(tmp_path):
    data = merge(
        BASE,
        {
            "output": {"dir": str(tmp_path / "out")},
            "data": {"partition": {"kind": "dirichlet", "alpha": 0.5}},
            "algorithm": {"local": {"epochs": 1, "batch_size": 16}},
            "run": {"rounds": 4, "checkpoint_every": 2},
        },
    )
    full = run(load_scenario(data=data), write=False)
    assert full.records.local_mode.eq("epochs").all()
    assert (full.records.local_steps_max.iloc[1:] >= full.records.local_steps_mean.iloc[1:]).all()
    assert full.records.local_steps_max.iloc[1:].gt(1).all()
    again = run(load_scenario(data=data), write=False)
    assert full.records.equals(again.records)
    run(load_scenario(data=merge(data, {"run": {"rounds": 2}})))
    resumed = run(load_scenario(data=data), resume=True)
    assert full.records.equals(resumed.records)
    assert full.ledger.equals(resumed.ledger)


def test_uneven_clients_cost_in_proportion_to_their_data():
    """With epochs, a client's compute FLOPs are E * n_k per-sample gradients."""
    res = run(
        load_scenario(
            data=merge(
                BASE,
                {
                    "data": {"partition": {"kind": "dirichlet", "alpha": 0.3}},
                    "algorithm": {"local": {"epochs": 2, "batch_size": 8}},
                    "run": {"rounds": 1},
                },
            )
        ),
        write=False,
    )
    compute = res.ledger[res.ledger.kind == "compute"]
    sizes = res.partition.set_index("client").num_samples
    per_sample = res.summary["training_flops_per_sample"]
    expected = 2 * sizes.loc[compute.node].to_numpy() * per_sample
    assert compute.flops.to_numpy() == pytest.approx(expected)


@pytest.mark.parametrize(
    "fraction, k", [(0.15, 2), (0.25, 3), (0.35, 4), (0.45, 5), (0.05, 1), (0.01, 1), (1.0, 10)]
)
def test_cohort_size_from_a_fraction_rounds_half_up(fraction, k):
    assert CohortConfig(client_fraction=fraction).k(10) == k


def test_steps_and_epochs_are_alternatives():
    over = load_scenario(data=merge(BASE, {"algorithm": {"local": {"epochs": 3}}}))
    assert (over.algorithm.local.steps, over.algorithm.local.epochs) == (None, 3)
    back = load_scenario(
        data=merge(
            merge(BASE, {"algorithm": {"local": {"epochs": 3}}}),
            {"algorithm": {"local": {"steps": 4}}},
        )
    )
    assert (back.algorithm.local.steps, back.algorithm.local.epochs) == (4, None)
    with pytest.raises(ScenarioError, match="algorithm.local.*steps or epochs"):
        load_scenario(
            data={**BASE, "algorithm": {"name": "fedavg", "local": {"steps": 2, "epochs": 3}}}
        )
    with pytest.raises(ScenarioError, match="drop_last"):
        load_scenario(data=merge(BASE, {"algorithm": {"local": {"drop_last": True}}}))


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox"])
def test_the_epochs_scenario_runs_fedavg_and_fedprox(algorithm, tmp_path):
    res = run(
        "scenarios/epochs.yaml",
        overrides=[f"algorithm.name={algorithm}", "run.rounds=2", f"output.dir={tmp_path}"],
    )
    assert res.summary["status"] == "completed"
    assert res.records.local_mode.eq("epochs").all()
    assert res.records.test_loss.iloc[-1] < res.records.test_loss.iloc[0]
