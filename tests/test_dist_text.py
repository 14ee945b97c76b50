"""A per-client distribution named whole in results labels (flnet.dist_text): its shapes are
`flnet.dists`' own, its text is checked by hand, and `flnet analyze` on a sweep and on run
folders whose varied field is a distribution names the field and its parameters (it used to
say `value=1000000000` and `median=1000000000`, and `--choose` of it raised a traceback)."""

import typing

import pandas as pd
import pytest
from conftest import SMALL, small_base

import flnet
from flnet import dist_text, dists
from flnet.cli import main

LOGNORMAL = {"kind": "lognormal", "median": 1.0e9, "sigma": 0.5}


def test_the_shapes_are_the_schemas():
    for kind, model in dists._KINDS.items():
        fields = {f: info for f, info in model.model_fields.items() if f != "kind"}
        required = tuple(f for f, info in fields.items() if info.is_required())
        optional = tuple(f for f, info in fields.items() if not info.is_required())
        assert dist_text.SHAPES[kind] == (required, optional), kind
        assert typing.get_args(model.model_fields["kind"].annotation) == (kind,)
    assert set(dist_text.SHAPES) == set(dists._KINDS)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (LOGNORMAL, "lognormal(median=1e+09, sigma=0.5)"),
        ('{"kind": "uniform", "low": 500000000.0, "high": 2e9}', "uniform(low=5e+08, high=2e+09)"),
        ({"kind": "normal", "mean": 20.0, "std": 2.5}, "normal(mean=20, std=2.5)"),
        ({"kind": "choice", "values": [1, 2.5], "weights": None}, "choice(values=[1, 2.5])"),
        (
            {"kind": "choice", "values": [1e9, 2e9], "weights": [0.25, 0.75]},
            "choice(values=[1e+09, 2e+09], weights=[0.25, 0.75])",
        ),
        ({"kind": "per_client", "values": list(range(10))}, "per_client(values=[10 values])"),
        ({"kind": "constant", "value": 2e9}, 2e9),
        ('{"kind": "constant", "value": 3.0}', 3.0),
        # not distributions: left as they are
        ({"kind": "uniform"}, {"kind": "uniform"}),
        ({"kind": "dirichlet", "alpha": 0.5}, {"kind": "dirichlet", "alpha": 0.5}),
        ({**LOGNORMAL, "extra": 1}, {**LOGNORMAL, "extra": 1}),
        ("{not json", "{not json"),
        (5.0, 5.0),
    ],
)
def test_a_distribution_by_hand(value, shown):
    assert dist_text.readable(value) == shown


def test_analyze_names_a_swept_distribution_by_its_field_and_parameters(tmp_path, capsys):
    out = tmp_path / "sweep"
    grid = {"clients.cpu_hz": [LOGNORMAL, 1e9], "seed": [0, 1]}
    flnet.sweep(small_base(), grid, out_dir=out)
    assert main(["analyze", str(out), "--target", "0.15", "--choose", "clients.cpu_hz"]) == 0
    said = capsys.readouterr().out
    assert "cpu_hz=lognormal(median=1e+09, sigma=0.5), seed 0" in said
    assert "cpu_hz=1000000000, seed 1" in said
    assert "best clients.cpu_hz per cell" in said
    assert '"kind"' not in said  # no JSON text, in the labels nor the Pareto front
    per_run = pd.read_csv(out / "to_target.csv")
    assert set(per_run.series) == {"cpu_hz=lognormal(median=1e+09, sigma=0.5)", "cpu_hz=1000000000"}
    best = pd.read_csv(out / "best_tau.csv").iloc[0]
    assert best.best_tau in set(per_run.series)


def test_analyze_names_run_folders_apart_by_the_whole_distribution(tmp_path, capsys):
    for name, cpu_hz in (("constant", "2e9"), ("spread", str(LOGNORMAL))):
        flnet.run(
            "scenarios/quickstart.yaml",
            overrides=[*SMALL, f"clients.cpu_hz={cpu_hz}", f"output.dir={tmp_path / name}"],
        )
    folders = [str(tmp_path / "constant"), str(tmp_path / "spread")]
    args = ["--out", str(tmp_path / "tables"), "--choose", "clients.cpu_hz"]
    assert main(["analyze", *folders, *args]) == 0
    said = capsys.readouterr().out
    assert "cpu_hz=2000000000" in said and "cpu_hz=lognormal(median=1e+09, sigma=0.5)" in said
    assert "value=" not in said and "median=1000000000" not in said
    assert "best clients.cpu_hz per cell" in said  # a constant and a lognormal: they sort
