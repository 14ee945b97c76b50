"""Populations at scale: the evaluation sample, lazily generated clients across resume, and a
population that holds no Python object per registered client."""

import numpy as np
import pytest
from tolerance import assert_records_close

from flnet.learn.data import evaluation_clients
from flnet.runner import run

LAZY = {"dataset": "synthetic", "partition": {"kind": "natural"}, "eval_clients": 12}


def test_evaluation_sample_is_every_client_up_to_its_size_else_a_seeded_draw():
    assert np.array_equal(evaluation_clients(0, 40, 40), np.arange(40))
    a, b = evaluation_clients(3, 10_000_000, 1000), evaluation_clients(3, 10_000_000, 1000)
    assert np.array_equal(a, b) and len(np.unique(a)) == 1000 and np.all(np.diff(a) > 0)
    assert not np.array_equal(a, evaluation_clients(4, 10_000_000, 1000))
    assert a.max() > 9_000_000 and a.min() < 1_000_000  # drawn from the whole population


def test_records_count_the_clients_evaluated(scenario):
    res = run(scenario(clients={"count": 30}, data={"eval_clients": 7}), write=False)
    assert (res.records.clients_evaluated == 7).all()
    res = run(scenario(clients={"count": 30}), write=False)
    assert (res.records.clients_evaluated == 30).all()


def test_sampled_evaluation_scores_exactly_the_sampled_clients(scenario):
    """Client accuracy over the sample equals the figures computed from each sampled client's
    own rows by hand."""
    from flnet.learn.evaluate import Evaluator
    from flnet.runner import build

    world, learner = build(scenario(clients={"count": 200}, data={"eval_clients": 9}))
    data = learner.data
    params = learner.model.init_params()
    metrics = Evaluator(learner.model, data)(params)
    per_client = []
    for k in data.eval_clients:
        rows = data.client_indices[k]
        pred = learner.model.predict(params, data.x_train[rows]).argmax(1)
        per_client.append((pred == data.y_train[rows]).double().mean().item())
    assert metrics["clients_evaluated"] == 9
    assert metrics["client_accuracy_mean"] == pytest.approx(np.mean(per_client))
    assert metrics["client_accuracy_worst"] == pytest.approx(min(per_client))


def test_evaluation_sample_and_lazy_clients_are_the_same_across_resume(scenario, tmp_path):
    """A lazily generated population with a sampled evaluation: 2 rounds then a resume to 4
    give the records of 4 rounds in one go."""
    sc = dict(
        clients={"count": 500},
        data=LAZY,
        model={"kind": "logistic"},
        run={"rounds": 4, "checkpoint_every": 1},
    )
    whole = run(scenario(**sc, output={"dir": str(tmp_path / "a")}))
    part = dict(sc, run={"rounds": 2, "checkpoint_every": 1}, output={"dir": str(tmp_path / "b")})
    run(scenario(**part))
    resumed = run(scenario(**dict(part, run=sc["run"])), resume=True)
    assert (whole.records.clients_evaluated == 12).all()
    assert whole.records.equals(resumed.records)


def test_evaluation_sample_is_the_same_on_every_training_path(scenario):
    """Batched and sequential local training judge the same sampled clients (records agree
    within the stated tolerance; the sample itself is a function of seed and N)."""
    sc = dict(clients={"count": 300}, data=LAZY, model={"kind": "logistic"}, run={"rounds": 2})
    a = run(scenario(**sc, algorithm={"local": {"path": "batched"}}), write=False)
    b = run(scenario(**sc, algorithm={"local": {"path": "sequential"}}), write=False)
    assert_records_close(a.records, b.records, eval_rows=100)


def test_lazy_clients_train_in_epochs_over_their_own_rows(scenario):
    """Epoch mode draws permutations of each client's own generated rows."""
    from flnet.learn import data as data_mod
    from flnet.runner import build

    _, learner = build(scenario(clients={"count": 100}, data=LAZY))
    fed, cohort = learner.data, np.array([8, 2])
    rows, sizes = data_mod.epoch_batches(fed, cohort, 1, 1, 16, False, seed=0)
    n8 = fed.num_samples[8]
    first = rows[0, : int(np.ceil(n8 / 16))].flatten().numpy()
    assert set(first) == set(range(n8))  # client 8's rows, each once, at the front
    assert set(rows[1].flatten().numpy()) <= set(range(n8, n8 + fed.num_samples[2]))
    res = run(
        scenario(
            clients={"count": 100},
            data=LAZY,
            model={"kind": "logistic"},
            algorithm={"local": {"epochs": 1}},
        ),
        write=False,
    )
    assert len(res.records) == 4


def built_cost(build):
    """(Python container objects, bytes still allocated) that `build()` leaves behind."""
    import gc
    import tracemalloc

    gc.collect()
    before = len(gc.get_objects())
    tracemalloc.start()
    kept = build()
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    objects = len(gc.get_objects()) - before
    del kept
    return objects, current


BYTES_PER_CLIENT = 100  # population columns 56, data sizes 8 or 16 (measured 64 and 73)


@pytest.mark.parametrize("data", [LAZY, {"share_rows": True}], ids=["synthetic", "digits"])
def test_200000_clients_hold_no_python_object_each_and_few_bytes(scenario, data):
    """The World (population columns, implicit star) and the Learner (data views or lazy
    sizes) of 200,000 clients: a bounded number of Python objects whatever N, and under
    BYTES_PER_CLIENT bytes a client, the evaluation sample's rows aside."""
    from flnet.runner import build

    n = 200_000
    sc = scenario(
        clients={"count": n, "cpu_hz": {"kind": "lognormal", "median": 1e9, "sigma": 0.5}},
        radio={"rayleigh_fading": True},
        data={**data, "eval_clients": 10},
        model={"kind": "logistic"},
    )
    build(sc)  # imports, caches and the embedded data set, once

    def both():
        world, learner = build(sc)
        learner.data.num_samples  # noqa: B018 (computed on first use)
        return world, learner

    objects, nbytes = built_cost(both)
    assert objects < 1_000, objects  # measured about 100, whatever N
    assert nbytes / n < BYTES_PER_CLIENT, nbytes / n


def test_selection_from_ten_million_clients_allocates_kilobytes():
    """numpy's choice without replacement is O(k) here (Floyd's method): a round's 100 from
    10,000,000 clients, drawn exactly as `World.sample_clients` draws them."""
    import tracemalloc

    from flnet.rng import Stream, generator

    tracemalloc.start()
    picks = generator(0, Stream.SELECTION, 1).choice(10_000_000, size=100, replace=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(np.unique(picks)) == 100 and peak < 100_000, peak


def test_star_links_are_made_from_the_clients_rows(scenario):
    """A link is the rule applied to its endpoint's row: the uplink's power is tx + circuit,
    its SNR the population's column; no link is stored for the star."""
    from flnet.rng import Stream, generator
    from flnet.runner import build
    from flnet.sim.ledger import SERVER

    world, _ = build(
        scenario(
            clients={"count": 50},
            radio={
                "tx_power_dbm": {"kind": "uniform", "low": 0, "high": 20},
                "tx_circuit_power_w": 0.1,
                "rx_power_w": 0.05,
            },
        )
    )
    pop = world.population
    up, down = world.link(7, SERVER), world.link(SERVER, 7)
    tx_dbm = generator(0, Stream.RADIO).uniform(0, 20, 50)  # the radio stream's first column
    assert up.kind == "upload" and up.snr_hz == pop.up_snr_hz[7]
    assert up.power_w == pytest.approx(10 ** ((tx_dbm[7] - 30) / 10) + 0.1, rel=1e-12)
    assert down.snr_hz == pop.down_snr_hz[7] and down.power_w == 0.05
    assert world.network.graph.number_of_edges() == 0  # the star is no graph
    d2d = world.link(3, 4)  # a device-to-device link, kept once used (gossiping nodes only)
    assert d2d.kind == "d2d" and d2d.power_w == pop.tx_power_w[3]
    assert d2d.rx_power_w == pop.rx_power_w[4] == 0.05
    assert list(world.network.graph.edges) == [(3, 4)]
    with pytest.raises(KeyError):
        world.link(3, 3)
