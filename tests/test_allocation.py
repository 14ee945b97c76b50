"""Per-round allocations (`resources.bandwidth`, `resources.compute_power`,
flnet.sim.allocation) against their closed forms and a brute-force grid, and as the World
carries them out (the ledger's instants are the plan's)."""

import math

import numpy as np
import pandas as pd
import pytest

from flnet.errors import ScenarioError
from flnet.runner import run
from flnet.sim import allocation as A
from flnet.sim.radio import LN2, shannon_rate_bps

BAND_HZ = 20e6


def _members(n=3, **over):
    rng = np.random.default_rng(1)
    fields = dict(
        down_s=np.full(n, 0.1),
        cycles=np.full(n, 1e9),
        bits=np.full(n, 1e6),
        gain_hz_w=10 ** rng.uniform(8, 11, n),
        f_min_hz=np.full(n, 1e8),
        f_max_hz=np.full(n, 2e9),
        p_min_w=np.full(n, 1e-4),
        p_max_w=np.full(n, 0.1),
        kappa=np.full(n, 1e-28),
        circuit_w=np.full(n, 0.01),
    )
    fields.update({k: np.asarray(v, dtype=float) for k, v in over.items()})
    return A.Members(**fields)


def test_just_in_time_frequency_is_the_cycles_over_the_time_left_clipped():
    """f = cycles / (deadline - down - upload at p_max), clipped to [f_min, f_max]: member 0
    in the range, member 1 (few cycles) at f_min, member 2 (many) at f_max."""
    m = _members(cycles=[1e9, 1e6, 1e12])
    band = np.full(3, 5e6)
    f, p = A.just_in_time(m, band, 2.0)
    up_s = 1e6 / shannon_rate_bps(5e6, m.gain_hz_w * m.p_max_w)
    by_hand = np.clip(m.cycles / (2.0 - 0.1 - up_s), 1e8, 2e9)
    assert f.tolist() == pytest.approx(by_hand.tolist(), rel=1e-12)
    assert f[1] == 1e8 and f[2] == 2e9 and 1e8 < f[0] < 2e9
    # the power then fills what is left: member 0 at p_max (its f took all the slack),
    # member 1 the closed form (2^(bits / (t b)) - 1) b / gain, member 2 misses: p_max
    t1 = 2.0 - 0.1 - 1e6 / 1e8
    p1 = (2 ** (1e6 / (t1 * 5e6)) - 1) * 5e6 / m.gain_hz_w[1]
    assert p[1] == pytest.approx(max(p1, 1e-4), rel=1e-9)
    assert p[0] == pytest.approx(0.1, rel=1e-9) and p[2] == 0.1
    plan = A.evaluate(m, band, f, p, 2.0)
    assert plan.feasible.tolist() == [True, True, False]
    assert plan.finish_s[0] == pytest.approx(2.0, rel=1e-12)


def test_need_proportional_split_equalises_the_upload_times_on_the_whole_band():
    m = _members(5)
    snr = m.gain_hz_w * m.p_max_w
    b = A.equal_finish(np.zeros(5), m.bits, snr, BAND_HZ)
    assert b.sum() == pytest.approx(BAND_HZ, rel=1e-12)
    up = A.upload_s(m.bits, b, snr)
    assert np.ptp(up) < 1e-9 * up.max()


def test_min_max_split_equalises_the_finish_times_and_beats_the_equal_split():
    m = _members(5, cycles=[1e8, 5e8, 1e9, 2e9, 4e9])
    snr = m.gain_hz_w * m.p_max_w
    ready = m.down_s + m.cycles / m.f_max_hz
    b = A.equal_finish(ready, m.bits, snr, BAND_HZ)
    finish = ready + A.upload_s(m.bits, b, snr)
    assert b.sum() == pytest.approx(BAND_HZ, rel=1e-12)
    assert np.ptp(finish) < 1e-9 * finish.max()
    equal = ready + A.upload_s(m.bits, np.full(5, BAND_HZ / 5), snr)
    assert finish.max() < equal.max()


def test_bandwidth_for_a_time_inverts_the_upload_time():
    b = A.bandwidth_for_hz(1e6, 1e9, 0.2)
    assert A.upload_s(1e6, b, 1e9) == pytest.approx(0.2, rel=1e-10)
    assert A.bandwidth_for_hz(1e6, 1e6, 1e6 * LN2 / 1e6 * 0.99) == math.inf  # beyond b -> inf


@pytest.mark.parametrize("deadline_s", [0.8, 1.5, 4.0])
def test_min_energy_is_no_higher_than_any_fixed_pair_on_a_grid_that_meets_the_deadline(
    deadline_s,
):
    m = _members(3, cycles=[2e8, 6e8, 1.2e9], bits=[2e6, 1e6, 5e5])
    band = np.full(3, 2e6)
    f, p = A.min_energy(m, band, deadline_s)
    best = A.evaluate(m, band, f, p, deadline_s)
    assert best.feasible.all()
    jit = A.evaluate(m, band, *A.just_in_time(m, band, deadline_s), deadline_s)
    for k in range(3):
        fs = np.geomspace(m.f_min_hz[k], m.f_max_hz[k], 60)
        ps = np.geomspace(m.p_min_w[k], m.p_max_w[k], 60)
        ff, pp = (a.ravel() for a in np.meshgrid(fs, ps))
        one = A.Members(*(np.full(len(ff), col[k]) for col in m))
        grid = A.evaluate(one, np.full(len(ff), 2e6), ff, pp, deadline_s)
        assert grid.feasible.any()
        fixed_j = grid.energy_j[grid.feasible].min()
        assert best.energy_j[k] <= fixed_j * (1 + 1e-9), (k, best.energy_j[k], fixed_j)
        assert best.energy_j[k] <= jit.energy_j[k] * (1 + 1e-9)


def _small(**resources):
    return {
        "run": {"rounds": 2, "eval_every": 1},
        "clients": {"count": 12},
        "algorithm": {"cohort": {"clients_per_round": 4}},
        "resources": resources,
    }


def test_a_min_max_round_ends_for_every_member_at_the_planned_instant(scenario):
    res = run(scenario(**_small(bandwidth="min_max")), write=False)
    led, rec = res.ledger, res.records.set_index("round")
    up = led[(led["round"] == 1) & (led.kind == "upload")]
    assert len(up) == 4
    assert up.end_s.max() - up.end_s.min() < 1e-9 * up.end_s.max()
    assert up.end_s.max() == pytest.approx(rec.loc[1, "alloc_planned_round_s"], rel=1e-9)
    assert rec.loc[1, "alloc_bandwidth_hz_min"] < 20e6 / 4 < rec.loc[1, "alloc_bandwidth_hz_max"]


def test_just_in_time_rounds_meet_the_deadline_for_less_energy_than_fixed(scenario):
    fixed = run(scenario(**_small()), write=False)
    jit = run(scenario(**_small(compute_power="just_in_time", deadline_s=2.0)), write=False)
    led = jit.ledger
    rounds = led[led.kind != "evaluate"].groupby("round")
    assert ((rounds.end_s.max() - rounds.start_s.min()) <= 2.0 * (1 + 1e-9)).all()
    assert jit.records.energy_j.iloc[-1] < fixed.records.energy_j.iloc[-1]
    rec = jit.records.set_index("round")
    assert rec.loc[1:, "alloc_infeasible"].eq(0).all()


@pytest.mark.parametrize(
    "resources, radio, field",
    [
        (
            {"bandwidth": "min_max"},
            {"uplink": {"bandwidth_hz": 20e6, "sharing": "dedicated"}},
            "radio.uplink.sharing",
        ),
        ({"compute_power": "min_energy"}, {}, "resources.deadline_s"),
        ({"compute_power": "min_energy", "deadline_s": 5.0}, None, "resources.deadline_s"),
    ],
)
def test_allocations_are_refused_where_they_do_not_apply(scenario, resources, radio, field):
    """... a plan for a deadline later than the server's cut (cohort.deadline_s) too."""
    over = (
        {"radio": radio}
        if radio is not None
        else {"algorithm": {"cohort": {"clients_per_round": 5, "deadline_s": 2.0}}}
    )
    with pytest.raises(ScenarioError) as err:
        scenario(resources=resources, **over)
    assert field in str(err.value)


def test_the_policies_plan_for_the_servers_deadline_by_default(scenario):
    sc = scenario(
        resources={"compute_power": "just_in_time"},
        algorithm={"cohort": {"clients_per_round": 5, "deadline_s": 2.0}},
    )
    assert sc.resources.deadline_s is None and sc.resources_planned.deadline_s == 2.0


def test_a_timing_only_run_applies_the_policies_as_the_full_run(scenario):
    """The time side alone (no training) schedules and allocates as the full run: the same
    ledger to the bit, the same allocation columns."""
    from flnet import reuse

    sc = scenario(
        **_small(
            scheduling={"kind": "best_channel", "deadline_feasible": True},
            bandwidth="min_max",
            compute_power="min_energy",
            deadline_s=2.0,
        )
    )
    full = run(sc, write=False)
    timed = reuse.timing_only(sc, write=False)
    pd.testing.assert_frame_equal(timed.ledger, full.ledger, check_exact=True)
    alloc = [c for c in full.records if c.startswith(("alloc_", "scheduled_"))]
    assert len(alloc) == 11
    pd.testing.assert_frame_equal(timed.records[alloc], full.records[alloc], check_exact=True)
