"""Server optimizers (Reddi et al. 2021, Algorithm 2; Flower's variant): the server step by hand
over three rounds, alone and inside FedAvg, FedProx and SCAFFOLD on a quadratic; their state
across a resume; the records' labels; SCAFFOLD's refusals."""

import math

import numpy as np
import pytest
import torch
from conftest import BASE
from harness import StopAt, assert_resumes_exactly
from tolerance import assert_tensors_close
from torch import nn

from flnet import checkpoint
from flnet.algorithms import fedavg, fedprox, moon, scaffold
from flnet.errors import FlnetError, ScenarioError
from flnet.learn import optim, server_optim
from flnet.learn.data import FederatedData
from flnet.learn.local import Learner
from flnet.learn.models import Model
from flnet.scenario import load_scenario, merge
from flnet.sim.world import World

SETTINGS = {"lr": 0.3, "b1": 0.8, "b2": 0.9, "tau": 0.05}


def by_hand(name, deltas, weights=None, variant="reddi", lr=0.3, b1=0.8, b2=0.9, tau=0.05):
    """Algorithm 2 (or Flower's strategy) written out in float64 over each round's client
    deltas [D, P]: the server models x_1, x_2, ... from x_0 = 0."""
    flower = variant == "flower"
    p = deltas[0].shape[1]
    x, m, v = np.zeros(p), np.zeros(p), np.full(p, 0.0 if flower else tau**2)
    out = []
    for r, d in enumerate(deltas, start=1):
        delta = np.average(d, axis=0, weights=weights if flower else None)
        if name == "fedavgm":  # heavy ball: m = beta m + Delta, x += eta m
            m = b1 * m + delta
            x = x + lr * m
            out.append(x)
            continue
        beta1 = 0.0 if (flower and name == "fedadagrad") else b1
        m = beta1 * m + (1 - beta1) * delta
        if name == "fedadagrad":
            v = v + delta**2
        elif name == "fedadam":
            v = b2 * v + (1 - b2) * delta**2
        else:  # fedyogi
            v = v - (1 - b2) * delta**2 * np.sign(v - delta**2)
        eta = lr
        if flower and name == "fedadam":  # r = 1 at the first server round
            eta = lr * math.sqrt(1 - b2 ** (r + 1)) / (1 - b1 ** (r + 1))
        x = x + eta * m / (np.sqrt(v) + tau)
        out.append(x)
    return out


def config(name, variant="reddi", **settings):
    s = {**SETTINGS, **settings}
    if name == "fedavgm":
        return {"name": name, "lr": s["lr"], "momentum": s["b1"], "variant": variant}
    if name == "fedadagrad":
        b1 = {"b1": s["b1"]} if variant == "reddi" else {}
        return {"name": name, "lr": s["lr"], "tau": s["tau"], "variant": variant, **b1}
    return {"name": name, "variant": variant, **s}


def optimizer(cfg: dict) -> server_optim.ServerOptimizer:
    sc = load_scenario(data=merge(BASE, {"algorithm": {"server_optimizer": cfg}}))
    opt = server_optim.from_config(sc.algorithm.server_optimizer)
    assert opt is not None
    return opt


NAMES = ("fedavgm", "fedadam", "fedyogi", "fedadagrad")
CASES = [(n, v) for n in NAMES for v in ("reddi", "flower")]


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_three_server_steps_equal_algorithm_2_by_hand(name, variant):
    """Deltas of mixed signs and sizes, so Yogi's sign takes both values, with unequal sample
    counts, so the plain and the weighted mean differ."""
    rng = np.random.default_rng(0)
    deltas = [rng.normal(0, s, (3, 5)) for s in (1.0, 0.1, 2.0)]
    weights = np.array([10, 30, 60])
    opt = optimizer(config(name, variant))
    x = torch.zeros(5)
    state = server_optim.init(opt, x)
    for d, expected in zip(deltas, by_hand(name, deltas, weights, variant)):
        x, state = server_optim.step(opt, x, torch.tensor(d, dtype=torch.float32), weights, state)
        assert_tensors_close(x, torch.tensor(expected))


def test_yogi_moves_v_both_ways():
    """v - (1 - b2) g^2 sign(v - g^2): v grows where g^2 > v and shrinks where g^2 < v."""
    opt = server_optim.fedopt("yogi", lr=1.0, b1=0.0, b2=0.5, tau=1.0)
    state = opt.transform.init(torch.zeros(2))
    state = (state[0]._replace(v=torch.tensor([4.0, 0.0])), *state[1:])
    _, state = opt.transform.update(torch.tensor([1.0, 2.0]), state, torch.zeros(2))
    assert state[0].v.tolist() == [4.0 - 0.5 * 1.0, 0.0 + 0.5 * 4.0]


def test_flower_bias_correction_starts_at_r_1():
    """Flower's eta_norm = eta sqrt(1 - b2^(r+1)) / (1 - b1^(r+1)), r = 1, 2, 3."""
    t = server_optim.scale_by_flower_bias_correction(0.9, 0.99)
    state = t.init(torch.zeros(1))
    for r in (1, 2, 3):
        out, state = t.update(torch.ones(1), state, torch.zeros(1))
        assert out.item() == pytest.approx(math.sqrt(1 - 0.99 ** (r + 1)) / (1 - 0.9 ** (r + 1)))


def test_fedavgm_with_lr_1_and_no_momentum_is_the_plain_mean():
    opt = server_optim.fedavgm(1.0, 0.0)
    x = torch.tensor([1.0, -2.0])
    d = torch.tensor([[1.0, 2.0], [3.0, -4.0]])
    new, _ = server_optim.step(opt, x, d, np.array([1, 3]), server_optim.init(opt, x))
    assert new.tolist() == [3.0, -3.0]


# ------------------------------------------------- inside the algorithms, on a quadratic

B_I = (1.0, 3.0)  # client i's rows are all b_i; f_i(w) = ||w - b_i||^2 / 2
ROWS = (2, 6)  # client 0 holds 2 rows, client 1 holds 6: the weighted mean differs


def quadratic(model, params, x, y, aux=None):
    return 0.5 * (params - x.mean(1)).square().sum(1)


def quadratic_run(module, cfg, state, rounds=3):
    """`module`'s protocol on the two quadratic clients, both in every round: K = 2 steps of
    lr 0.5 take y from x to x + 0.75 (b_i - x). Returns the published states."""
    rows = torch.tensor([[B_I[0]]] * ROWS[0] + [[B_I[1]]] * ROWS[1])
    fed = FederatedData(
        "quadratic",
        rows,
        torch.zeros(len(rows), dtype=torch.long),
        rows[:1],
        torch.zeros(1, dtype=torch.long),
        [np.arange(ROWS[0]), np.arange(ROWS[0], sum(ROWS))],
        1,
    )
    learn = Learner(Model(nn.Linear(1, 1, bias=False), (1,)), fed, seed=0)
    two = {"clients": {"count": 2}, "algorithm": {"cohort": {"clients_per_round": 2}}}
    sc = load_scenario(data=merge(BASE, two))
    world = World(sc.clients, sc.radio, sc.seed)
    published = []

    class Keep:
        def on_progress(self, world_, progress, stopping):
            published.append(progress.state)
            return "rounds" if progress.step >= rounds else None

    world.observers = [Keep()]
    if module is scaffold:
        steps = module.protocol(world, learn, cfg, state, quadratic)
    elif module is fedavg:
        steps = module.protocol(world, learn, cfg, state, local_loss=lambda x: quadratic)
    else:
        steps = module.protocol(world, learn, cfg, state)
    world.env.run(world.env.process(steps))
    return published


def expected_path(name, variant, pull=lambda x, b: 0.75 * (b - x)):
    """x_1..x_3 by hand: each round's client deltas follow from the x before it."""
    weights = np.array(ROWS)
    x, deltas, out = 0.0, [], []
    for _ in range(3):
        deltas.append(np.array([[pull(x, b)] for b in B_I]))
        x = float(by_hand(name, deltas, weights, variant)[-1][0])
        out.append(x)
    return out


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_fedavg_steps_its_server_optimizer_on_the_delivered_deltas(name, variant):
    local = {"steps": 2, "batch_size": 4, "lr": 0.5}
    cfg = fedavg.Config(
        cohort={"clients_per_round": 2}, local=local, server_optimizer=config(name, variant)
    )
    x0 = torch.zeros(1)
    state = fedavg.State(
        0, x0, server_optim.init(server_optim.from_config(cfg.server_optimizer), x0)
    )
    got = [float(s.x[0]) for s in quadratic_run(fedavg, cfg, state)]
    assert got == pytest.approx(expected_path(name, variant), rel=1e-5)


def test_fedprox_steps_its_server_optimizer_with_the_proximal_clients(monkeypatch):
    """FedProx's clients minimise f_i + (mu / 2) ||w - x||^2 (here with the quadratic f_i in
    place of cross-entropy): two steps of lr 0.5 move w from x by
    (1 - (1 - 0.5 (1 + mu))^2) (b - x) / (1 + mu)."""
    mu = 1.0

    def proximal_quadratic(mu_, anchor):
        def loss_fn(model, params, x, y, aux=None):
            return quadratic(model, params, x, y) + 0.5 * mu_ * (params - anchor).square().sum(1)

        return loss_fn

    monkeypatch.setattr(fedprox, "proximal_loss", proximal_quadratic)
    local = {"steps": 2, "batch_size": 4, "lr": 0.5}
    cfg = fedprox.Config(
        mu=mu, cohort={"clients_per_round": 2}, local=local, server_optimizer=config("fedadagrad")
    )
    x0 = torch.zeros(1)
    state = fedprox.State(
        0, x0, server_optim.init(server_optim.from_config(cfg.server_optimizer), x0)
    )
    got = [float(s.x[0]) for s in quadratic_run(fedprox, cfg, state)]
    shrink = (1 - (1 - 0.5 * (1 + mu)) ** 2) / (1 + mu)
    assert got == pytest.approx(
        expected_path("fedadagrad", "reddi", lambda x, b: shrink * (b - x)), rel=1e-5
    )


def test_scaffold_steps_its_server_optimizer_on_the_plain_mean_of_dy():
    """SCAFFOLD's c starts at 0 and each c_i at 0, so round 1's dy are those of FedAvg; from
    round 2 on the corrections move them, so only round 1 is compared by hand, and c is the
    eta_g = 1 update whatever the optimizer."""
    local = {"steps": 2, "batch_size": 4, "lr": 0.5}
    cfg = scaffold.Config(
        cohort={"clients_per_round": 2}, local=local, server_optimizer=config("fedavgm")
    )
    x0 = torch.zeros(1)
    opt = server_optim.from_config(cfg.server_optimizer)
    state = scaffold.State(0, x0, torch.zeros(1), server_optim.init(opt, x0))
    first = quadratic_run(scaffold, cfg, state, rounds=1)[-1]
    dy = [0.75 * b for b in B_I]
    assert float(first.x[0]) == pytest.approx(SETTINGS["lr"] * np.mean(dy), rel=1e-6)
    # c = 0 + |S|/N mean(dc) with dc_i = c_i+ = -dy_i / (K eta_l)
    assert float(first.c[0]) == pytest.approx(-np.mean(dy), rel=1e-6)  # K eta_l = 1
    assert first.server is not None


# ------------------------------------------------------------ runs, checkpoints, labels


def test_a_run_with_server_and_nested_client_optimizer_states_resumes_bit_for_bit(tmp_path):
    """FedAdam's m and v (a chain's tuple of NamedTuples in the algorithm's state) and each
    client's persisted Adam-with-weight-decay state (a chain, kept in the client table)."""

    def make(name):
        return load_scenario(
            data=merge(
                BASE,
                {
                    "algorithm": {
                        "local": {
                            "optimizer": {"name": "adam", "weight_decay": 1e-4},
                            "lr": 0.01,
                            "optimizer_state": "persist",
                        },
                        "server_optimizer": {"name": "fedadam", "lr": 0.03},
                    },
                    "run": {"rounds": 6, "checkpoint_every": 1},
                    "output": {"dir": str(tmp_path / name)},
                },
            )
        )

    whole, _ = assert_resumes_exactly(make, StopAt(3))
    assert (whole.records.server_optimizer == "fedadam").all()
    saved = checkpoint.load(tmp_path / "whole", torch.device("cpu"))
    server = saved.state["server"]  # rebuilt as the NamedTuples it was
    assert isinstance(server, tuple) and isinstance(server[0], server_optim.MomentsState)
    assert isinstance(server[1], optim.EmptyState)


def test_nested_namedtuples_survive_the_checkpoint_encoding(tmp_path):
    state = {
        "x": torch.ones(2),
        "server": (server_optim.MomentsState(torch.zeros(2), torch.ones(2)), optim.EmptyState()),
        "steps": [server_optim.StepsState(3)],
        "none": None,
    }
    path = tmp_path / "s.pt"
    torch.save(checkpoint._plain(state), path)
    back = checkpoint._rebuilt(torch.load(path, weights_only=True))
    assert type(back["server"][0]) is server_optim.MomentsState
    assert torch.equal(back["server"][0].v, torch.ones(2))
    assert back["server"][1] == optim.EmptyState()
    assert back["steps"] == [server_optim.StepsState(3)] and back["none"] is None


@pytest.mark.parametrize(
    ("name", "why"),
    [("os.path:join", "not a NamedTuple of flnet"), ("flnet.learn.optim:sgd", "not a NamedTuple")],
)
def test_a_checkpoint_cannot_name_other_classes(name, why):
    with pytest.raises(ValueError, match=why):
        checkpoint._rebuilt({checkpoint.NAMEDTUPLE: name})


def test_an_unknown_class_in_a_checkpoint_is_a_clear_error(tmp_path):
    from flnet.runner import run

    sc = load_scenario(
        data=merge(
            BASE,
            {
                "algorithm": {"server_optimizer": {"name": "fedavgm"}},
                "run": {"rounds": 2, "checkpoint_every": 1},
                "output": {"dir": str(tmp_path)},
            },
        )
    )
    run(sc)
    path = tmp_path / checkpoint.FILE
    payload = torch.load(path, weights_only=True)
    payload["state"]["server"][0][checkpoint.NAMEDTUPLE] = "flnet.learn.optim:NoSuchState"
    torch.save(payload, path)
    with pytest.raises(FlnetError, match="cannot rebuild.*NoSuchState"):
        checkpoint.load(tmp_path, torch.device("cpu"))


def test_records_carry_the_server_optimizer_and_its_settings(scenario):
    from flnet.runner import run

    res = run(
        scenario(
            algorithm={"server_optimizer": {"name": "fedadagrad", "variant": "flower"}},
            run={"rounds": 1},
        ),
        write=False,
    )
    row = res.records.iloc[-1]
    assert row.server_optimizer == "fedadagrad" and row.server_variant == "flower"
    assert row.server_lr == 0.1 and row.server_tau == 1e-3
    assert row.server_b1 == 0.0  # the beta1 in effect, not the field's null
    plain = run(scenario(run={"rounds": 1}), write=False)
    assert (plain.records.server_optimizer == "none").all()
    assert "server_lr" not in plain.records


def test_scaffold_refuses_a_client_optimizer_other_than_sgd():
    with pytest.raises(ScenarioError, match=r"algorithm\.local\.optimizer\.name: .*'adam'.*'sgd'"):
        load_scenario(
            data=merge(
                BASE,
                {"algorithm": {"name": "scaffold", "local": {"optimizer": {"name": "adam"}}}},
            )
        )


def test_scaffold_refuses_eta_g_beside_a_server_optimizer():
    with pytest.raises(ScenarioError, match=r"algorithm\.server_lr"):
        load_scenario(
            data=merge(
                BASE,
                {
                    "algorithm": {
                        "name": "scaffold",
                        "server_lr": 2.0,
                        "server_optimizer": {"name": "fedadam"},
                    }
                },
            )
        )


def test_flower_fedadagrad_refuses_momentum():
    with pytest.raises(ScenarioError, match=r"algorithm\.server_optimizer\.b1"):
        load_scenario(
            data=merge(
                BASE,
                {
                    "algorithm": {
                        "server_optimizer": {"name": "fedadagrad", "variant": "flower", "b1": 0.9}
                    }
                },
            )
        )


@pytest.mark.parametrize(("name", "variant"), [("fedadam", "reddi"), ("fedavgm", "flower")])
def test_moon_steps_its_server_optimizer_as_fedavg_does(monkeypatch, name, variant):
    """MOON's server is FedAvg's: with its clients' loss replaced by the quadratic, its path
    under a server optimizer is the one computed by hand for FedAvg."""
    monkeypatch.setattr(moon, "contrastive_loss", lambda mu, temperature, x: quadratic)
    local = {"steps": 2, "batch_size": 4, "lr": 0.5}
    cfg = moon.Config(
        cohort={"clients_per_round": 2}, local=local, server_optimizer=config(name, variant)
    )
    x0 = torch.zeros(1)
    state = moon.State(0, x0, server_optim.init(server_optim.from_config(cfg.server_optimizer), x0))
    got = [float(s.x[0]) for s in quadratic_run(moon, cfg, state)]
    assert got == pytest.approx(expected_path(name, variant), rel=1e-5)
