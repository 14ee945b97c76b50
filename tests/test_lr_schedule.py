"""Learning-rate schedules per round (`local.lr_schedule`): the rates match torch's schedulers
stepped once a round, a round's local steps use its rate (by hand on a linear model), and the
records' `lr` column says the round's rate."""

import math

import numpy as np
import pytest
import torch
from conftest import BASE
from torch import nn

from flnet.config import LocalConfig
from flnet.errors import ScenarioError
from flnet.learn.data import FederatedData
from flnet.learn.local import Learner
from flnet.learn.models import Model
from flnet.runner import run
from flnet.scenario import load_scenario, merge


def rates(schedule: dict, rounds: int, lr: float = 0.1) -> list[float]:
    local = LocalConfig(lr=lr, lr_schedule=schedule)
    return [local.lr_at(t) for t in range(1, rounds + 1)]


def torch_rates(make, rounds: int, lr: float = 0.1) -> list[float]:
    """torch's scheduler stepped after each round: round t trains at its lr after t - 1 steps."""
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    sched, out = make(opt), []
    for _ in range(rounds):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


S = torch.optim.lr_scheduler


@pytest.mark.parametrize(
    "schedule,make",
    [
        ({"kind": "exponential", "gamma": 0.998}, lambda o: S.ExponentialLR(o, 0.998)),
        ({"kind": "step", "gamma": 0.5, "every_rounds": 3}, lambda o: S.StepLR(o, 3, 0.5)),
        (
            {"kind": "step", "gamma": 0.1, "at_rounds": [5, 8]},
            lambda o: S.MultiStepLR(o, [5, 8], 0.1),
        ),
        (
            {"kind": "cosine", "rounds": 12, "floor": 0.2},
            lambda o: S.CosineAnnealingLR(o, 12, 0.02),
        ),
        ({"kind": "constant"}, lambda o: S.ConstantLR(o, 1.0)),
    ],
)
def test_rates_are_torchs_schedulers_stepped_once_a_round(schedule, make):
    assert rates(schedule, 13) == pytest.approx(torch_rates(make, 13), rel=1e-12)


def test_cosine_stays_at_its_floor_after_its_rounds():
    """torch's cosine turns back up after T_max; the schedule holds the floor."""
    got = rates({"kind": "cosine", "rounds": 4, "floor": 0.1}, 9, lr=1.0)
    half_cos = [(1 + math.cos(math.pi * k / 4)) / 2 for k in range(5)]  # 1, .854, .5, .146, 0
    assert got[:5] == pytest.approx([0.1 + 0.9 * h for h in half_cos])
    assert got[2] == pytest.approx(0.55)
    assert got[5:] == pytest.approx([0.1] * 4)


def _learner() -> Learner:
    """One client holding three rows of a 4-feature, 3-class problem; a linear model."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 4, generator=g), torch.tensor([0, 2, 1])
    data = FederatedData("toy", x, y, x, y, [np.arange(3)], 3)
    torch.manual_seed(0)
    return Learner(Model(nn.Sequential(nn.Linear(4, 3)), (4,)), data, seed=0)


def _gradient(params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy's gradient by hand in float64: (softmax(xW' + b) - onehot(y)) / R
    against [x, 1], laid out as the model's flat parameters (W row-major, then b)."""
    p = params.double()
    w, b = p[:12].view(3, 4), p[12:]
    z = x.double() @ w.T + b
    err = (torch.softmax(z, 1) - torch.nn.functional.one_hot(y, 3).double()) / len(y)
    return torch.cat([(err.T @ x.double()).reshape(-1), err.sum(0)])


def test_two_rounds_of_sgd_with_exponential_decay_by_hand():
    """One epoch in one batch of all three rows a round: round 1 steps x1 = x0 - lr g(x0),
    round 2 x2 = x1 - lr gamma g(x1)."""
    learn, lr, gamma = _learner(), 0.5, 0.6
    local = LocalConfig(
        epochs=1, batch_size=3, lr=lr, lr_schedule={"kind": "exponential", "gamma": gamma}
    )
    x0 = learn.model.init_params()
    client = np.array([0])
    x1 = learn.local_train(client, x0, local, round=1).params[0]
    x2 = learn.local_train(client, x1, local, round=2).params[0]
    data = learn.data
    hand1 = x0.double() - lr * _gradient(x0, data.x_train, data.y_train)
    hand2 = hand1 - lr * gamma * _gradient(hand1, data.x_train, data.y_train)
    assert torch.allclose(x1.double(), hand1, atol=1e-6)
    assert torch.allclose(x2.double(), hand2, atol=1e-6)
    constant = hand1 - lr * _gradient(hand1, data.x_train, data.y_train)
    assert not torch.allclose(x2.double(), constant, atol=1e-4)  # the decay made a difference


def test_records_carry_the_rounds_rate_and_the_schedule(scenario):
    sched = {"kind": "exponential", "gamma": 0.5}
    res = run(scenario(algorithm={"local": {"lr_schedule": sched}}), write=False)
    rec = res.records.set_index("round")
    assert rec.lr.tolist() == pytest.approx([0.05, 0.05, 0.025, 0.0125])  # rows 0..3
    assert (rec.lr_schedule == "exponential(gamma=0.5)").all()
    assert res.summary["lr"] == 0.05 and res.summary["lr_schedule"] == "exponential(gamma=0.5)"
    plain = run(scenario(), write=False)
    assert "lr_schedule" not in plain.records and (plain.records.lr == 0.05).all()


@pytest.mark.parametrize("name", ["scaffold", "dfedavgm", "oledfl_sgd"])
def test_algorithms_with_their_own_optimizer_follow_the_schedule(scenario, name):
    """SCAFFOLD's corrected steps and DFedAvgM's momentum are built per round: a schedule that
    halves the rate from round 2 on changes round 2's model, not round 1's."""
    sched = {"kind": "step", "gamma": 0.5, "at_rounds": [1]}
    algo = {"name": name, **({"momentum": 0.5} if name == "dfedavgm" else {})}
    with_ = run(scenario(algorithm={**algo, "local": {"lr_schedule": sched}}), write=False)
    plain = run(scenario(algorithm=algo), write=False)
    acc_w, acc_p = with_.records.set_index("round"), plain.records.set_index("round")
    col = "test_accuracy" if "test_accuracy" in acc_w else "mean_test_accuracy"
    assert acc_w.loc[1, col] == acc_p.loc[1, col]
    assert acc_w.lr.tolist()[:3] == pytest.approx([0.05, 0.05, 0.025])


@pytest.mark.parametrize(
    "local,message",
    [
        ({"optimizer": {"name": "sps"}, "lr": None}, "sets its own step size"),
        ({"lr_schedule": {"kind": "step", "gamma": 0.5}}, "every_rounds or at_rounds"),
        ({"lr_schedule": {"kind": "step", "gamma": 0.5, "at_rounds": [4, 2]}}, "increase"),
        ({"lr_schedule": {"kind": "cosine"}}, "rounds"),
    ],
)
def test_what_a_schedule_refuses(local, message):
    sched = {"lr_schedule": {"kind": "exponential", "gamma": 0.9}}
    with pytest.raises(ScenarioError, match=message):
        load_scenario(data=merge(BASE, {"algorithm": {"local": {**sched, **local}}}))


def test_no_schedule_is_todays_rate_every_round():
    local = LocalConfig(lr=0.3)
    assert [local.lr_at(t) for t in (None, 0, 1, 50)] == [0.3] * 4
    assert math.isclose(LocalConfig(lr_schedule={"kind": "constant"}).lr_at(9), 0.05)
