"""FedDyn: theta, h and the clients' gradient terms by hand on a quadratic over two rounds with
both clients active (which tells the per-client subtraction from the paper's one-subtraction
typo), and the h = mean of the gradient terms invariant."""

import numpy as np
import pytest
import torch
from conftest import BASE
from torch import nn

from flnet.algorithms import feddyn
from flnet.learn.data import FederatedData
from flnet.learn.local import Learner
from flnet.learn.models import Model
from flnet.scenario import load_scenario, merge
from flnet.sim.world import World

B_I = (1.0, 3.0)  # client i's optimum: L_i(w) = (w - b_i)^2 / 2, so grad L_i(w) = w - b_i


def quadratic(model, params, x, y, aux):
    """Every training row of client i is b_i, so the minibatch mean is b_i."""
    return 0.5 * (params - x.mean(1)).square().sum(1)


def two_clients() -> tuple[Learner, World]:
    rows = torch.tensor([[B_I[0]]] * 4 + [[B_I[1]]] * 4)
    fed = FederatedData(
        "quadratic",
        rows,
        torch.zeros(8, dtype=torch.long),
        rows[:1],
        torch.zeros(1, dtype=torch.long),
        [np.arange(4), np.arange(4, 8)],
        1,
    )
    learn = Learner(Model(nn.Linear(1, 1, bias=False), (1,)), fed, seed=0)
    sc = load_scenario(
        data=merge(
            BASE, {"clients": {"count": 2}, "algorithm": {"cohort": {"clients_per_round": 2}}}
        )
    )
    return learn, World(sc.clients, sc.radio, sc.seed)


def run_rounds(protocol, state, rounds: int, learn, world) -> dict:
    published = {}

    class Stop:
        def on_progress(self, world_, progress, stopping):
            published[progress.step] = progress.state
            return "rounds" if progress.step >= rounds else None

    world.observers = [Stop()]
    world.env.run(world.env.process(protocol(world, learn, state)))
    return published


def test_two_rounds_by_hand_with_both_clients():
    learn, world = two_clients()
    cfg = feddyn.Config(
        alpha=0.5, cohort={"clients_per_round": 2}, local={"steps": 2, "batch_size": 4, "lr": 0.5}
    )
    states = run_rounds(
        lambda w, lr, s: feddyn.protocol(w, lr, cfg, s, quadratic),
        feddyn.State(0, torch.zeros(1), torch.zeros(1)),
        2,
        learn,
        world,
    )
    # round 1 from theta = h = g = 0; a step is w <- w - 0.5 ((w - b) - g + 0.5 (w - theta)):
    #   client 0: 0 -> 0.5 -> 0.625; client 1: 0 -> 1.5 -> 1.875
    #   g_0 = -0.5 * 0.625 = -0.3125, g_1 = -0.5 * 1.875 = -0.9375
    #   h = -(0.5 / 2)(0.625 + 1.875) = -0.625; theta = 1.25 + 0.625 / 0.5 = 2.5
    assert states[1].h.item() == pytest.approx(-0.625)
    assert states[1].x.item() == pytest.approx(2.5)
    # round 2 from theta = 2.5:
    #   client 0: 2.5 -> 2.5 - 0.5 (1.5 + 0.3125) = 1.59375
    #             -> 1.59375 - 0.5 (0.59375 + 0.3125 - 0.453125) = 1.3671875
    #   client 1: 2.5 -> 2.5 - 0.5 (-0.5 + 0.9375) = 2.28125
    #             -> 2.28125 - 0.5 (-0.71875 + 0.9375 - 0.109375) = 2.2265625
    #   g_0 = -0.3125 + 0.5 * 1.1328125 = 0.25390625; g_1 = -0.9375 + 0.5 * 0.2734375 = -0.80078125
    #   h = -0.625 - 0.25 ((1.3671875 - 2.5) + (2.2265625 - 2.5)) = -0.2734375
    #   theta = 1.796875 + 0.2734375 / 0.5 = 2.34375
    # (the typo's h = -0.625 - 0.25 (1.3671875 + 2.2265625 - 2.5) = -0.8984375 differs)
    g = learn.tables[feddyn.TABLE].rows(np.arange(2)).flatten().tolist()
    assert g == pytest.approx([0.25390625, -0.80078125])
    assert states[2].h.item() == pytest.approx(-0.2734375)
    assert states[2].x.item() == pytest.approx(2.34375)
    # with every client delivered, h stays the mean of the gradient terms over all N clients
    assert states[2].h.item() == pytest.approx(np.mean(g))


def test_h_divides_by_all_clients_not_the_active_ones():
    h = feddyn.server_h(torch.zeros(1), 0.5, 10, torch.tensor([[2.0], [4.0]]), torch.ones(1))
    assert h.item() == pytest.approx(-0.5 / 10 * (1.0 + 3.0))


def test_scenario_runs_and_learns():
    from flnet.runner import run

    res = run(
        "scenarios/feddyn.yaml", overrides=["run.rounds=10", "run.eval_every=10"], write=False
    )
    assert res.summary["final_test_accuracy"] > 0.5
