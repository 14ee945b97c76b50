"""Stream work trained lazily in batches (`flnet.algorithms.deferred`): FLOPs planned before
training are the ones training counts; FedBuff's and FedAsync's records and ledger equal the
eager path's (each start trained at once) within tolerance, under trace availability, dropouts
and stragglers, and persisted optimizer states; batches really hold several clients;
and a run stopped with untrained work under way resumes to the bit."""

import numpy as np
import pytest
from harness import StopAt, assert_resumes_exactly
from tolerance import assert_records_close

from flnet.algorithms import deferred

TRACE = {
    "availability": {
        "kind": "trace",
        "path": "scenarios/traces/small_availability.csv",
        "mapping": "permuted",
    },
    "capacity_trace": {
        "path": "scenarios/traces/small_capacity.csv",
        "mapping": "permuted",
        "compute_power_w": 2.0,
    },
}
ALGORITHMS = {
    "fedbuff": {"name": "fedbuff", "concurrency": 6, "buffer_size": 3},
    "fedasync": {"name": "fedasync", "concurrency": 6, "rho": 0.01},
}


@pytest.mark.parametrize(
    "local",
    [
        {"steps": 3, "batch_size": 8},
        {"epochs": 2, "batch_size": 16},
        {"epochs": 1, "batch_size": 16, "drop_last": True},
        {"steps": 2, "batch_size": 8, "sam_rho": 0.05, "optimizer": {"name": "adam"}},
    ],
)
def test_planned_samples_are_what_training_counts(scenario, local):
    from flnet.runner import build

    sc = scenario(
        algorithm={"name": "fedbuff", "local": {"lr": 0.05, **local}},
        clients={"count": 12},
        data={"dataset": "digits", "partition": {"kind": "dirichlet", "alpha": 0.3}},
    )
    world, learn = build(sc)
    clients, counts = np.array([0, 3, 7, 11]), np.array([0, 1, 0, 2])
    planned = learn.planned_samples(clients, sc.algorithm.local, 1)
    done = learn.local_train(
        clients, learn.model.init_params(), sc.algorithm.local, 1, work_counts=counts
    )
    np.testing.assert_array_equal(planned, done.samples)
    assert (planned * learn.flops_per_sample == done.flops).all()
    if "epochs" in local:  # sizes differ per client: the plan is not one number for all
        assert len(set(planned.tolist())) > 1


def test_delta_sgd_has_no_plan(scenario):
    from flnet.runner import build

    local = {"steps": 2, "lr": None, "optimizer": {"name": "delta_sgd"}}
    sc = scenario(algorithm={"name": "fedbuff", "local": local})
    _, learn = build(sc)
    assert learn.planned_samples(np.arange(3), sc.algorithm.local, 1) is None


def make(
    scenario, tmp_path, name, algorithm, *, persist=False, schedule=False, trace=True, rounds=12
):
    local = {"steps": 3, "batch_size": 8, "lr": 0.05}
    if schedule:  # a learning rate per server version: works batch only with their own
        local.update(lr_schedule={"kind": "cosine", "rounds": rounds})
    if persist:
        local.update(optimizer={"name": "sgd", "momentum": 0.9}, optimizer_state="persist")
    return scenario(
        algorithm={**ALGORITHMS[algorithm], "local": local},
        clients={
            "count": 24,
            **(TRACE if trace else {}),
            "dropout_probability": 0.2,
            "slowdown_probability": 0.3,
            "slowdown_factor": 5.0,
        },
        run={
            "rounds": rounds,
            "eval_every": 4,
            "checkpoint_every": None,
            "checkpoint_interval_s": None,
        },
        output={"dir": str(tmp_path / name)},
    )


@pytest.mark.parametrize(
    "algorithm, persist, schedule",
    [
        ("fedbuff", False, False),
        ("fedbuff", True, False),
        ("fedbuff", False, True),
        ("fedasync", False, False),
        ("fedasync", True, False),
    ],
)
def test_lazy_batches_equal_the_eager_path(
    scenario, tmp_path, monkeypatch, algorithm, persist, schedule
):
    from flnet.learn.local import Learner
    from flnet.runner import run

    sizes = []
    train = Learner.local_train

    def counting(self, clients, *args, **kwargs):
        sizes.append(len(clients))
        return train(self, clients, *args, **kwargs)

    monkeypatch.setattr(Learner, "local_train", counting)
    lazy = run(make(scenario, tmp_path, "lazy", algorithm, persist=persist, schedule=schedule))
    lazy_sizes, sizes[:] = list(sizes), []
    monkeypatch.setattr(deferred, "LAZY", False)
    eager = run(make(scenario, tmp_path, "eager", algorithm, persist=persist, schedule=schedule))
    assert_records_close(lazy.records, eager.records, eval_rows=360)
    assert_records_close(lazy.ledger, eager.ledger, eval_rows=1)
    # works that dropped out were charged alike, and the lazy path trained fewer clients
    # (not those that dropped out before their batch), in fewer and larger calls
    assert (eager.ledger.outcome == "dropped").any()
    assert sum(lazy_sizes) < sum(sizes)
    assert len(lazy_sizes) < len(sizes) and max(lazy_sizes) > max(sizes[1:])


@pytest.mark.parametrize(
    "algorithm, schedule, trace, stop",
    [("fedbuff", True, False, 8), ("fedasync", False, True, 7)],  # steps with both under way
)
def test_a_stop_with_untrained_work_under_way_resumes_to_the_bit(
    scenario, tmp_path, monkeypatch, algorithm, schedule, trace, stop
):
    thawed = []
    thaw = deferred.Batches.thaw

    def spying(self, payload):
        thawed.append(type(payload).__name__)
        return thaw(self, payload)

    monkeypatch.setattr(deferred.Batches, "thaw", spying)
    assert_resumes_exactly(
        lambda name: make(
            scenario, tmp_path, name, algorithm, schedule=schedule, trace=trace, rounds=14
        ),
        StopAt(stop),
    )
    assert {"Ticket", "Upload"} <= set(thawed)  # trained and untrained work under way


@pytest.mark.parametrize("path", ["batched", "sequential"])
def test_per_client_proximal_anchors_equal_each_clients_own(scenario, path):
    """FedAsync's works trained together from different versions: each row's proximal term
    is anchored at its own start (aux rows, sliced with the cohort on the sequential path)."""
    import torch
    from tolerance import assert_tensors_close

    from flnet.learn.cohort import ProximalLoss
    from flnet.runner import build

    sc = scenario(algorithm={"name": "fedasync", "local": {"steps": 3, "batch_size": 8}})
    _, learn = build(sc)
    local = sc.algorithm.local.model_copy(update={"path": path})
    clients, counts = np.array([2, 5, 7]), np.array([0, 1, 0])
    x0 = learn.model.init_params()
    starts = torch.stack([x0, 0.9 * x0, x0 + 0.01])
    mu = 0.5  # large enough that the anchors matter
    together = learn.local_train(
        clients, starts, local, 1, loss_fn=ProximalLoss(mu, None), aux=starts, work_counts=counts
    )
    for i in range(3):
        alone = learn.local_train(
            clients[i : i + 1],
            starts[i],
            local,
            1,
            loss_fn=ProximalLoss(mu, starts[i]),
            work_counts=counts[i : i + 1],
        )
        assert_tensors_close(together.params[i], alone.params[0])
        assert_tensors_close(together.loss[i], alone.loss[0])
    # one shared anchor trains differently: the anchors are really per row
    shared = learn.local_train(
        clients, starts, local, 1, loss_fn=ProximalLoss(mu, x0), work_counts=counts
    )
    assert not torch.allclose(shared.params[1], together.params[1])
