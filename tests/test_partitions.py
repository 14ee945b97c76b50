"""Partitions against hand computations and the properties they promise."""

import math

import numpy as np
import pytest
import torch

from flnet.errors import ScenarioError
from flnet.learn import data
from flnet.learn.data import partition
from flnet.scenario import DataConfig

CPU = torch.device("cpu")
DIGITS_TRAIN = 1437


def load(n=20, seed=0, **cfg):
    return data.load(DataConfig.model_validate(cfg), n, seed, CPU)


def test_round_to_total_by_hand():
    assert list(partition.round_to_total([1, 1, 1], 10)) == [4, 3, 3]
    # exact shares 3.5, 2.1, 1.4 -> floors 3, 2, 1 -> the one left goes to the 0.5
    assert list(partition.round_to_total([0.5, 0.3, 0.2], 7)) == [4, 2, 1]


def test_zipf_sizes_by_hand():
    # sigma 1: weights 1, 1/2, 1/3 of 100 -> 54.55, 27.27, 18.18 -> 55, 27, 18
    assert list(partition.zipf_sizes(100, 3, 1.0)) == [55, 27, 18]
    assert list(partition.zipf_sizes(100, 4, 0.0)) == [25, 25, 25, 25]


PARTITIONS = [
    {"kind": "iid"},
    {"kind": "dirichlet", "alpha": 0.5},
    {"kind": "shards", "classes_per_client": 2},
    {"kind": "zipf", "sigma": 0.7},
    {"kind": "zipf", "sigma": 0.3, "alpha": 0.1},
    {"kind": "lognormal", "sigma": 0.5},
    {"kind": "lognormal", "sigma": 0.5, "alpha": 1.0},
]


@pytest.mark.parametrize("part", PARTITIONS, ids=lambda p: "-".join(map(str, p.values())))
def test_partition_is_disjoint_covers_the_data_and_depends_only_on_the_seed(part):
    a = load(partition=part)
    rows = np.concatenate(a.client_indices)
    assert len(rows) == len(np.unique(rows)) == DIGITS_TRAIN
    hist = a.label_histogram()
    assert hist.num_samples.sum() == DIGITS_TRAIN
    labels = a.y_train.numpy()
    expected = [np.bincount(labels[ix], minlength=10) for ix in a.client_indices]
    assert np.array_equal(hist.filter(like="label_").to_numpy(), np.array(expected))
    assert list(hist.columns[:2]) == ["client", "num_samples"]
    b, c = load(partition=part), load(partition=part, seed=1)
    assert all(np.array_equal(x, y) for x, y in zip(a.client_indices, b.client_indices))
    assert not all(np.array_equal(x, y) for x, y in zip(a.client_indices, c.client_indices))


def test_zipf_partition_sizes_follow_the_drdm_formula():
    fed = load(n=30, partition={"kind": "zipf", "sigma": 0.5, "alpha": 0.3})
    w = np.arange(1, 31) ** -0.5
    assert np.abs(fed.num_samples - DIGITS_TRAIN * w / w.sum()).max() < 1


def label_skew(fed) -> float:
    """Mean total-variation distance between a client's label mix and the global one."""
    h = fed.label_histogram().filter(like="label_").to_numpy(float)
    p = h / h.sum(1, keepdims=True)
    return float(np.abs(p - h.sum(0) / h.sum()).sum(1).mean() / 2)


@pytest.mark.parametrize("kind", [{"kind": "dirichlet"}, {"kind": "zipf", "sigma": 0.0}])
def test_label_skew_grows_as_alpha_falls(kind):
    skew = [
        np.mean([label_skew(load(seed=s, partition={**kind, "alpha": a})) for s in range(3)])
        for a in (100.0, 1.0, 0.1)
    ]
    assert skew[0] < skew[1] < skew[2]
    assert skew[0] < 0.2 and skew[2] > 0.6


def test_shards_give_every_client_exactly_k_classes_in_equal_shards():
    fed = load(n=15, partition={"kind": "shards", "classes_per_client": 3})
    h = fed.label_histogram().filter(like="label_").to_numpy()
    assert ((h > 0).sum(1) == 3).all()
    for c in range(10):
        held = h[:, c][h[:, c] > 0]
        assert held.max() - held.min() <= 1  # one class, cut into equal shards
    assert ((h > 0).sum(0) >= 4).all() and ((h > 0).sum(0) <= 5).all()  # 15 * 3 / 10 = 4.5


def test_larger_lognormal_sigma_spreads_sizes_more():
    cv = [
        np.mean(
            [
                np.std(s) / np.mean(s)
                for s in (
                    load(seed=k, partition={"kind": "lognormal", "sigma": sigma}).num_samples
                    for k in range(3)
                )
            ]
        )
        for sigma in (0.1, 1.0)
    ]
    assert cv[0] < 0.2 < cv[1]


def test_mixture_counts_respect_sizes_and_supply():
    rng = np.random.default_rng(0)
    mixtures = np.array([[1.0, 0.0, 0.0]] * 3)  # every client wants only class 0
    counts = partition.mixture_counts(mixtures, np.array([4, 4, 4]), np.array([5, 4, 3]), rng)
    assert list(counts.sum(1)) == [4, 4, 4]
    assert list(counts.sum(0)) == [5, 4, 3]  # class 0 ran out; the rest came from 1 and 2


def test_local_test_split_follows_the_clients_labels_by_hand():
    train = np.array([0] * 6 + [1] * 3 + [2] * 1)
    test = np.array([0, 1, 2] * 10)
    rng = np.random.default_rng(0)
    (full,) = partition.local_tests([np.arange(10)], train, test, 1.0, rng)
    assert list(np.bincount(test[full], minlength=3)) == [6, 3, 1]
    # half: shares 3, 1.5, 0.5 -> floors 3, 1, 0; the one left goes to the first tie, class 1
    (half,) = partition.local_tests([np.arange(10)], train, test, 0.5, rng)
    assert list(np.bincount(test[half], minlength=3)) == [3, 2, 0]
    assert len(np.unique(half)) == len(half)  # without replacement


def test_local_tests_are_seeded_and_reported():
    part = {"kind": "dirichlet", "alpha": 0.3}
    a = load(partition=part, local_test_fraction=0.5)
    b = load(partition=part, local_test_fraction=0.5)
    assert all(np.array_equal(x, y) for x, y in zip(a.client_test_indices, b.client_test_indices))
    hist = a.label_histogram()
    expected = [max(1, round(0.5 * n)) for n in a.num_samples]
    assert list(hist.num_test_samples) == expected
    y_test, y_train = a.y_test.numpy(), a.y_train.numpy()
    for tr, te in zip(a.client_indices, a.client_test_indices):
        assert set(y_test[te]) <= set(y_train[tr])


def test_zipf_min_size_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="data.partition.min_size"):
        load(n=200, partition={"kind": "zipf", "sigma": 2.0, "min_size": 2})


def test_shards_with_more_classes_than_exist_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="data.partition.classes_per_client"):
        load(partition={"kind": "shards", "classes_per_client": 11})


def test_client_accuracy_uses_the_local_test_splits_by_hand():
    """A model that always answers 0 scores, on each client, the share of 0s in its test rows."""
    from dataclasses import replace
    from types import SimpleNamespace

    from flnet.learn import models
    from flnet.learn.evaluate import Evaluator

    fed = load(n=3, partition={"kind": "iid"})
    y = fed.y_test.numpy()
    zeros, others = np.flatnonzero(y == 0), np.flatnonzero(y != 0)
    splits = [zeros[:4], np.concatenate([zeros[4:5], others[:3]]), others[3:8]]
    fed = replace(fed, client_test_indices=splits)
    model = models.build(SimpleNamespace(kind="logistic"), fed.input_shape, 10, 0, CPU)
    params = torch.zeros(model.num_params)
    params[-10] = 1.0  # bias of class 0
    m = Evaluator(model, fed)(params)
    assert m["test_accuracy"] == pytest.approx((y == 0).mean())
    assert m["client_accuracy_mean"] == pytest.approx((1.0 + 0.25 + 0.0) / 3)
    assert m["client_accuracy_worst"] == 0.0


def test_run_reports_the_partition_and_local_accuracy(scenario):
    from flnet.runner import run

    res = run(
        scenario(
            data={
                "partition": {"kind": "zipf", "sigma": 0.5, "alpha": 0.3},
                "local_test_fraction": 0.5,
            },
            run={"rounds": 2},
        ),
        write=False,
    )
    part = res.partition
    assert list(part.num_samples) == list(partition.zipf_sizes(DIGITS_TRAIN, 10, 0.5))
    assert (part.num_test_samples == (0.5 * part.num_samples).round().clip(lower=1)).all()
    rec = res.records.iloc[-1]
    assert rec.client_accuracy_worst <= rec.client_accuracy_p10 <= rec.client_accuracy_mean


# ---------------------------------------------------------------- validation split, input scale


def test_hold_out_by_hand():
    """8 rows of class 0 and 2 of class 1, 30%: largest remainder gives 2 + 1 held rows."""
    labels = np.array([0] * 8 + [1] * 2)
    kept, held = partition.hold_out(labels, 0.3, np.random.default_rng(0))
    assert len(held) == 3 and np.bincount(labels[held]).tolist() == [2, 1]
    assert sorted([*kept, *held]) == list(range(10)) and not set(kept) & set(held)


def test_validation_rows_leave_the_clients_and_follow_the_labels():
    full = load(partition={"kind": "zipf", "sigma": 0.3, "alpha": 0.1})
    fed = load(partition={"kind": "zipf", "sigma": 0.3, "alpha": 0.1}, validation_fraction=0.1)
    held = round(0.1 * DIGITS_TRAIN)
    assert len(fed.y_val) == held and len(fed.y_train) == DIGITS_TRAIN - held
    assert fed.num_samples.sum() == DIGITS_TRAIN - held  # the clients share only the rest
    # every held row is a training row of the full set that no client trains on
    pool = {tuple(r) for r in full.x_train.flatten(1).tolist()}
    train = {tuple(r) for r in fed.x_train.flatten(1).tolist()}
    for row in fed.x_val.flatten(1).tolist():
        assert tuple(row) in pool
    assert len(pool - train) >= len({tuple(r) for r in fed.x_val.flatten(1).tolist()})
    assert torch.equal(fed.x_test, full.x_test)  # the test set is untouched
    share = np.bincount(fed.y_val.numpy(), minlength=10) / held
    assert (
        np.abs(share - np.bincount(full.y_train.numpy(), minlength=10) / DIGITS_TRAIN).max() < 0.01
    )
    again = load(partition={"kind": "zipf", "sigma": 0.3, "alpha": 0.1}, validation_fraction=0.1)
    other = load(
        seed=1, partition={"kind": "zipf", "sigma": 0.3, "alpha": 0.1}, validation_fraction=0.1
    )
    assert torch.equal(again.x_val, fed.x_val) and not torch.equal(other.x_val, fed.x_val)


def test_validation_accuracy_by_hand():
    """A model that always answers 0 scores the share of 0s among the validation rows."""
    from types import SimpleNamespace

    from flnet.learn import models
    from flnet.learn.evaluate import Evaluator

    fed = load(n=3, validation_fraction=0.2)
    model = models.build(SimpleNamespace(kind="logistic"), fed.input_shape, 10, 0, CPU)
    params = torch.zeros(model.num_params)
    params[-10] = 1.0  # bias of class 0
    m = Evaluator(model, fed)(params)
    assert m["validation_accuracy"] == pytest.approx((fed.y_val.numpy() == 0).mean())
    zero = (fed.y_val == 0).double().mean().item()  # logits (1, 0, ..., 0) on every row
    assert m["validation_loss"] == pytest.approx(
        zero * math.log((math.e + 9) / math.e) + (1 - zero) * math.log(math.e + 9)
    )
    assert "validation_accuracy" not in Evaluator(model, load(n=3))(params)


def test_input_scale_multiplies_every_input():
    fed = load(validation_fraction=0.1, input_scale=16.0)
    plain = load(validation_fraction=0.1)
    for name in ("x_train", "x_val", "x_test"):
        assert torch.equal(getattr(fed, name), getattr(plain, name) * 16)
    assert fed.x_train.max() == 16.0  # digits' raw pixel values, 0..16


@pytest.mark.parametrize("field, value", [("validation_fraction", 0.1), ("input_scale", 2.0)])
def test_a_natural_population_refuses_the_pooled_options(field, value):
    from flnet.scenario import validate

    data = {"dataset": "synthetic", "partition": {"kind": "natural"}, field: value}
    with pytest.raises(ScenarioError, match=f"data.{field}"):
        validate({"algorithm": {"name": "fedavg"}, "data": data})


@pytest.mark.parametrize("field, value", [("validation_fraction", 1.0), ("input_scale", 0.0)])
def test_out_of_range_options_name_the_field(field, value):
    from flnet.scenario import validate

    with pytest.raises(ScenarioError, match=f"data.{field}"):
        validate({"algorithm": {"name": "fedavg"}, "data": {field: value}})
