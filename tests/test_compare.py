"""Any runs side by side: runs of six shipped scenarios (central, gossip, asynchronous, another
model, another data set) and a sweep, plotted, reported and analysed together; series grouped
over seeds and named by what tells them apart; costs to target read between evaluations, by hand;
best tau decided seed by seed, with sparse evaluation and an edge-of-grid winner flagged."""

import math
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_report import browser, column, images_loaded, open_report  # noqa: F401 (a fixture)

import flnet
from flnet.analysis import TAU, best_tau, to_target
from flnet.checkpoint import trajectory_fields
from flnet.cli import main
from flnet.comparison import compare
from flnet.plot import (
    ResultsError,
    accuracy_figure,
    figure_tables,
    load_results,
    name_series,
    time_unit,
)
from flnet.report import write_report
from flnet.run_folders import identity
from flnet.scenario import Scenario

TINY = ["run.rounds=3", "run.eval_every=1", "clients.count=10", "device=cpu"]
SCENARIOS = {  # folder name: (scenario, its own overrides)
    "quickstart": ("quickstart", ["algorithm.cohort.clients_per_round=3"]),
    "quickstart-seed1": ("quickstart", ["algorithm.cohort.clients_per_round=3", "seed=1"]),
    "noniid": ("noniid", ["algorithm.cohort.clients_per_round=3"]),  # a CNN, zipf partition
    "scaffold": ("scaffold", ["algorithm.cohort.clients_per_round=3"]),
    "dpsgd": ("dpsgd", []),  # gossip
    "fedbuff": ("fedbuff", []),  # asynchronous
    "million": (  # another data set (synthetic) and model (logistic)
        "million",
        ["algorithm.cohort.clients_per_round=3", "data.eval_clients=10"],
    ),
}
ALGORITHMS = {
    "quickstart": "fedavg",
    "quickstart-seed1": "fedavg",
    "noniid": "fedavg",
    "scaffold": "scaffold",
    "dpsgd": "dpsgd",
    "fedbuff": "fedbuff",
    "million": "fedavg",
}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """{name: run folder} for every SCENARIOS entry, a few rounds each."""
    root = tmp_path_factory.mktemp("zoo")
    for name, (scenario, extra) in SCENARIOS.items():
        flnet.run(
            f"scenarios/{scenario}.yaml", overrides=[*TINY, *extra, f"output.dir={root / name}"]
        )
    return {name: root / name for name in SCENARIOS}


def folders(zoo, seed_sweep_dir):
    return [*map(str, zoo.values()), str(seed_sweep_dir)]


def test_any_runs_form_series_named_by_what_differs(zoo, seed_sweep_dir):
    res = load_results(*folders(zoo, seed_sweep_dir))
    group = res.runs.set_index("source").group
    for name, algorithm in ALGORITHMS.items():
        assert group[str(zoo[name])].split(",")[0] == algorithm  # the algorithm first
    # seeds 0 and 1 of the quickstart are one series; the other algorithms need nothing more
    assert group[str(zoo["quickstart"])] == group[str(zoo["quickstart-seed1"])]
    assert group[str(zoo["dpsgd"])] == "dpsgd" and group[str(zoo["fedbuff"])] == "fedbuff"
    assert group[str(zoo["scaffold"])] == "scaffold"
    # the three FedAvg scenarios and the sweep's taus are told apart, by differing fields only
    series = list(dict.fromkeys(res.runs.group))
    assert len(series) == 8  # 5 scenarios' series + the sweep's tau=1 and tau=4, one FedAvg
    assert len(set(series)) == len(series)
    for label in series:
        assert "nan" not in label and "None" not in label
        for part in label.split(", ")[1:]:
            name, _, value = part.partition("=")
            fields = [TAU] if name == "tau" else [f for f in res.fields if name in f]
            assert value and fields and set(fields) <= set(res.fields), label
    sweep = res.runs[res.runs.source == str(seed_sweep_dir)]
    assert sweep.groupby("group").size().tolist() == [2, 2]  # two seeds each


def test_plot_report_and_analyze_take_them_all(zoo, seed_sweep_dir, tmp_path, capsys):
    given = folders(zoo, seed_sweep_dir)
    assert main(["plot", *given, "-o", str(tmp_path / "plots"), "--format", "svg"]) == 0
    written = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert "accuracy_vs_time.svg" in written and "accuracy_vs_time.csv" in written
    assert "consensus_distance.svg" in written  # the gossip run has one
    table = pd.read_csv(tmp_path / "plots" / "accuracy_vs_rounds.csv")
    assert {"series", "seeds", "y", "round", "median", "min", "max"} <= set(table.columns)
    assert main(["report", *given, "-o", str(tmp_path / "report.html")]) == 0
    html = (tmp_path / "report.html").read_text()
    assert "dpsgd" in html and "fedbuff" in html and "scaffold" in html
    assert main(["analyze", *given, "--target", "0.12", "--out", str(tmp_path / "an")]) == 0
    out = capsys.readouterr().out
    assert "dpsgd" in out and "fedbuff" in out
    assert (tmp_path / "an" / "series.csv").exists()
    assert "Traceback" not in out


def test_the_legend_never_takes_the_axes(zoo, seed_sweep_dir):
    fig = accuracy_figure(load_results(*folders(zoo, seed_sweep_dir)))
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    height = fig.bbox.height
    for ax in fig.axes:
        extent = ax.get_window_extent()
        assert extent.height > 0.3 * height and extent.width > 0.15 * fig.bbox.width
        assert box.y1 <= extent.y0  # the legend lies below every panel
    assert len(legend.get_texts()) == 8


def test_labels_by_hand(zoo, tmp_path):
    mine = tmp_path / "mine"
    shutil.copytree(zoo["scaffold"], mine)
    text = (mine / "scenario.yaml").read_text()
    assert "\nlabel: null\n" in text  # every run's scenario.yaml says it has none
    (mine / "scenario.yaml").write_text(text.replace("\nlabel: null\n", "\nlabel: Ours\n"))
    res = load_results(zoo["quickstart"], mine, zoo["dpsgd"], labels={"Gossip": str(zoo["dpsgd"])})
    assert res.runs.group.tolist() == ["fedavg", "Ours", "Gossip"]
    by = load_results(zoo["quickstart"], zoo["noniid"], zoo["scaffold"], by=["algorithm.name"])
    assert by.runs.group.tolist() == ["name=fedavg", "name=fedavg", "name=scaffold"]
    with pytest.raises(ResultsError, match="none of the folders given"):
        load_results(zoo["quickstart"], zoo["dpsgd"], labels={"X": str(tmp_path)})
    with pytest.raises(ResultsError, match="no run has this field"):
        load_results(zoo["quickstart"], zoo["dpsgd"], by=["algorithm.nope"])


def test_a_scenario_label_names_its_series_and_is_not_its_identity(zoo, tmp_path, capsys):
    """`label:` in a scenario run by `flnet run` names its series in flnet.compare and
    `flnet plot`; --label overrides it; it is presentation, so a sweep point run under another
    label is found finished (not run again) and a checkpoint resumes whatever its label."""
    scenario = tmp_path / "ours.yaml"
    scenario.write_text(Path("scenarios/quickstart.yaml").read_text() + "label: Ours\n")
    ours = tmp_path / "ours"
    sets = [a for o in [*TINY, "algorithm.cohort.clients_per_round=3"] for a in ("--set", o)]
    assert main(["run", str(scenario), *sets, "--out", str(ours), "-q"]) == 0
    cmp = flnet.compare(zoo["scaffold"], ours, zoo["quickstart"])
    assert cmp.series.series.tolist() == ["scaffold", "Ours", "fedavg"]
    renamed = flnet.compare(zoo["scaffold"], ours, labels={"Mine": str(ours)})
    assert renamed.series.series.tolist() == ["scaffold", "Mine"]
    capsys.readouterr()
    plots = tmp_path / "plots"
    given = [str(zoo["scaffold"]), str(ours)]
    assert main(["plot", *given, "-o", str(plots), "--only", "accuracy_vs_rounds"]) == 0
    assert (
        main(
            [
                "plot",
                *given,
                "--label",
                f"Mine={ours}",
                "-o",
                str(tmp_path / "mine"),
                "--only",
                "accuracy_vs_rounds",
            ]
        )
        == 0
    )
    shown = {p.name: pd.read_csv(p) for p in plots.glob("*.csv")}
    assert shown and all("Ours" in set(t.series) for t in shown.values())
    mine = [pd.read_csv(p) for p in (tmp_path / "mine").glob("*.csv")]
    assert mine and all({"Mine", "scaffold"} == set(t.series) for t in mine)

    base = flnet.load_scenario("scenarios/quickstart.yaml", TINY).model_dump(mode="json")
    unlabelled = {k: v for k, v in base.items() if k != "label"}  # as written before the field
    assert identity({**base, "label": "A"}) == identity(base) == identity(unlabelled)
    assert identity({**base, "seed": 1}) != identity(base)  # the hash still sees the rest
    assert trajectory_fields(Scenario.model_validate({**base, "label": "A"})) == trajectory_fields(
        Scenario.model_validate(base)
    )
    out = tmp_path / "sweep"
    points, _ = flnet.sweep({**base, "label": "A"}, {"seed": [0]}, out_dir=out)
    written = (out / points.point.iloc[0] / "summary.json").stat().st_mtime_ns
    again, _ = flnet.sweep({**base, "label": "B"}, {"seed": [0]}, out_dir=out)
    assert again.point.tolist() == points.point.tolist()
    assert (out / points.point.iloc[0] / "summary.json").stat().st_mtime_ns == written


def test_runs_without_a_common_metric_are_named(zoo, tmp_path, capsys):
    bare = tmp_path / "bare"
    shutil.copytree(zoo["fedbuff"], bare)
    records = pd.read_parquet(bare / "records.parquet")
    records.assign(client_accuracy_worst=math.nan).to_parquet(bare / "records.parquet")
    with pytest.raises(ResultsError, match=f"never evaluated it: fedbuff.*{bare}"):
        compare(zoo["quickstart"], bare, metric="client_accuracy_worst")
    given = [str(zoo["quickstart"]), str(bare)]
    assert (
        main(["analyze", *given, "--metric", "client_accuracy_worst", "--out", str(tmp_path)]) == 2
    )
    err = capsys.readouterr().err
    assert "never evaluated" in err and "Traceback" not in err


def test_compare_returns_the_table_behind_each_figure(zoo):
    cmp = flnet.compare(zoo["quickstart"], zoo["quickstart-seed1"], zoo["scaffold"], target=0.1)
    assert cmp.series.series.tolist() == ["fedavg", "scaffold"]
    assert cmp.series.seeds.tolist() == [2, 1]
    tables = cmp.figures()
    acc = tables["accuracy_vs_rounds"]
    fedavg = acc[(acc.series == "fedavg") & (acc.y == "test_accuracy")]
    runs = [pd.read_parquet(zoo[n] / "records.parquet") for n in ("quickstart", "quickstart-seed1")]
    both = np.stack([r.test_accuracy.to_numpy() for r in runs])
    np.testing.assert_allclose(fedavg["median"], np.median(both, axis=0))
    np.testing.assert_allclose(fedavg["min"], both.min(axis=0))
    assert set(figure_tables(cmp.results)) == set(tables)


def test_time_axis_unit_follows_the_range():
    assert time_unit(90) == ("s", 1.0)
    assert time_unit(600) == ("min", 60.0)
    assert time_unit(12_000) == ("h", 3600.0)
    assert time_unit(5 * 86400) == ("days", 86400.0)


# -- to target, by hand ------------------------------------------------------------------------


def curve(point, seed, tau, accuracy, joules_per_round, every=1):
    rounds = np.arange(0, len(accuracy) * every, every)
    return pd.DataFrame(
        {
            "point": point,
            "seed": seed,
            TAU: tau,
            "round": rounds,
            "sim_time_s": 2.0 * rounds,
            "energy_j": joules_per_round * rounds,
            "bits_up": 100.0 * rounds,
            "test_accuracy": accuracy,
        }
    )


def test_to_target_is_read_between_the_evaluations_around_it():
    rec = curve("a", 0, 1, [0.1, 0.5, 0.9], 3.0, every=10)  # rounds 0, 10, 20
    run = to_target(rec, 0.7, interpolate=True).iloc[0]
    # 0.7 lies halfway from 0.5 (round 10) to 0.9 (round 20): joules 30 + 0.5 * (60 - 30)
    assert run.joules_to_target == pytest.approx(45.0)
    assert run.seconds_to_target == pytest.approx(30.0)
    assert run.bits_to_target == pytest.approx(1500.0)
    assert run.rounds_to_target == 20  # the evaluation that reached it
    assert (run.joules_to_target_low, run.joules_to_target_high) == (30.0, 60.0)
    assert run.evaluations_apart == 10
    assert to_target(rec, 0.7).joules_to_target.item() == 60.0  # without: the evaluation's


def per_run(rows, every=1):
    """rows: (seed, tau, accuracy per evaluation, joules per round) -> to_target's table."""
    rec = pd.concat(
        [curve(f"{s}-{t}", s, t, acc, j, every) for s, t, acc, j in rows], ignore_index=True
    )
    return to_target(rec, 0.8, interpolate=True)


def test_a_ranking_on_sparse_evaluation_is_refused_with_its_fix():
    # evaluated every 10 rounds, both taus cross 0.8 between rounds 10 and 20: their joule
    # brackets [10, 20] and [12, 24] overlap, so which is cheaper is not measured
    rows = [(0, 1, [0.1, 0.5, 0.9], 1.0), (0, 5, [0.1, 0.3, 0.95], 1.2)]
    _, cells = best_tau(per_run(rows, every=10), "joules", cell=[])
    cell = cells.iloc[0]
    assert cell.too_sparse and not cell.clear
    assert "evaluation too sparse" in cell.verdict and "run.eval_every=1" in cell.verdict
    # the same runs evaluated every round are ranked: consecutive rounds are as fine as it gets
    dense = [(0, 1, [0.1, 0.5, 0.9], 1.0), (0, 5, [0.1, 0.3, 0.95], 1.2)]
    _, cells = best_tau(per_run(dense, every=1), "joules", cell=[])
    assert not cells.too_sparse.item()


def test_a_winner_at_the_edge_of_the_grid_is_flagged():
    fast = [0.1, 0.9]  # reaches 0.8 in round 1
    edge = [(s, t, fast, j) for s in (0, 1) for t, j in ((1, 3.0), (5, 2.0), (20, 1.0))]
    _, cells = best_tau(per_run(edge), "joules", cell=[])
    assert cells.best_tau.item() == 20 and cells.edge.item() and cells.clear.item()
    assert "at the edge of the grid {1, 5, 20}" in cells.verdict.item()
    inside = [(s, t, fast, j) for s in (0, 1) for t, j in ((1, 3.0), (5, 1.0), (20, 2.0))]
    _, cells = best_tau(per_run(inside), "joules", cell=[])
    assert cells.best_tau.item() == 5 and not cells.edge.item()
    assert cells.verdict.item() == "tau=5 in every seed (2 of 2)"


def test_the_verdict_pairs_seeds():
    # tau 1 beats tau 5 on every seed, though seeds differ widely: tau 5's median (32) lies
    # inside tau 1's range over seeds (10-50), which an unpaired comparison called unclear
    fast = [0.1, 0.9]
    rows = [(s, 1, fast, j) for s, j in enumerate([10.0, 30.0, 50.0])]
    rows += [(s, 5, fast, j) for s, j in enumerate([12.0, 32.0, 52.0])]
    _, cells = best_tau(per_run(rows), "joules", cell=[])
    assert cells.clear.item() and cells.best_tau.item() == 1
    # seed 1 prefers tau 5: no clear winner, whatever the medians say
    rows = [(s, 1, fast, j) for s, j in enumerate([10.0, 30.0, 50.0])]
    rows += [(s, 5, fast, j) for s, j in enumerate([12.0, 29.0, 52.0])]
    _, cells = best_tau(per_run(rows), "joules", cell=[])
    assert not cells.clear.item()
    assert cells.verdict.item().startswith("no clear winner: tau=1 (seed 0, 2); tau=5 (seed 1)")


def test_the_comparison_report_in_a_browser(browser, zoo, seed_sweep_dir, tmp_path):  # noqa: F811
    path = write_report(load_results(*folders(zoo, seed_sweep_dir)), tmp_path / "report.html")
    open_report(browser, path)
    loaded = images_loaded(browser)
    assert len(loaded) == 6 and all(ok and width > 0 for ok, width in loaded)  # + consensus
    series = column(browser, "groups", "group")
    assert series[:2] == ["fedavg, model=mlp, tau=10", "fedavg, model=cnn_dfl_mnist"]
    assert {"scaffold", "dpsgd", "fedbuff"} <= set(series) and len(series) == 8
    # the summary comes first: before the figures and the per-run tables
    headings = [h.text for h in browser.find_elements("tag name", "h2")]
    assert headings[0].startswith("Summary") and headings.index("Figures") < headings.index(
        "Per run: final figures"
    )
    assert "Best tau" in headings  # the sweep varies tau
    browser.save_screenshot(str(tmp_path / "compare.png"))


# -- the docs' walkthroughs, a few rounds each -----------------------------------------------


def walkthrough_commands(page, heading):
    """The `flnet ...` lines of the first code block after `heading` in the docs page."""
    text = (Path(__file__).resolve().parent.parent / "docs" / page).read_text()
    block = re.search(r"```\w*\n(.*?)```", text[text.index(heading) :], re.S).group(1)
    return [
        shlex.split(line.split("#")[0])[1:]
        for line in block.splitlines()
        if line.startswith("flnet ")
    ]


@pytest.mark.parametrize(
    "page, heading, written",
    [
        (
            "how-to/plots-and-reports.md",
            "## Compare two algorithms",
            ["compare/accuracy_vs_time.pdf", "compare/report.html", "compare/series.csv"],
        ),
        ("how-to/analyze.md", "## Choose tau for minimum energy", ["tau/best_tau.csv"]),
    ],
)
def test_docs_walkthrough(page, heading, written, tmp_path, capsys):
    for args in walkthrough_commands(page, heading):
        args = [a.replace("runs/", f"{tmp_path}/runs/") for a in args]
        if args[0] in ("run", "sweep"):
            args += ["-q", "--set", "run.rounds=3", "--set", "clients.count=10"]
        assert main(args) == 0, args
    for path in written:
        assert (tmp_path / "runs" / path).exists(), path
    out = capsys.readouterr().out
    assert "series over seeds" in out
    if "tau" in heading:
        assert "best tau per cell" in out and "tau=" in out


def test_any_local_work_field_is_chosen_among():
    # a sweep over local epochs (tau unswept): epochs 2 reaches 0.8 for fewer joules per seed
    rec = pd.concat(
        [
            curve(f"{s}-{e}", s, 10, [0.1, 0.5, 0.9], j, every=1).assign(
                **{"algorithm.local.epochs": e}
            )
            for s in (0, 1)
            for e, j in ((1, 2.0), (2, 1.0), (4, 3.0))
        ],
        ignore_index=True,
    )
    cmp = compare(rec, target=0.8)
    assert cmp.choose == "algorithm.local.epochs"
    cell = cmp.per_cell.iloc[0]
    assert cell.best_tau == 2 and cell.clear and not cell.edge
    assert cell.verdict == "epochs=2 in every seed (2 of 2)"


def test_one_cell_is_no_heat_map(tmp_path):
    from conftest import small_base

    out = tmp_path / "sweep"
    flnet.sweep(
        small_base("radio.mode=direct", "run.rounds=2"),
        {"algorithm.local.steps": [1, 4], "radio.uplink_snr_db": [10]},
        out_dir=out,
    )
    assert "best_tau" not in figure_tables(out)


def test_a_field_that_does_not_apply_gives_way_to_one_that_does(zoo, tmp_path):
    # the quickstart in local epochs: its local steps (tau) are null, so tau cannot name it
    epochs = tmp_path / "epochs"
    same = [
        "data.partition={kind: iid}",
        "algorithm.local.batch_size=32",
        "algorithm.cohort.clients_per_round=3",
    ]
    flnet.run("scenarios/epochs.yaml", overrides=[*TINY, *same, f"output.dir={epochs}"])
    res = load_results(zoo["quickstart"], zoo["scaffold"], epochs)
    assert res.runs.group.tolist() == ["fedavg, tau=10", "scaffold", "fedavg, epochs=2"]


def test_a_label_shared_by_a_sweeps_points_keeps_them_apart():
    """A labelled sweep's points (one label, several taus) stay separate series: the label,
    then the field that tells them apart; seeds of one point still form one series."""
    base = {"label": "Ours", "algorithm.name": "fedavg", "algorithm.local.steps": 1}
    configs = [
        {**base, "seed": 0},
        {**base, "seed": 1},
        {**base, "algorithm.local.steps": 5, "seed": 0},
        {"label": "Theirs", "algorithm.name": "fedavg", "algorithm.local.steps": 1, "seed": 0},
    ]
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "seed": [0, 1, 0, 0]})
    name_series(runs, configs)
    groups = list(runs["group"])
    assert groups[0] == groups[1]
    assert groups[0].startswith("Ours, ") and groups[2].startswith("Ours, ")
    assert groups[0] != groups[2]
    assert groups[3] == "Theirs"


def test_analyze_chooses_tau_f_and_p_together_the_argmin_of_the_per_run_table(tmp_path, capsys):
    """`flnet analyze --choose tau,f,p` on a small sweep: the triple it picks is, seed by seed
    and in the median over seeds, the one with the fewest joules to target in its own per-run
    table (not reached: infinitely many)."""
    from conftest import small_base

    fields = [TAU, "clients.cpu_hz", "radio.tx_power_dbm"]
    out = tmp_path / "sweep"
    grid = {TAU: [1, 4], "clients.cpu_hz": [2e8, 1e9], "radio.tx_power_dbm": [0.0, 20.0]}
    flnet.sweep(small_base(), {**grid, "seed": [0, 1]}, out_dir=out)
    assert main(["analyze", str(out), "--target", "0.15", "--choose", ",".join(fields)]) == 0
    assert "best (tau, cpu_hz, tx_power_dbm) per cell" in capsys.readouterr().out
    per_run = pd.read_csv(out / "to_target.csv")
    best = pd.read_csv(out / "best_tau.csv").iloc[0]
    per_seed = pd.read_csv(out / "best_tau_per_seed.csv")
    assert len(per_run) == 16 and per_run.reached.any()
    cost = per_run.joules_to_target.where(per_run.reached, math.inf)
    by_hand = per_run.assign(cost=cost)
    for seed, runs in by_hand.groupby("seed"):
        argmin = runs.sort_values("cost", kind="stable").iloc[0]
        mine = per_seed[per_seed.seed == seed].iloc[0]
        assert [mine[f"best_{f}"] for f in fields] == [argmin[f] for f in fields]
    medians = by_hand.groupby(fields).cost.median()
    assert tuple(best[f"best_{f}"] for f in fields) == medians.idxmin()
    assert best.joules_to_target_median == pytest.approx(medians.min())
    assert best.best_tau == "tau={:g}, cpu_hz={:g}, tx_power_dbm={:g}".format(*medians.idxmin())
