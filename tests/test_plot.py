"""Plots read back from their figure objects: axes labels with units, one series per run (or per
group of seeds, with a band), energy bars that add up to the run's joules, the best-tau heatmap
against a table whose answer is known, and clear errors for folders that are not results."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import small_base
from harness import flnet_cli

import flnet
from flnet.cli import main
from flnet.plot import (
    ResultsError,
    accuracy_figure,
    best_tau_figure,
    best_tau_table,
    consensus_figure,
    device_classes,
    energy_by_class_figure,
    energy_split_figure,
    load_results,
    make_plots,
    seed_band,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """Four runs, one seed each: tau x uplink SNR (direct radio mode)."""
    out = tmp_path_factory.mktemp("sweep")
    flnet.sweep(
        small_base("radio.mode=direct"),
        {"algorithm.local.steps": [1, 4], "radio.uplink_snr_db": [0, 20]},
        out_dir=out,
    )
    return out


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def legend_texts(fig):
    return [t.get_text() for t in fig.legends[0].get_texts()] if fig.legends else []


# -- accuracy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, label",
    [("sim_time_s", "simulated time (s)"), ("energy_j", "energy (J)"), ("round", "round")],
)
def test_accuracy_figure_of_a_run_labels_every_axis(run_dir, x, label):
    fig = accuracy_figure(run_dir, x=x)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [
        "test accuracy",
        "mean client accuracy",
        "worst-client accuracy",
    ]
    assert all(ax.get_xlabel() == label for ax in axes)
    assert axes[0].get_ylabel() == "accuracy (fraction correct)"
    assert all(len(ax.get_lines()) == 1 for ax in axes)
    records = pd.read_parquet(run_dir / "records.parquet")
    line = axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), records[x])
    np.testing.assert_allclose(line.get_ydata(), records.test_accuracy)


def test_sweep_plot_has_one_series_per_run(sweep_dir):
    points = pd.read_csv(sweep_dir / "points.csv")
    for x in ("sim_time_s", "energy_j", "round"):
        fig = accuracy_figure(sweep_dir, x=x)
        for ax in fig.axes:
            assert len(ax.get_lines()) == len(points) == 4
            assert not ax.collections  # one seed per run: no band
        assert legend_texts(fig) == [
            "tau=1, uplink_snr_db=0",
            "tau=1, uplink_snr_db=20",
            "tau=4, uplink_snr_db=0",
            "tau=4, uplink_snr_db=20",
        ]


def test_runs_differing_in_seed_only_form_one_series_with_a_band(seed_sweep_dir):
    fig = accuracy_figure(seed_sweep_dir, x="round")
    records = pd.read_parquet(seed_sweep_dir / "records.parquet")
    for ax in fig.axes:
        assert len(ax.get_lines()) == 2 and len(ax.collections) == 2
    assert legend_texts(fig) == ["tau=1 (2 seeds)", "tau=4 (2 seeds)"]
    assert "median over seeds, band min-max" in fig.get_suptitle()  # the one aggregation
    tau1 = records[records["algorithm.local.steps"] == 1]
    per_round = tau1.groupby("round").test_accuracy
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), per_round.median().index)
    np.testing.assert_allclose(line.get_ydata(), per_round.median())
    band = fig.axes[0].collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(per_round.min().min())
    assert band[:, 1].max() == pytest.approx(per_round.max().max())


def test_seed_band_interpolates_and_stops_where_the_shortest_seed_stops():
    a = (np.array([0.0, 2.0, 4.0]), np.array([0.0, 0.4, 0.8]))
    b = (np.array([0.0, 1.0, 3.0]), np.array([0.2, 0.4, 0.6]))
    c = (np.array([0.0, 3.0]), np.array([0.1, 0.7]))
    x, mid, low, high = seed_band([a, b, c])
    np.testing.assert_allclose(x, [0, 1, 2, 3])
    # a at 1, 3: 0.2, 0.6; b at 2: 0.5; c at 1, 2: 0.3, 0.5
    np.testing.assert_allclose(mid, [0.1, 0.3, 0.5, 0.6])
    np.testing.assert_allclose(low, [0.0, 0.2, 0.4, 0.6])
    np.testing.assert_allclose(high, [0.2, 0.4, 0.5, 0.7])


# -- energy -----------------------------------------------------------------------------------


def test_energy_split_bars_add_up_to_each_runs_joules(sweep_dir):
    fig = energy_split_figure(sweep_dir)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "energy (J)"
    assert [c.get_label() for c in ax.containers] == ["compute", "uplink", "downlink", "D2D"]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "tau=1, uplink_snr_db=0",
        "tau=1, uplink_snr_db=20",
        "tau=4, uplink_snr_db=0",
        "tau=4, uplink_snr_db=20",
    ]
    totals = sum(np.array([bar.get_width() for bar in c]) for c in ax.containers)
    points = pd.read_csv(sweep_dir / "points.csv")
    np.testing.assert_allclose(totals, points.energy_j, rtol=1e-9)


def test_energy_by_device_class_adds_up_to_the_ledger(run_dir):
    fig = energy_by_class_figure(run_dir)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "energy (J)" and ax.get_xlabel() == "device class"
    assert [c.get_label() for c in ax.containers] == ["compute", "uplink", "downlink", "D2D"]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "slow third",
        "middle third",
        "fast third",
    ]
    total = sum(bar.get_height() for c in ax.containers for bar in c)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert total == pytest.approx(summary["energy_j"], rel=1e-9)


def test_device_classes_are_thirds_by_measured_compute_speed():
    # node k computes 10 FLOPs in 1/(k+1) s: speed rises with k; node 6 never finishes
    rows = [
        {
            "node": k,
            "kind": "compute",
            "start_s": 0.0,
            "end_s": 1.0 / (k + 1),
            "energy_j": 1.0,
            "flops": 10.0,
            "outcome": "ok",
        }
        for k in range(6)
    ]
    rows += [
        {
            "node": 6,
            "kind": "compute",
            "start_s": 0.0,
            "end_s": 1.0,
            "energy_j": 1.0,
            "flops": 10.0,
            "outcome": "deadline",
        },
        {
            "node": -1,
            "kind": "evaluate",
            "start_s": 0.0,
            "end_s": 0.0,
            "energy_j": 0.0,
            "flops": 0.0,
            "outcome": "ok",
        },
    ]
    classes = device_classes(pd.DataFrame(rows))
    assert classes.to_dict() == {
        0: "slow third",
        1: "slow third",
        2: "middle third",
        3: "middle third",
        4: "fast third",
        5: "fast third",
        6: "no finished compute",
        -1: "server",
    }


def test_device_class_plot_needs_a_ledger(run_dir, tmp_path):
    only_records = tmp_path / "r"
    only_records.mkdir()
    shutil.copy(run_dir / "records.parquet", only_records)
    assert energy_by_class_figure(only_records) is None
    assert "energy_by_device_class" not in make_plots(only_records, tmp_path / "plots")


# -- best tau ---------------------------------------------------------------------------------


def tau_records(best: dict, taus=(1, 5, 20), seeds=(0, 1, 2), target=0.8):
    """Records of a SNR x bandwidth x tau x seed sweep in which `best[(snr, bw, seed)]` is the
    tau that reaches `target` with the fewest joules (None: no tau reaches it). Every other
    tau reaches it later in joules, or never."""
    rows, point = [], 0
    for (snr, bw, seed), winner in best.items():
        for tau in taus:
            reaches = winner is not None and (tau == winner or tau != taus[0])
            cost = 1.0 if tau == winner else 2.0 + tau  # joules a round
            for r in range(4):
                acc = (0.5 + 0.15 * r) if reaches else 0.5  # reaches 0.8 at round 2
                rows.append(
                    {
                        "point": point,
                        "radio.uplink_snr_db": snr,
                        "radio.uplink.bandwidth_hz": bw,
                        "algorithm.local.steps": tau,
                        "seed": seed,
                        "round": r,
                        "sim_time_s": float(r),
                        "energy_j": cost * r,
                        "test_accuracy": acc,
                    }
                )
            point += 1
    return pd.DataFrame(rows)


def test_best_tau_table_takes_the_median_and_spread_over_seeds():
    best = {
        (0, 1e6, 0): 20,
        (0, 1e6, 1): 20,
        (0, 1e6, 2): 5,  # median 20, spread 5-20
        (0, 2e7, 0): 1,
        (0, 2e7, 1): 5,
        (0, 2e7, 2): 20,  # median 5, spread 1-20
        (20, 1e6, 0): 5,
        (20, 1e6, 1): None,
        (20, 1e6, 2): 1,  # two seeds: median 3
        (20, 2e7, 0): None,
        (20, 2e7, 1): None,
        (20, 2e7, 2): None,
    }
    table = best_tau_table(tau_records(best), target=0.8)
    got = {
        (r.snr, r.bandwidth): (
            r.best_tau_median,
            r.best_tau_min,
            r.best_tau_max,
            r.seeds_reached,
            r.seeds,
        )
        for r in table.itertuples()
    }
    assert got[(0, 1e6)] == (20, 5, 20, 3, 3)
    assert got[(0, 2e7)] == (5, 1, 20, 3, 3)
    assert got[(20, 1e6)] == (3, 1, 5, 2, 3)
    assert got[(20, 2e7)][3:] == (0, 3) and np.isnan(got[(20, 2e7)][0])


def test_best_tau_heatmap_annotates_each_cell_with_its_spread():
    best = {
        (s, b, seed): t
        for (s, b, t) in [(0, 1e6, 20), (0, 2e7, 5), (20, 1e6, 5), (20, 2e7, 1)]
        for seed in (0, 1)
    }
    best[(20, 2e7, 1)] = 5
    fig = best_tau_figure(best_tau_table(tau_records(best, seeds=(0, 1)), target=0.8))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "uplink bandwidth (Hz)"
    assert ax.get_ylabel() == "uplink SNR (dB)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1M", "20M"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "20"]
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted(["20\n[20–20]", "5\n[5–5]", "5\n[5–5]", "3\n[1–5]"])
    assert ax.images[0].get_array().shape == (2, 2)
    assert "best tau" in fig.axes[1].get_ylabel()  # the colour bar


def test_sweep_over_tau_and_snr_gets_a_heatmap(sweep_dir, tmp_path):
    written = make_plots(sweep_dir, tmp_path / "plots", target=0.2)
    assert "best_tau" in written
    assert written["best_tau"].read_bytes()[:8] == PNG_MAGIC


# -- consensus distance -----------------------------------------------------------------------


def test_consensus_distance_is_plotted_when_the_records_have_it(run_dir, tmp_path):
    assert consensus_figure(run_dir) is None
    gossip = tmp_path / "gossip"
    gossip.mkdir()
    records = pd.read_parquet(run_dir / "records.parquet")
    records["consensus_distance"] = 1.0 / (1 + records["round"])
    records.to_csv(gossip / "records.csv", index=False)
    fig = consensus_figure(gossip)
    assert [ax.get_xlabel() for ax in fig.axes] == ["round", "simulated time (s)"]
    assert fig.axes[0].get_ylabel().startswith("consensus distance")
    assert all(len(ax.get_lines()) == 1 for ax in fig.axes)
    assert "consensus_distance" in make_plots(gossip, tmp_path / "plots")


# -- files, folders, command line -------------------------------------------------------------


def test_make_plots_writes_every_png(run_dir, tmp_path):
    written = make_plots(run_dir, tmp_path / "plots")
    assert sorted(written) == [
        "accuracy_vs_energy",
        "accuracy_vs_rounds",
        "accuracy_vs_time",
        "energy_by_device_class",
        "energy_split",
    ]
    for path in written.values():
        assert path.parent == tmp_path / "plots"
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_csv_results_read_like_parquet(run_dir, tmp_path):
    folder = tmp_path / "csv"
    folder.mkdir()
    for stem in ("records", "ledger"):
        pd.read_parquet(run_dir / f"{stem}.parquet").to_csv(folder / f"{stem}.csv", index=False)
    res = load_results(folder)
    assert res.records.test_accuracy.tolist() == pytest.approx(
        pd.read_parquet(run_dir / "records.parquet").test_accuracy.tolist()
    )
    assert len(make_plots(folder, tmp_path / "plots")) == 5


def test_several_run_folders_are_labelled_by_what_differs(sweep_dir):
    points = pd.read_csv(sweep_dir / "points.csv").point
    res = load_results(sweep_dir / points[0], sweep_dir / points[2])
    assert res.fields == ["algorithm.local.steps"]
    assert res.runs.group.tolist() == ["tau=1", "tau=4"]
    fig = accuracy_figure(res)
    assert len(fig.axes[0].get_lines()) == 2


def test_cli_plot_writes_only_into_results_plots(run_dir, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(run_dir, results)
    before = tree(tmp_path)
    out = flnet_cli("plot", str(results))
    assert out.returncode == 0, out.stderr
    new = sorted(set(tree(tmp_path)) - set(before))
    assert new == [
        "results/plots",
        *(
            f"results/plots/{n}.{ext}"
            for n in sorted(
                [
                    "accuracy_vs_energy",
                    "accuracy_vs_rounds",
                    "accuracy_vs_time",
                    "energy_split",
                    "energy_by_device_class",
                ]
            )
            for ext in ("csv", "png")
        ),
    ]


def test_cli_plot_of_a_sweep_to_a_chosen_folder(seed_sweep_dir, tmp_path):
    out = flnet_cli("plot", str(seed_sweep_dir), "-o", str(tmp_path / "figs"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "figs" / "accuracy_vs_energy.png").exists()
    assert not (seed_sweep_dir / "plots").exists()


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p / "missing", "no such folder; expected a flnet results folder"),
        (lambda p: p, "not a flnet results folder: expected records.parquet or records.csv"),
        (lambda p: (p / "f.txt").write_text("x") and p / "f.txt", "is a file; expected"),
        (
            lambda p: (p / "records.parquet").write_bytes(b"not parquet") and p,
            "records.parquet: cannot read it as a table",
        ),
        (
            lambda p: pd.DataFrame({"a": [1]}).to_csv(p / "records.csv") or p,
            "its records lack the columns",
        ),
        (
            lambda p: (
                pd.DataFrame(columns=["round", "sim_time_s", "energy_j", "test_accuracy"]).to_csv(
                    p / "records.csv"
                )
                or p
            ),
            "no records yet",
        ),
        (lambda p: (p / "points.csv").write_text("a,b\n1,2\n") and p, "no `point` column"),
    ],
)
def test_cli_refuses_what_is_not_results_with_exit_2(tmp_path, capsys, make, expected):
    path = make(tmp_path)
    for command in ("plot", "report"):
        assert main([command, str(path), "-o", str(tmp_path / "out")]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert expected in err and path.name in err
    assert not (tmp_path / "out").exists()


def test_cli_error_has_no_traceback(tmp_path):
    out = flnet_cli("report", str(tmp_path))
    assert out.returncode == 2
    assert "not a flnet results folder" in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr + out.stdout


def test_target_must_be_a_fraction(run_dir, tmp_path, capsys):
    assert main(["plot", str(run_dir), "-o", str(tmp_path), "--target", "90"]) == 2
    assert "fraction in (0, 1]" in capsys.readouterr().err
    with pytest.raises(ResultsError):
        make_plots(run_dir, tmp_path, target=1.5)


def test_several_folders_need_an_output(sweep_dir, capsys):
    points = pd.read_csv(sweep_dir / "points.csv").point
    assert main(["plot", str(sweep_dir / points[0]), str(sweep_dir / points[1])]) == 2
    assert "-o" in capsys.readouterr().err


def test_only_the_plots_asked_for(run_dir, tmp_path, capsys):
    assert (
        main(
            [
                "plot",
                str(run_dir),
                "-o",
                str(tmp_path / "a"),
                "--only",
                "accuracy_vs_energy",
                "--only",
                "energy_split",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "accuracy_vs_energy.csv",
        "accuracy_vs_energy.png",
        "energy_split.csv",
        "energy_split.png",
    ]
    assert main(["plot", str(run_dir), "-o", str(tmp_path / "b"), "--only", "best_tau"]) == 2
    assert "best_tau does not apply" in " ".join(capsys.readouterr().err.split())
    assert main(["plot", str(run_dir), "-o", str(tmp_path / "b"), "--only", "acc"]) == 2
    assert "no plot named acc" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_records_dataframes_plot_like_folders(run_dir, sweep_dir):
    run = accuracy_figure(pd.read_parquet(run_dir / "records.parquet"))
    assert [len(ax.get_lines()) for ax in run.axes] == [1, 1, 1]
    sweep = accuracy_figure(pd.read_parquet(sweep_dir / "records.parquet"), x="energy_j")
    assert [len(ax.get_lines()) for ax in sweep.axes] == [4, 4, 4]
    assert legend_texts(sweep) == legend_texts(accuracy_figure(sweep_dir, x="energy_j"))


def test_a_killed_runs_journal_stands_in_for_its_ledger(run_dir, tmp_path):
    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(run_dir / "records.parquet", killed)
    pd.read_parquet(run_dir / "ledger.parquet").to_csv(killed / "ledger-journal.csv", index=False)
    fig = energy_by_class_figure(killed)
    total = sum(bar.get_height() for c in fig.axes[0].containers for bar in c)
    assert total == pytest.approx(pd.read_parquet(run_dir / "ledger.parquet").energy_j.sum())


def test_d2d_sent_and_received_both_count_as_d2d():
    rows = [
        {
            "node": k,
            "kind": "compute",
            "start_s": 0.0,
            "end_s": 1.0,
            "energy_j": 0.5,
            "flops": 10.0 * (k + 1),
            "outcome": "ok",
        }
        for k in range(3)
    ]
    rows += [
        {
            "node": 0,
            "kind": "d2d",
            "start_s": 1.0,
            "end_s": 2.0,
            "energy_j": 2.0,
            "flops": 0.0,
            "outcome": "ok",
        },
        {
            "node": 2,
            "kind": "d2d_rx",
            "start_s": 1.0,
            "end_s": 2.0,
            "energy_j": 1.0,
            "flops": 0.0,
            "outcome": "ok",
        },
    ]
    from flnet.plot import _class_energy

    table = _class_energy(pd.DataFrame(rows))
    assert table.loc["slow third", "energy_d2d_j"] == 2.0
    assert table.loc["fast third", "energy_d2d_j"] == 1.0
    assert "other" not in table


def test_accuracy_against_delivered_results(run_dir):
    records = pd.read_parquet(run_dir / "records.parquet")
    fig = accuracy_figure(run_dir, x="events")
    assert fig.axes[0].get_xlabel() == "client results delivered"
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_xdata(), records.events)
    with pytest.raises(ResultsError, match="x must be one of"):
        accuracy_figure(records.drop(columns="events"), x="events")


def test_plot_and_report_read_files_only():
    """They depend on the results folder format, never on the simulator: neither torch nor
    SimPy is loaded, nor the scenario schema (pydantic)."""
    code = (
        "import sys, flnet.plot, flnet.report; print('torch' in sys.modules, "
        "'simpy' in sys.modules, 'pydantic' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert out.stdout.split() == ["False", "False", "False"]
