"""The server rules (`algorithm.server`): the robust ones by hand on small inputs, the seam in
the central algorithms, what the scenario refuses, and that no rule costs anything on the
radio."""

import numpy as np
import pytest
import torch
from conftest import BASE

from flnet.algorithms import server
from flnet.algorithms.delivery import Delivered
from flnet.errors import ScenarioError
from flnet.learn.aggregate import combine, median, trimmed_mean, weighted_mean
from flnet.runner import Run
from flnet.scenario import load_scenario, merge

# 5 clients, 2 coordinates; sample counts unequal, so a rule that used them would show
FIVE = torch.tensor(
    [[1.0, 10.0], [2.0, -4.0], [100.0, 0.0], [3.0, 5.0], [-50.0, 7.0]], dtype=torch.float64
)
COUNTS = np.array([1, 2, 3, 4, 5])


def test_median_by_hand_odd_and_even():
    # column 0 sorted: -50 1 2 3 100 -> 2; column 1: -4 0 5 7 10 -> 5
    assert median(FIVE).tolist() == [2.0, 5.0]
    # even D: the mean of the two middle values (torch.median would give the lower, 2)
    assert median(torch.tensor([[1.0], [4.0], [2.0], [10.0]])).tolist() == [3.0]
    assert median(torch.tensor([[3.0], [1.0], [2.0]])).tolist() == [2.0]
    assert median(torch.tensor([[7.0, -1.0]])).tolist() == [7.0, -1.0]  # one client: itself


def test_trimmed_mean_by_hand():
    # floor(0.2 * 5) = 1 dropped at each end: column 0 keeps 1 2 3 -> 2, column 1 keeps 0 5 7 -> 4
    assert trimmed_mean(FIVE, 0.2).tolist() == [2.0, 4.0]
    # floor(0.1 * 5) = 0: nothing dropped, the plain mean (56 / 5, 18 / 5)
    torch.testing.assert_close(trimmed_mean(FIVE, 0.1), torch.tensor([11.2, 3.6]).double())
    # floor(0.45 * 5) = 2 at each end leaves the middle value: the median
    assert trimmed_mean(FIVE, 0.45).tolist() == [2.0, 5.0]
    # D = 4, floor(0.25 * 4) = 1: 1 4 2 10 keeps 2 4 -> 3
    assert trimmed_mean(torch.tensor([[1.0], [4.0], [2.0], [10.0]]), 0.25).tolist() == [3.0]
    with pytest.raises(ValueError, match="trim_fraction"):
        trimmed_mean(FIVE, 0.5)


def test_combine_picks_the_rule_and_only_weighted_mean_reads_the_counts():
    # weighted: (1 + 4 + 300 + 12 - 250) / 15 and (10 - 8 + 0 + 20 + 35) / 15
    by_hand = torch.tensor([67 / 15, 57 / 15], dtype=torch.float64)
    torch.testing.assert_close(combine("weighted_mean", FIVE, COUNTS), by_hand)
    torch.testing.assert_close(combine("mean", FIVE, COUNTS), torch.tensor([11.2, 3.6]).double())
    assert combine("median", FIVE, COUNTS).tolist() == [2.0, 5.0]
    assert combine("trimmed_mean", FIVE, COUNTS, 0.2).tolist() == [2.0, 4.0]
    assert combine("median", FIVE, COUNTS[::-1].copy()).tolist() == [2.0, 5.0]
    with pytest.raises(ValueError, match="unknown server rule"):
        combine("mode", FIVE, COUNTS)


def test_the_seam_steps_the_model_or_along_the_deltas():
    """`step`: the rule over the models; `step_along`: x + lr times the rule over the deltas
    (SCAFFOLD's x + eta_g rule(dy))."""
    got = Delivered(np.arange(5), COUNTS)
    x = torch.tensor([1.0, 1.0], dtype=torch.float64)
    rule = server.Server("median", 0.0, None)
    assert server.step(rule, x, FIVE, got, None)[0].tolist() == [2.0, 5.0]
    assert server.step_along(rule, x, FIVE, got, None, lr=0.5)[0].tolist() == [2.0, 3.5]
    own = server.Server("weighted_mean", 0.0, None)
    torch.testing.assert_close(server.step(own, x, FIVE, got, None)[0], weighted_mean(FIVE, COUNTS))


SMALL = {
    "data": {"dataset": "digits"},
    "model": {"kind": "mlp", "hidden": [16]},
    "clients": {"count": 5},
    "run": {"rounds": 1},
}
LOCAL = {"steps": 3, "batch_size": 4}


def simulated(algorithm: dict):
    sc = load_scenario(data=merge(BASE, merge(SMALL, {"algorithm": algorithm})))
    sim = Run(sc, write=False)

    class Last:
        def on_start(self, world):
            pass

        def on_progress(self, world, progress, stopping):
            sim.state = progress.state

        def on_end(self, world, reason):
            pass

    sim.world.observers.append(Last())
    sim.simulate()
    return sim


@pytest.mark.parametrize(
    ("name", "server_rule"),
    [
        ("fedavg", {"rule": "median"}),
        ("fedprox", {"rule": "trimmed_mean", "trim_fraction": 0.2}),
        ("moon", {"rule": "median"}),
        ("mm_psgd", {"rule": "trimmed_mean", "trim_fraction": 0.2}),
        ("scaffold", {"rule": "median"}),
    ],
)
def test_a_round_takes_the_rule_over_the_delivered_models(name, server_rule):
    """Round 1 of 5 clients, all delivered: FedAvg's and MM-PSGD's model is the rule over the
    clients' local models, trained again here from x0 on the same minibatches, SCAFFOLD's x0
    plus the rule over their dy (its corrections c - c_i are 0 in round 1); FedProx's and
    MOON's (whose local losses this test does not rebuild) differs from their own rule's."""
    algorithm = {"name": name, "cohort": {"clients_per_round": 5}, "local": LOCAL}
    ruled = simulated({**algorithm, "server": server_rule})
    own = simulated(algorithm)
    assert not torch.equal(ruled.state.x, own.state.x)
    if name in ("fedavg", "mm_psgd", "scaffold"):
        learn, cfg = ruled.learner, ruled.scenario.algorithm
        cohort = ruled.world.sample_clients(5, 1)
        x0 = learn.model.init_params()
        w = learn.local_train(cohort, x0, cfg.local, 1).params
        r = server.from_config(cfg.server, None, "weighted_mean")
        n = learn.num_samples[cohort]
        if name == "scaffold":
            by_hand = x0 + combine(r.rule, w - x0, n, r.trim_fraction)
        else:
            by_hand = combine(r.rule, w, n, r.trim_fraction)
        torch.testing.assert_close(ruled.state.x, by_hand)


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "moon", "scaffold", "mm_psgd", "mc_psgd"])
def test_a_rule_costs_nothing_on_the_radio(name):
    """The ledger (every transfer's bits, times and energy, every compute) of a run with the
    median or a trimmed mean is the weighted mean's, row for row: the rules run on the server."""
    algorithm = {"name": name, "cohort": {"clients_per_round": 4}, "local": LOCAL}
    if name == "mc_psgd":
        algorithm["loss_batch_size"] = 4
    base = merge(SMALL, {"run": {"rounds": 2}})

    def ledger(rule):
        sc = load_scenario(
            data=merge(BASE, merge(base, {"algorithm": {**algorithm, "server": rule}}))
        )
        sim = Run(sc, write=False)
        sim.simulate()
        return sim.result().ledger

    weighted = ledger({"rule": "weighted_mean"})
    assert weighted["bits"].sum() > 0
    for rule in ({"rule": "median"}, {"rule": "trimmed_mean", "trim_fraction": 0.25}):
        assert ledger(rule).equals(weighted)


def scenario_error(algorithm: dict) -> str:
    with pytest.raises(ScenarioError) as err:
        load_scenario(data=merge(BASE, {"algorithm": algorithm}))
    return str(err.value)


def test_the_scenario_refuses_what_makes_no_sense_naming_the_field():
    assert "algorithm.server.trim_fraction: trimmed_mean needs a trim_fraction" in scenario_error(
        {"server": {"rule": "trimmed_mean"}}
    )
    assert "algorithm.server.trim_fraction: only trimmed_mean trims" in scenario_error(
        {"server": {"rule": "median", "trim_fraction": 0.1}}
    )
    assert "algorithm.server.trim_fraction: must be < 0.5" in scenario_error(
        {"server": {"rule": "trimmed_mean", "trim_fraction": 0.5}}
    )
    both = {"server": {"rule": "median"}, "server_optimizer": {"name": "fedadam"}}
    assert "algorithm.server: a server optimizer (fedadam)" in scenario_error(both)
    for name in ("feddyn", "drfa", "drdm"):  # their server algebra holds for their own mean
        message = scenario_error({"name": name, "server": {"rule": "median"}})
        assert "algorithm.server: unknown field" in message


def test_no_rule_is_the_algorithms_own():
    sc = load_scenario(data=BASE)
    assert sc.algorithm.server is None
    assert server.from_config(None, None, "mean") == server.Server("mean", 0.0, None)
