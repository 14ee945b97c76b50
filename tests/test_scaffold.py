"""SCAFFOLD (option II): x, c and c_i by hand on a quadratic, the |S|/N factor, c_i after a lost
upload, the three training paths, the refused client optimizers, and a scenario on embedded
data."""

import numpy as np
import pytest
import torch
from conftest import BASE
from tolerance import assert_records_close, assert_tensors_close
from torch import nn

from flnet.algorithms import scaffold
from flnet.errors import ScenarioError
from flnet.learn.data import FederatedData
from flnet.learn.local import Learner
from flnet.learn.models import Model
from flnet.learn.wire import bits
from flnet.runner import Run, run
from flnet.scenario import load_scenario, merge
from flnet.sim.world import World

B_I = (1.0, 3.0)  # client i's optimum: f_i(w) = ||w - b_i||^2 / 2, so g_i(w) = w - b_i exactly


def quadratic(model, params, x, y, aux):
    """Every training row of client i is b_i, so the minibatch mean is b_i."""
    return 0.5 * (params - x.mean(1)).square().sum(1)


def quadratic_run(rounds_k: list[int], deadline_s=None, server_lr=1.0):
    """SCAFFOLD on two clients for len(rounds_k) rounds, round r sampling rounds_k[r] clients;
    K = 2 steps of lr 0.5 from x = 0. Returns the states published by round, the learner and
    the world."""
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
    model = Model(nn.Linear(1, 1, bias=False), (1,))
    learn = Learner(model, fed, seed=0)
    sc = load_scenario(
        data=merge(
            BASE, {"clients": {"count": 2}, "algorithm": {"cohort": {"clients_per_round": 2}}}
        )
    )
    world = World(sc.clients, sc.radio, sc.seed)
    state = scaffold.State(0, torch.zeros(1), torch.zeros(1))
    published = []

    class Stop:
        def on_progress(self, world_, progress, stopping):
            published.append(progress.state)
            return "rounds" if progress.step >= stop_at else None

    world.observers = [Stop()]
    for stop_at, k in enumerate(rounds_k, start=1):  # noqa: B007 (Stop reads stop_at)
        cfg = scaffold.Config(
            server_lr=server_lr,
            cohort={"clients_per_round": k, "deadline_s": deadline_s},
            local={"steps": 2, "batch_size": 4, "lr": 0.5},
        )
        world.stop(None)
        world.env.run(world.env.process(scaffold.protocol(world, learn, cfg, state, quadratic)))
        state = published[-1]
    return {s.round: s for s in published}, learn, world


def c_i(learn) -> list[float]:
    return learn.tables["scaffold.c_i"].rows(np.arange(2)).flatten().tolist()


def test_two_rounds_by_hand_with_one_of_two_clients_in_round_two():
    states, learn, world = quadratic_run([2, 1])
    # round 1, both clients, from x = 0, c = c_i = 0: y <- y - 0.5 (y - b_i)
    #   client 0: 0 -> 0.5 -> 0.75; c_0 = 0 - 0 + (0 - 0.75) / (2 * 0.5) = -0.75
    #   client 1: 0 -> 1.5 -> 2.25; c_1 = -2.25
    #   x = 0 + mean(0.75, 2.25) = 1.5; c = 0 + 2/2 * mean(-0.75, -2.25) = -1.5
    assert states[1].x.item() == 1.5 and states[1].c.item() == -1.5
    # round 2 samples one client: y <- y - 0.5 (y - b_i + c - c_i); c += 1/2 * dc_i
    chosen = int(world.sample_clients(1, 2)[0])
    by_hand = {
        # client 0: corr = -1.5 + 0.75 = -0.75; 1.5 -> 1.625 -> 1.6875;
        # c_0 = -0.75 + 1.5 + (1.5 - 1.6875) = 0.5625, dc = 1.3125
        0: dict(x=1.6875, c=-1.5 + 0.5 * 1.3125, c_i=[0.5625, -2.25]),
        # client 1: corr = -1.5 + 2.25 = 0.75; 1.5 -> 1.875 -> 2.0625;
        # c_1 = -2.25 + 1.5 + (1.5 - 2.0625) = -1.3125, dc = 0.9375
        1: dict(x=2.0625, c=-1.5 + 0.5 * 0.9375, c_i=[-0.75, -1.3125]),
    }[chosen]
    assert states[2].x.item() == pytest.approx(by_hand["x"], abs=1e-6)
    assert states[2].c.item() == pytest.approx(by_hand["c"], abs=1e-6)
    assert c_i(learn) == pytest.approx(by_hand["c_i"], abs=1e-6)
    # with every upload delivered, c is the mean of the c_i over all N clients
    assert states[2].c.item() == pytest.approx(np.mean(by_hand["c_i"]), abs=1e-6)


def test_server_step_size_scales_the_model_step_only():
    states, _, _ = quadratic_run([2], server_lr=0.5)
    assert states[1].x.item() == 0.75 and states[1].c.item() == -1.5


def test_both_links_are_charged_for_two_vectors():
    _, learn, world = quadratic_run([2])
    ledger = world.ledger.frame()
    p_bits = bits(torch.zeros(1))
    for kind in ("download", "upload"):  # (x, c) down, (dy, dc) up
        assert ledger[ledger.kind == kind].bits.tolist() == [2 * p_bits] * 2


def test_a_lost_upload_keeps_the_clients_c_i_but_not_the_servers_c():
    full, _, world = quadratic_run([2])
    ledger = world.ledger.frame()
    computed = ledger[ledger.kind == "compute"].set_index("node").end_s
    uploaded = ledger[ledger.kind == "upload"].set_index("node").end_s
    late = int(uploaded.idxmax())  # cut its upload after its compute completed
    deadline = (max(computed[late], uploaded.min()) + uploaded[late]) / 2
    assert computed[late] < deadline < uploaded[late]
    states, learn, world = quadratic_run([2], deadline_s=deadline)
    outcomes = world.ledger.frame().set_index(["kind", "node"]).outcome
    assert outcomes[("upload", late)] == "deadline" and outcomes[("compute", late)] == "ok"
    assert c_i(learn) == [-0.75, -2.25]  # both clients kept c_i+
    on_time = 1 - late  # the server heard only the other client: dc = c_i+, dy as in round 1
    assert states[1].c.item() == pytest.approx([-0.75, -2.25][on_time] / 2)
    assert states[1].x.item() == pytest.approx([0.75, 2.25][on_time])


def test_work_cut_before_its_compute_completes_changes_no_c_i():
    _, _, world = quadratic_run([2])
    ledger = world.ledger.frame()
    first_compute = ledger[ledger.kind == "compute"].start_s.min()
    states, learn, _ = quadratic_run([2], deadline_s=first_compute * 0.999)
    assert c_i(learn) == [0.0, 0.0] and states[1].x.item() == 0.0
    assert len(learn.tables["scaffold.c_i"]) == 0


DIGITS = {
    "data": {"dataset": "digits", "partition": {"kind": "dirichlet", "alpha": 0.3}},
    "algorithm": {
        "name": "scaffold",
        "cohort": {"clients_per_round": 4},
        "local": {"steps": 5, "batch_size": 8, "lr": 0.05},
    },
    "clients": {"count": 8},
    "run": {"rounds": 4, "eval_every": 2},
}


def test_batched_sequential_and_auto_paths_agree():
    results = {}
    for path in ("batched", "sequential", "auto"):
        sc = load_scenario(
            data=merge(BASE, merge(DIGITS, {"algorithm": {"local": {"path": path}}}))
        )
        sim = Run(sc, write=False)
        if path == "auto":  # slices of two clients
            per = sim.learner.trainer.clients_per_call(10**6, 8, "auto", scaffold.optim.sgd(1))
            sim.learner.trainer.memory_bytes = sim.learner.trainer.memory_bytes * 2 // per
        sim.simulate()
        results[path] = (sim.result(), sim.learner.tables["scaffold.c_i"], sim.world)
    ref, table, _ = results["batched"]
    everyone = np.arange(8)
    for path in ("sequential", "auto"):
        res, other, _ = results[path]
        assert_records_close(ref.records, res.records, eval_rows=360)
        assert other.written(everyone).tolist() == table.written(everyone).tolist()
        assert_tensors_close(other.rows(everyone), table.rows(everyone))


def test_scenario_runs_and_resumes_to_the_same_records(tmp_path):
    """c_i lives in the learner's tables, which checkpoints carry."""
    every = ["run.eval_every=3", "run.checkpoint_every=3"]
    whole = run(
        "scenarios/scaffold.yaml",
        overrides=[*every, "run.rounds=6", f"output.dir={tmp_path / 'a'}"],
    )
    assert whole.summary["final_test_accuracy"] > 0.5
    part = [*every, f"output.dir={tmp_path / 'b'}"]
    run("scenarios/scaffold.yaml", overrides=[*part, "run.rounds=3"])
    resumed = run("scenarios/scaffold.yaml", overrides=[*part, "run.rounds=6"], resume=True)
    assert resumed.records.equals(whole.records)
    assert resumed.ledger.equals(whole.ledger)


def test_optimizers_without_a_learning_rate_are_refused():
    with pytest.raises(ScenarioError, match="algorithm.*eta_l"):
        load_scenario(
            data=merge(
                BASE,
                {
                    "algorithm": {
                        "name": "scaffold",
                        "local": {"lr": None, "optimizer": {"name": "sps"}},
                    }
                },
            )
        )


@pytest.mark.parametrize(
    ("local", "field", "allowed"),
    [
        ({"optimizer": {"name": "sgd", "momentum": 0.9}}, "optimizer.momentum", "0"),
        (
            {"optimizer": {"name": "sgd", "momentum": 0.5}, "optimizer_state": "persist"},
            "optimizer.momentum",
            "0",
        ),
        ({"sam_rho": 0.05}, "sam_rho", "null"),
        ({"optimizer": {"name": "adam"}}, "optimizer.name", "'sgd'"),
    ],
)
def test_clients_other_than_plain_sgd_are_refused_by_field(local, field, allowed):
    """Option II's (x - y) / (K eta_l) is the mean gradient only after K plain SGD steps:
    momentum moves y by a velocity, SAM takes its gradients at perturbed points."""
    with pytest.raises(ScenarioError, match=rf"algorithm\.local\.{field}: .*allowed: {allowed}"):
        load_scenario(data=merge(BASE, {"algorithm": {"name": "scaffold", "local": local}}))


def test_weight_decay_is_allowed():
    """Plain SGD on f_i + (wd / 2) ||y||^2: option II holds for that objective."""
    sc = load_scenario(
        data=merge(
            BASE,
            {
                "algorithm": {
                    "name": "scaffold",
                    "local": {"optimizer": {"name": "sgd", "weight_decay": 0.01}},
                }
            },
        )
    )
    assert sc.algorithm.local.optimizer.weight_decay == 0.01


def test_sigterm_mid_run_then_resume_gives_the_uninterrupted_run(tmp_path):
    """`kill -TERM` while a SCAFFOLD run checkpoints every 5 rounds, then `--resume`: it goes on
    past a quarter of the run and ends with the records and ledger of a run never stopped. The
    c_i rows are in the table journal (an entry per checkpoint at most), not the checkpoint."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pandas as pd
    import yaml

    rounds = 120
    sc = merge(
        BASE,
        merge(
            DIGITS,
            {
                "name": "scaffold_kill",
                "seed": 3,
                "algorithm": {"cohort": {"deadline_s": 0.5}},
                "clients": {
                    "count": 10,
                    "cpu_hz": {"kind": "lognormal", "median": 2e8, "sigma": 0.5},
                },
                "radio": {"rayleigh_fading": True},
                "run": {"rounds": rounds, "eval_every": 5, "checkpoint_every": 5},
                "output": {"dir": str(tmp_path / "out")},
            },
        ),
    )
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    out = tmp_path / "out"

    def checkpoint_round():
        try:
            return torch.load(out / "checkpoint.pt", weights_only=True)["round"]
        except Exception:
            return -1

    cmd = [sys.executable, "-m", "flnet.cli", "run", str(path), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    give_up = time.time() + 300
    while checkpoint_round() < rounds // 4 and proc.poll() is None and time.time() < give_up:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=300)
    assert proc.returncode > 0, "the run ended before it could be stopped, or died unhandled"
    stopped_at = checkpoint_round()
    assert rounds // 4 <= stopped_at < rounds  # the tag it resumes from
    position = torch.load(out / "checkpoint.pt", weights_only=True)["tables"]
    assert 0 < position["entries"] <= stopped_at // 5
    assert (out / position["file"]).stat().st_size >= position["bytes"]
    resumed = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    run(path, overrides=[f"output.dir={tmp_path / 'whole'}"])
    for table in ("records", "ledger"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(out / f"{table}.parquet"),
            pd.read_parquet(tmp_path / "whole" / f"{table}.parquet"),
            check_exact=True,
        )
