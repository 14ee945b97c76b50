"""Records and the summary name what ran: the client optimizer, its effective learning rate
and its settings."""

import pytest

from flnet.runner import optimizer_labels, run


@pytest.mark.parametrize(
    "local, expect",
    [
        ({}, {"optimizer": "sgd", "lr": 0.05, "sam_rho": None, "optimizer_momentum": 0.0}),
        (
            {"lr": 0.2, "optimizer": {"name": "sgd", "momentum": 0.9}},
            {"optimizer": "sgd", "lr": 0.2, "optimizer_momentum": 0.9},
        ),
        (
            {"optimizer": {"name": "adam"}, "sam_rho": 0.05},
            {
                "optimizer": "adam",
                "lr": 1e-3,
                "sam_rho": 0.05,
                "optimizer_b1": 0.9,
                "optimizer_b2": 0.999,
            },
        ),
        ({"optimizer": {"name": "adagrad"}}, {"optimizer": "adagrad", "lr": 1e-2}),
        (
            {"optimizer": {"name": "delta_sgd"}},
            {"optimizer": "delta_sgd", "lr": None, "optimizer_eta0": 0.2},
        ),
    ],
)
def test_labels_carry_the_effective_learning_rate_and_settings(scenario, local, expect):
    base = {"steps": 2, "batch_size": 8, "lr": None}  # conftest sets lr 0.05
    labels = optimizer_labels(scenario(algorithm={"name": "fedavg", "local": {**base, **local}}))
    assert {k: labels[k] for k in expect} == expect


def test_records_and_summary_carry_the_labels(scenario):
    res = run(
        scenario(
            algorithm={
                "name": "fedavg",
                "local": {"steps": 2, "batch_size": 8, "lr": None, "optimizer": {"name": "adam"}},
            },
            run={"rounds": 2},
        ),
        write=False,
    )
    assert (res.records["optimizer"] == "adam").all() and (res.records["lr"] == 1e-3).all()
    assert res.summary["optimizer"] == "adam" and res.summary["lr"] == 1e-3
    assert res.summary["optimizer_eps"] == 1e-8
