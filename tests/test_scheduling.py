"""Client scheduling (`resources.scheduling`, flnet.sim.scheduling): each policy's choice
against a hand ranking, its history, the scenario's refusals, and its cost at 1,000,000
clients (only the candidate pool is looked at)."""

import math
import tracemalloc

import numpy as np
import pytest
import yaml
from harness import RESUMABLE

from flnet.errors import ScenarioError
from flnet.runner import run
from flnet.schema import ClientsConfig, DirectRadio, ResourcesConfig, SchedulingConfig
from flnet.sim.scheduling import Candidates, History, Work, choose
from flnet.sim.world import World


def _cand(rate, alone=None, soc=None, clients=None):
    n = len(rate)
    return Candidates(
        np.arange(n) if clients is None else np.asarray(clients),
        np.asarray(rate, dtype=float),
        np.full(n, math.nan) if alone is None else np.asarray(alone, dtype=float),
        np.full(n, math.nan) if soc is None else np.asarray(soc, dtype=float),
    )


def _choose(kind, cand, m, history=None, round=5, deadline_s=None, feasible=False):
    cfg = SchedulingConfig(kind=kind, deadline_feasible=feasible)
    tiebreak = np.linspace(0.0, 1.0, len(cand.clients))  # ties: in pool order
    return choose(cfg, cand, m, round, history or History(10), deadline_s, tiebreak).tolist()


def test_best_channel_takes_the_highest_rates():
    assert _choose("best_channel", _cand([3.0, 9.0, 1.0, 7.0]), 2) == [1, 3]


def test_proportional_fair_divides_the_rate_by_the_average_served_rate():
    """Client 0 (rate 10) was served at round 3 with 10 bit/s, client 1 (rate 4) at round 4
    with 4 bit/s; t_c = 2 rounds: at round 5, R_0 = 0.5 * 10 * 0.5^(5-3) = 1.25 and R_1 =
    0.5 * 4 * 0.5 = 1: scores 8 and 4. Client 2 (rate 1) was never served: first."""
    h = History(2.0)
    h.took_part(np.array([0]), np.array([10.0]), 3)
    h.took_part(np.array([1]), np.array([4.0]), 4)
    assert h.average_bps(np.array([0, 1, 2]), 5).tolist() == [1.25, 1.0, 0.0]
    assert _choose("proportional_fair", _cand([10.0, 4.0, 1.0]), 3, h) == [2, 0, 1]


def test_age_based_takes_those_longest_without_an_update_and_the_never_seen_first():
    h = History(10)
    h.delivered(np.array([0, 1]), 4)
    h.delivered(np.array([2]), 2)
    assert h.age(np.array([0, 2, 3]), 5).tolist() == [1, 3, math.inf]
    assert _choose("age_based", _cand([1.0] * 4), 2, h) == [3, 2]


def test_energy_aware_takes_the_fullest_batteries():
    assert _choose("energy_aware", _cand([1.0] * 3, soc=[0.2, 0.9, 0.5]), 2) == [1, 2]


def test_deadline_filter_drops_who_cannot_make_it_even_under_uniform():
    cand = _cand([1.0] * 4, alone=[5.0, 12.0, 9.0, 10.0])
    assert _choose("uniform", cand, 4, deadline_s=10.0, feasible=True) == [0, 2, 3]
    assert _choose("best_channel", cand, 2, deadline_s=10.0, feasible=True) == [0, 2]


def _world(n, kind="best_channel", **sched):
    clients = ClientsConfig(count=n)
    radio = DirectRadio(mode="direct", uplink_snr_db={"kind": "uniform", "low": 0, "high": 30})
    res = ResourcesConfig(scheduling=SchedulingConfig(kind=kind, **sched))
    return World(clients, radio, 0, resources=res)


def test_the_world_schedules_the_best_of_its_uniform_pool():
    world = _world(1000, candidates=4.0)
    chosen = world.sample_clients(10, 3)
    pool = world.candidates(40, 3)
    snr = world.population.up_snr_hz[pool]
    assert chosen.tolist() == sorted(pool[np.argsort(-snr)[:10]].tolist())
    assert world.resources is not None
    assert world.resources.figures()["scheduled_candidates"] == 40


def test_under_availability_the_pool_and_so_the_cohort_are_online_clients():
    clients = ClientsConfig(count=500, availability={"kind": "bernoulli", "p": 0.3})
    radio = DirectRadio(mode="direct", uplink_snr_db={"kind": "uniform", "low": 0, "high": 30})
    work = Work(1e3, lambda c: np.full(len(c), 1e6), 1e3)
    for sched in (
        SchedulingConfig(kind="best_channel"),
        SchedulingConfig(deadline_feasible=True),  # uniform among the online pool
    ):
        res = ResourcesConfig(scheduling=sched, deadline_s=1e9)
        world = World(clients, radio, 0, resources=res)
        for t in (1, 2, 3):
            chosen = world.sample_clients(20, t, work=work)
            assert len(chosen) == 20 and world.online_clients(chosen, t).all()


def test_a_channel_aware_scheduler_at_a_million_clients_touches_only_its_candidates():
    """A round's choice allocates what its pool of 400 needs, never an [N] column (8 MB)."""
    world = _world(1_000_000)
    world.sample_clients(100, 1)  # warm up (numpy's first calls allocate caches)
    tracemalloc.start()
    chosen = world.sample_clients(100, 2)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(chosen) == 100 and peak < 200_000, peak


def test_records_carry_the_schedulers_figures(scenario):
    res = run(
        scenario(resources={"scheduling": {"kind": "age_based", "candidates": 2}}), write=False
    )
    rec = res.records.set_index("round")
    assert (rec.loc[1:, "scheduled_clients"] == 5).all()
    assert (rec.loc[1:, "scheduled_candidates"] == 10).all()


@pytest.mark.parametrize(
    "sections, field, words",
    [
        (
            {
                "algorithm": {"name": "dpsgd", "local": {"steps": 1, "batch_size": 8}},
                "resources": {"scheduling": {"kind": "best_channel"}},
            },
            "resources",
            ["best_channel", "dpsgd", "gossip"],
        ),
        (
            {"resources": {"scheduling": {"kind": "energy_aware"}}},
            "resources.scheduling.kind",
            ["clients.battery"],
        ),
        (
            {"resources": {"scheduling": {"deadline_feasible": True}}},
            "resources.deadline_s",
            ["deadline"],
        ),
    ],
)
def test_policies_are_refused_where_they_do_not_apply(scenario, sections, field, words):
    with pytest.raises(ScenarioError) as err:
        scenario(**sections)
    text = str(err.value)
    assert field in text
    for w in words:
        assert w in text


@pytest.mark.parametrize("kind", ["age_based", "proportional_fair"])
def test_a_resumed_run_keeps_the_schedulers_history(tmp_path, kind):
    """The history (who delivered when, average served rates) is checkpointed: a run
    stopped at round 4 and resumed to 8 schedules as the run of 8 at once."""
    sc = {
        **RESUMABLE,
        "name": "sched",
        "clients": {**RESUMABLE["clients"], "count": 20},
        "resources": {"scheduling": {"kind": kind, "candidates": 2}},
        "run": {"rounds": 4, "eval_every": 1, "checkpoint_every": 2},
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    run(path)
    longer = run(path, overrides=["run.rounds=8"], resume=True)
    whole = run(path, overrides=["run.rounds=8", f"output.dir={tmp_path / 'whole'}"])
    assert longer.ledger.equals(whole.ledger)
    assert longer.records.equals(whole.records)
