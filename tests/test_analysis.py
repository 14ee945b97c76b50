"""CI runs the smallest smoke version of each analysis script."""

import importlib.util
from pathlib import Path


def load(name):
    spec = importlib.util.spec_from_file_location(name, Path("analysis") / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tau_energy_smoke(tmp_path, capsys):
    out = load("tau_energy").main(["--smoke", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert out["text"] in printed and "best tau per cell" in out["text"]
    # the one implementation: flnet analyze prints the same best tau, joules and spread
    from flnet.cli import main

    assert main(["analyze", str(tmp_path), "--target", "0.5"]) == 0
    assert capsys.readouterr().out.startswith(out["text"])
    per_run = out["per_run"]
    assert sorted(per_run[TAU_COL].unique()) == [1, 10] and sorted(per_run.seed) == [0, 0, 1, 1]
    reached = per_run[per_run.reached]
    assert len(reached)
    parts = reached.joules_compute_to_target + reached.joules_radio_to_target
    assert (reached.joules_to_target - parts).abs().max() < 1e-12
    cell = out["per_cell"].iloc[0]
    assert cell.best_tau in (1, 10) and cell.seeds == 2
    for name in ("to_target.csv", "best_tau.csv", "best_tau_per_seed.csv", "points.csv"):
        assert (tmp_path / name).exists()


TAU_COL = "algorithm.local.steps"


# ---------------------------------------------------------------- flnet.analysis on hand-made
import itertools  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from flnet.analysis import best_tau, best_tau_shown, pareto, to_target  # noqa: E402
from flnet.errors import FlnetError  # noqa: E402

TAU = "algorithm.local.steps"


def records_of(point, seed, tau, accs, worst=None, joules_per_round=1.0):
    """A run's records: round r costs r seconds and r * joules_per_round (0.25 of it radio)."""
    n = len(accs)
    r = np.arange(n)
    e = r * joules_per_round
    return pd.DataFrame(
        {
            "point": point,
            TAU: tau,
            "scenario": "s",
            "seed": seed,
            "round": r,
            "sim_time_s": r * 1.0,
            "energy_j": e,
            "energy_compute_j": 0.75 * e,
            "energy_uplink_j": 0.25 * e,
            "energy_downlink_j": 0.0,
            "energy_d2d_j": 0.0,
            "bits_up": r * 100.0,
            "bits_down": r * 50.0,
            "bits_d2d": 0.0,
            "test_accuracy": accs,
            "client_accuracy_worst": worst if worst is not None else accs,
        }
    )


def test_to_target_keeps_seeds_apart_and_censored_runs():
    recs = pd.concat(
        [
            records_of("a", 0, 5, [0.1, 0.5, 0.9, 0.95]),
            records_of("b", 1, 5, [0.1, 0.95, 0.97, 0.99]),  # same tau, another seed: own row
            records_of("c", 0, 1, [0.1, 0.3, 0.6, 0.8], joules_per_round=2.0),  # never reaches
        ]
    )
    out = to_target(recs, 0.9).set_index("point")
    assert len(out) == 3  # nothing dropped, nothing pooled
    assert out.loc["a", "rounds_to_target"] == 2 and out.loc["b", "rounds_to_target"] == 1
    assert out.loc["a", "joules_to_target"] == 2.0
    assert (
        out.loc["a", "joules_compute_to_target"] + out.loc["a", "joules_radio_to_target"]
        == out.loc["a", "joules_to_target"]
    )
    assert out.loc["a", "bits_to_target"] == 300.0
    assert out.loc["a", "censored_at_rounds"] != out.loc["a", "censored_at_rounds"]  # NaN
    c = out.loc["c"]
    assert not c.reached and math.isnan(c.joules_to_target)
    assert c.censored_at_rounds == 3 and c.censored_at_joules == 6.0
    assert c.best_test_accuracy == 0.8 and out.loc["a", "seed"] == 0


def test_to_target_on_the_worst_client():
    recs = records_of("a", 0, 5, [0.9, 0.95, 0.97], worst=[0.5, 0.7, 0.85])
    out = to_target(recs, 0.8, metric="client_accuracy_worst")
    assert out.rounds_to_target.item() == 2
    assert to_target(recs, 0.8).rounds_to_target.item() == 0
    with pytest.raises(FlnetError, match="client_accuracy_worst"):
        to_target(recs, 0.8, metric="worst")


def per_run_of(rows):
    """rows: (snr, seed, tau, joules or None for not reached)."""
    return pd.DataFrame(
        [
            {
                "radio.uplink_snr_db": snr,
                "seed": seed,
                TAU: tau,
                "reached": j is not None,
                "joules_to_target": math.nan if j is None else j,
            }
            for snr, seed, tau, j in rows
        ]
    )


def test_best_tau_per_seed_with_median_range_and_spread_flag():
    per_run = per_run_of(
        # snr 0: tau 5 wins on every seed, clearly
        [(0, s, 5, j) for s, j in enumerate([10, 11, 12])]
        + [(0, s, 1, j) for s, j in enumerate([20, 21, None])]
        # snr 20: tau 1 wins on the median (12 vs 13) but tau 5's median is inside
        # tau 1's spread over seeds (10..14): not a clear winner
        + [(20, s, 1, j) for s, j in enumerate([10, 14, 12])]
        + [(20, s, 5, j) for s, j in enumerate([11, 13, 30])]
        # snr 40: nothing reaches the target
        + [(40, s, t, None) for s in range(3) for t in (1, 5)]
    )
    per_seed, per_cell = best_tau(per_run, "joules")
    cells = per_cell.set_index("radio.uplink_snr_db")
    assert cells.loc[0, "best_tau"] == 5 and not cells.loc[0, "within_spread"]
    assert cells.loc[0, "best_tau_per_seed"] == "5, 5, 5"
    assert (
        cells.loc[0, "joules_to_target_median"],
        cells.loc[0, "joules_to_target_min"],
        cells.loc[0, "joules_to_target_max"],
    ) == (11, 10, 12)
    assert cells.loc[20, "best_tau"] == 1 and cells.loc[20, "within_spread"]
    assert cells.loc[20, "best_tau_per_seed"] == "1, 5, 1"
    assert cells.loc[20, "runner_up_tau"] == 5
    assert (cells.loc[20, "best_tau_min"], cells.loc[20, "best_tau_max"]) == (1, 5)
    assert math.isnan(cells.loc[40, "best_tau"]) and cells.loc[40, "within_spread"]
    assert cells.loc[40, "best_tau_per_seed"] == "none, none, none"
    # not reached is an infinite cost: seed 2 of snr 0 still picks tau 5
    s = per_seed.set_index(["radio.uplink_snr_db", "seed"])
    assert s.loc[(0, 2), "best_tau"] == 5 and s.loc[(40, 1), "best_joules_to_target"] == math.inf


def test_best_tau_shown_is_the_cell_then_the_winner_and_its_cost():
    """What `flnet analyze` and analysis/tau_energy.py print (the latter with the runner-up)."""
    per_run = per_run_of([(0, 0, 1, 10.0), (0, 0, 5, 12.0), (20, 0, 1, 9.0), (20, 0, 5, 8.0)])
    _, per_cell = best_tau(per_run, "joules")
    shown = best_tau_shown(per_cell, "joules")
    cost = ["joules_to_target_median", "joules_to_target_min", "joules_to_target_max"]
    spread = ["best_tau", "best_tau_per_seed", "best_tau_median", "best_tau_min", "best_tau_max"]
    assert list(shown.columns) == [
        "radio.uplink_snr_db",
        *spread,
        *cost,
        "within_spread",
        "verdict",
    ]
    assert shown.best_tau.tolist() == [1, 5] and shown.joules_to_target_median.tolist() == [10, 8]
    with_runner_up = best_tau_shown(per_cell, "joules", runner_up=True)
    assert list(with_runner_up.columns) == [
        *shown.columns[:-2],
        "runner_up_tau",
        "within_spread",
        "verdict",
    ]
    assert with_runner_up.runner_up_tau.tolist() == [5, 1]


def test_best_tau_ties_are_within_the_spread():
    per_run = per_run_of([(0, 0, 1, 10.0), (0, 0, 5, 10.0)])
    _, per_cell = best_tau(per_run, "joules")
    assert per_cell.within_spread.item() and per_cell.best_tau.item() == 1


def test_pareto_front():
    df = pd.DataFrame(
        {
            "final_test_accuracy": [0.9, 0.8, 0.9, 0.95, math.nan],
            "sim_time_s": [10, 5, 12, 20, 1],
            "energy_j": [1, 1, 1, 3, 0],
        }
    )
    front = pareto(df).on_front.tolist()
    # row 2 is beaten by row 0 (same accuracy and joules, slower); NaN never on the front
    assert front == [True, True, False, True, False]
    only_energy = pareto(df, {"energy_j": "min"}).on_front.tolist()
    assert only_energy == [False, False, False, False, True]  # only its objectives count


def test_a_tie_on_one_seed_goes_to_the_smaller_tau_whatever_the_row_order():
    per_run = per_run_of([(0, 0, 5, 10.0), (0, 0, 1, 10.0), (0, 0, 2, 30.0)])
    per_seed, _ = best_tau(per_run, "joules")
    assert per_seed.best_tau.item() == 1


def test_device_costs_sum_each_devices_rows():
    from flnet.analysis import device_costs

    cols = ["round", "pattern", "node", "peer", "kind", "start_s", "end_s", "energy_j", "bits"]
    rows = [
        (1, "exchange", 0, -2, "compute", 0.0, 1.0, 2.0, 0.0),
        (1, "exchange", 0, 1, "d2d", 1.0, 3.0, 0.5, 100.0),  # 0 sends 100 bits to 1
        (1, "exchange", 1, 0, "d2d_rx", 1.0, 3.0, 0.25, 0.0),
        (1, "round_trip", 1, -1, "download", 0.0, 0.5, 0.0, 40.0),  # server -> 1
        (1, "round_trip", 1, -1, "upload", 3.0, 4.0, 1.0, 30.0),
        (1, "exchange", -1, -2, "evaluate", 4.0, 4.0, 0.0, 0.0),
    ]
    got = device_costs(pd.DataFrame(rows, columns=cols))
    assert got.loc[0].to_dict() == {
        "bits_sent": 100.0,
        "bits_received": 0.0,
        "compute_s": 1.0,
        "transmit_s": 2.0,
        "receive_s": 0.0,
        "energy_j": 2.5,
    }
    assert got.loc[1].to_dict() == {
        "bits_sent": 30.0,
        "bits_received": 140.0,
        "compute_s": 0.0,
        "transmit_s": 1.0,
        "receive_s": 2.5,
        "energy_j": 1.25,
    }


def test_best_tau_among_several_fields_is_the_cheapest_combination():
    """Choosing (tau, f, p) together: each seed's best triple, the cell's by median, and the
    per-field winners; a tie goes to the smallest values, first field first."""
    rows = []
    for seed in (0, 1, 2):
        for tau, f, p in itertools.product((1, 5), (1e8, 1e9), (10.0, 20.0)):
            joules = 10 * tau + f / 1e8 + p + seed  # (1, 1e8, 10) is cheapest: 21 + seed
            if seed == 2 and (tau, f, p) == (1, 1e8, 10.0):
                joules = math.nan  # not reached on seed 2: (1, 1e9, 10) = 32 wins there
            rows.append(
                {
                    "seed": seed,
                    TAU: tau,
                    "clients.cpu_hz": f,
                    "radio.tx_power_dbm": p,
                    "reached": joules == joules,
                    "joules_to_target": joules,
                }
            )
    per_run = pd.DataFrame(rows)
    fields = f"{TAU},clients.cpu_hz,radio.tx_power_dbm"
    per_seed, per_cell = best_tau(per_run, "joules", fields)
    assert per_seed.best_tau.tolist() == [
        "tau=1, cpu_hz=1e+08, tx_power_dbm=10",
        "tau=1, cpu_hz=1e+08, tx_power_dbm=10",
        "tau=1, cpu_hz=1e+09, tx_power_dbm=10",
    ]
    assert per_seed["best_clients.cpu_hz"].tolist() == [1e8, 1e8, 1e9]
    cell = per_cell.iloc[0]
    # the medians over seeds: (1, 1e8, 10) = median(21, 22, inf) = 22; (1, 1e9, 10) = 31
    assert cell.best_tau == "tau=1, cpu_hz=1e+08, tx_power_dbm=10"
    assert cell.joules_to_target_median == 22 and not cell.clear
    assert cell.runner_up_tau == "tau=1, cpu_hz=1e+09, tx_power_dbm=10"
    assert (cell["best_clients.cpu_hz_min"], cell["best_clients.cpu_hz_max"]) == (1e8, 1e9)
    assert cell.verdict.startswith(
        "no clear winner: tau=1, cpu_hz=1e+08, tx_power_dbm=10 (seed 0, 1); "
        "tau=1, cpu_hz=1e+09, tx_power_dbm=10 (seed 2)"
    )
    assert cell.edge and "at the edge of the grid of tau {1, 5}" in cell.verdict
    # a tie between two triples goes to the smaller values
    tie = per_run[per_run.seed == 0].assign(joules_to_target=7.0)
    assert best_tau(tie, "joules", fields)[0].best_tau.item() == (
        "tau=1, cpu_hz=1e+08, tx_power_dbm=10"
    )


def test_a_policy_name_is_chosen_with_a_number():
    """A field swept as names (resources.compute_power) is chosen among with tau; it has no
    median and no edge."""
    rows = [
        {
            "seed": s,
            TAU: t,
            "resources.compute_power": c,
            "reached": True,
            "joules_to_target": t + (0 if c == "min_energy" else 5) + s,
        }
        for s in (0, 1)
        for t in (1, 5)
        for c in ("fixed", "just_in_time", "min_energy")
    ]
    _, per_cell = best_tau(pd.DataFrame(rows), "joules", [TAU, "resources.compute_power"])
    cell = per_cell.iloc[0]
    assert cell.best_tau == "tau=1, compute_power=min_energy"
    assert cell["best_resources.compute_power"] == "min_energy"
    assert math.isnan(cell["best_resources.compute_power_median"])
    assert cell.verdict == (
        "tau=1, compute_power=min_energy in every seed (2 of 2); at the edge of the grid of "
        "tau {1, 5}: try beyond it"
    )
