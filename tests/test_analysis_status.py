"""Studies read how a run ended (flnet.analysis): a diverged, failed or killed run is shown as
such, never at its last finite accuracy. Hand-built records of four runs: ok, one that
diverged after passing the target, one that failed, one killed."""

import math

import pandas as pd
import pytest

from flnet.analysis import (
    accuracy_at,
    censored_median,
    decided,
    ended_as,
    final_value,
    median_range,
    per_seed,
    run_ended,
    run_point,
    statuses,
    to_target,
    with_status,
)
from flnet.errors import FlnetError
from flnet.scenario import load_scenario


def run(point, accuracies, *, every=10, dt_s=5.0):
    return pd.DataFrame(
        {
            "point": point,
            "seed": 0,
            "round": [every * (i + 1) for i in range(len(accuracies))],
            "sim_time_s": [every * dt_s * (i + 1) for i in range(len(accuracies))],
            "energy_j": [1.0 * (i + 1) for i in range(len(accuracies))],
            "test_accuracy": accuracies,
        }
    )


POINTS = pd.DataFrame(
    {
        "point": ["ok", "div", "fail", "kill", "norecords"],
        "seed": 0,
        "status": ["completed", "diverged", "failed", "killed", "failed"],
        "diverged_round": [None, 35, None, None, None],
        "sim_time_s": [150.0, 175.0, None, None, None],
    }
)


@pytest.fixture
def records():
    recs = pd.concat(
        [
            run("ok", [0.5, 0.8, 0.9]),
            run("div", [0.6, 0.91, 0.93]),  # passed 0.9 at round 20, diverged at 35
            run("fail", [0.4, 0.7]),
            run("kill", [0.4]),
        ],
        ignore_index=True,
    )
    return with_status(recs, POINTS)


def test_with_status_from_a_points_table_and_from_a_summary(records):
    one = records[records.point == "div"]
    assert (one.status == "diverged").all() and (one.diverged_round == 35).all()
    assert (one.ended_s == 175.0).all()
    assert set(records.point) == {"ok", "div", "fail", "kill"}  # no invented rows
    single = with_status(
        run("x", [0.3]), {"status": "diverged", "diverged_round": 12, "sim_time_s": 9.0}
    )
    assert single.status.iloc[0] == "diverged" and single.diverged_round.iloc[0] == 12
    with pytest.raises(FlnetError, match="status"):
        with_status(run("x", [0.3]), POINTS.drop(columns="status"))


def test_accuracy_at_is_nan_from_where_a_run_stopped_being_a_result(records):
    by = {p: g for p, g in records.groupby("point")}
    # completed: the last evaluation at or before, held after its end
    assert accuracy_at(by["ok"], t_s=120.0) == 0.8
    assert accuracy_at(by["ok"], t_s=1e9) == 0.9
    assert math.isnan(accuracy_at(by["ok"], t_s=10.0))  # before the first evaluation
    # diverged at round 35 (175 s): its figures before that are real, none from there on
    assert accuracy_at(by["div"], round_=30) == 0.93
    assert accuracy_at(by["div"], t_s=170.0) == 0.93
    assert math.isnan(accuracy_at(by["div"], round_=35))
    assert math.isnan(accuracy_at(by["div"], t_s=175.0))
    assert math.isnan(accuracy_at(by["div"], t_s=1e9))
    # failed / killed: known up to the last evaluation, unknown after it
    assert accuracy_at(by["fail"], round_=20) == 0.7
    assert math.isnan(accuracy_at(by["fail"], round_=21))
    assert math.isnan(accuracy_at(by["kill"], t_s=51.0))
    with pytest.raises(FlnetError):
        accuracy_at(by["ok"])


def test_to_target_refuses_runs_that_did_not_complete(records):
    per_run = to_target(records, 0.9).set_index("point")
    assert per_run.loc["ok", "reached"] and per_run.loc["ok", "rounds_to_target"] == 30
    # it passed 0.9 at round 20 before diverging: refused all the same, censored at its end
    assert not per_run.loc["div", "reached"] and math.isnan(per_run.loc["div", "rounds_to_target"])
    assert per_run.loc["div", "censored_at_rounds"] == 30
    assert per_run.loc["div", "status"] == "diverged" and per_run.loc["div", "diverged_round"] == 35
    assert not per_run.loc[["fail", "kill"], "reached"].any()
    # records without a status column are read as before
    plain = to_target(records.drop(columns=["status", "diverged_round", "ended_s"]), 0.9)
    assert plain.set_index("point").loc["div", "rounds_to_target"] == 20


def test_median_range_counts_runs_without_a_figure_by_why():
    status = pd.Series(["completed", "completed", "diverged", "failed"])
    values = pd.Series([0.9, 0.8, math.nan, math.nan])
    assert median_range(values, status) == "0.85 [0.8-0.9] (1 diverged, 1 failed)"
    # a completed run without a figure never got there (e.g. never reached the target)
    assert median_range(pd.Series([10.0, math.nan]), status[:2]) == "10 [10-10] (1 never)"
    assert median_range(pd.Series([math.nan] * 2), pd.Series(["diverged"] * 2)) == (
        "none: 2 diverged"
    )
    # a diverged run's figure from before it diverged is a figure
    assert median_range(pd.Series([0.5, 0.7, 0.6]), status[:3]) == "0.6 [0.5-0.7]"
    assert median_range(pd.Series([1.0, math.nan])) == "1 [1-1] (1 never)"
    # -inf (a diverged run ranked last) or inf is no figure: never in a range
    inf = pd.Series([0.8, -math.inf, math.inf])
    assert median_range(inf, status[:3]) == "0.8 [0.8-0.8] (1 never, 1 diverged)"


def test_median_range_takes_lists_as_the_studies_give_them():
    assert median_range([0.9, 0.8, math.nan], ["completed", "completed", "diverged"]) == (
        "0.85 [0.8-0.9] (1 diverged)"
    )


def test_censored_median_counts_a_run_that_never_reached_as_infinite():
    status = pd.Series(["completed", "completed", "diverged"])
    # 10, 30 and infinity (the diverged run): the median is 30
    assert censored_median(pd.Series([10.0, 30.0, math.nan]), pd.Series([0, 0, 50.0]), status) == (
        "30 (1 diverged)"
    )
    # two of three never reached it: the median is censored, read as "> least spent"
    never = pd.Series([10.0, math.nan, math.nan])
    done = pd.Series(["completed"] * 3)
    assert censored_median(never, pd.Series([math.nan, 80.0, 60.0]), done) == "> 60"


def test_a_seed_is_undecided_when_a_run_it_needs_did_not_complete():
    assert decided([True, True], True) is True
    assert decided([True, True], False) is False
    assert decided([True, False], True) is None
    assert per_seed(pd.Series([decided([True], True), decided([False], True)]))[1] == (
        "holds in 1 of 2 seeds, 1 undecided"
    )


def test_final_value_and_run_ended_read_a_run_as_it_ended():
    records = with_status(run("p", [0.2, 0.5, 0.7]), {"status": "diverged", "diverged_round": 25})
    assert math.isnan(final_value(records))  # never its last finite figure
    assert run_ended(records) == "diverged at round 25"
    ok = with_status(run("p", [0.2, 0.5, 0.7]), {"status": "completed"})
    assert final_value(ok) == 0.7 and run_ended(ok) == "completed"


def test_statuses_and_ended_as():
    assert ended_as("diverged", 35.0) == "diverged at round 35"
    assert ended_as("diverged", math.nan) == "diverged"
    assert ended_as("killed") == "killed" and ended_as(None) == "unknown"
    s = pd.Series(["completed", "diverged", "completed"])
    assert statuses(s, pd.Series([math.nan, 7.0, math.nan])) == (
        "2 completed, 1 diverged at round 7"
    )


def test_a_claim_is_decided_seed_by_seed():
    assert per_seed(pd.Series([True, True, True])) == ("holds", "holds in 3 of 3 seeds")
    assert per_seed(pd.Series([False, False])) == ("does not hold", "holds in 0 of 2 seeds")
    assert per_seed(pd.Series([True, False, True])) == (
        "holds in 2 of 3 seeds",
        "holds in 2 of 3 seeds",
    )
    # a seed whose run diverged cannot support the claim: undecided, never a pass
    assert per_seed(pd.Series([True, None, True], dtype=object)) == (
        "holds in 2 of 3 seeds",
        "holds in 2 of 3 seeds, 1 undecided",
    )


def test_a_sweeps_records_are_read_with_their_points_status(tmp_path):
    from flnet.analysis import read_records

    run("div", [0.6, 0.91]).to_csv(tmp_path / "records.csv", index=False)
    POINTS.to_csv(tmp_path / "points.csv", index=False)
    records = read_records(tmp_path)
    assert (records.status == "diverged").all()
    assert not to_target(records, 0.9).reached.iloc[0]  # `flnet analyze` refuses it too


def test_a_study_point_that_raises_is_a_status_with_its_error(monkeypatch, capsys):
    """`run_point` never raises: a bad point is `invalid` naming its field, a FlnetError
    `error`, any other exception `failed` (traceback on stderr), as a sweep records them; a
    run that completes comes back with its records and status."""
    import flnet.runner
    from flnet.analysis import Point, raised_points, raised_row, run_point

    bad = run_point({"name": "x", "clients": {"count": -3}})
    assert (bad.records, bad.status) == (None, "invalid") and "clients.count" in bad.error

    def raising(error):
        def run(scenario, **kwargs):
            raise error

        return run

    small = {
        "name": "x",
        "device": "cpu",
        "algorithm": {"name": "fedavg", "cohort": {"clients_per_round": 2}},
        "clients": {"count": 4},
        "run": {"rounds": 1},
    }
    monkeypatch.setattr(flnet.runner, "run", raising(FlnetError("no data here")))
    assert run_point(small) == Point(None, None, "error", "no data here")
    monkeypatch.setattr(flnet.runner, "run", raising(RuntimeError("a bug")))
    assert run_point(small) == Point(None, None, "failed", "RuntimeError: a bug")
    assert "RuntimeError: a bug" in capsys.readouterr().err  # its traceback
    monkeypatch.undo()
    done = run_point(small)
    assert done.status == "completed" and done.error is None
    assert (done.records.status == "completed").all() and len(done.ledger)

    per_run = pd.DataFrame(
        [{"seed": 0, "status": "completed", "acc": 0.9}, raised_row(bad, seed=1)]
    )
    assert median_range(per_run.acc, per_run.status) == "0.9 [0.9-0.9] (1 invalid)"
    assert statuses(per_run.status) == "1 completed, 1 invalid"
    listed = raised_points(per_run, ["seed"]).splitlines()
    assert len(listed) == 2 and listed[1].startswith("  seed 1: invalid: ")
    assert raised_points(per_run[:1], ["seed"]) == ""


def test_a_diverged_run_shows_the_rule_that_fired():
    """`diverged_by` (which rule of run.divergence fired) travels with the status from a run's
    summary and a sweep's points table to what a study shows; summaries written before rules
    existed have none and read as before."""
    assert ended_as("diverged", 70.0, "consensus_above") == (
        "diverged at round 70 (consensus_above)"
    )
    assert ended_as("diverged", 70.0, math.nan) == "diverged at round 70"  # none in points.csv
    assert ended_as("completed", math.nan, math.nan) == "completed"
    s = pd.Series(["diverged", "completed", "diverged"])
    rounds, rules = pd.Series([70.0, math.nan, 30.0]), pd.Series(["consensus_above", None, None])
    assert statuses(s, rounds, rules) == (
        "1 diverged at round 70 (consensus_above), 1 completed, 1 diverged at round 30"
    )
    points = POINTS.assign(diverged_by=[None, "loss_above_start", None, None, None])
    recs = with_status(pd.concat([run("ok", [0.5]), run("div", [0.6, 0.91])]), points)
    assert recs[recs.point == "div"].diverged_by.eq("loss_above_start").all()
    assert to_target(recs, 0.9).set_index("point").diverged_by["div"] == "loss_above_start"

    # a real run: OledFL at an unstable beta breaks the consensus rule (tests/test_divergence.py)
    with pytest.warns(Warning, match="is unstable"):
        point = run_point(
            load_scenario(
                "scenarios/oledfl_sgd.yaml",
                ["algorithm.beta=0.6", "run.rounds=80", "run.eval_every=1", "device=cpu"]
                + ["run.divergence.consensus_above=100"],
            )
        )
    assert point.records is not None and (point.records.diverged_by == "consensus_above").all()
    first = point.records.iloc[0]
    assert ended_as(first.status, first.diverged_round, first.diverged_by) == (
        f"diverged at round {int(first.diverged_round)} (consensus_above)"
    )
