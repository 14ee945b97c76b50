"""`flnet reproduce PAPER --smoke` writes the paper's report with every claim row, each row
traceable (scenario, seeds, command); the papers' scenario files are valid scenarios; a claim's
verdict is decided seed by seed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from flnet.cli import main
from flnet.papers import PAPERS, command
from flnet.papers.report import Claim, PaperReport, checked, claims_table, publish, render_markdown
from flnet.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("paper", list(PAPERS))
def test_the_smoke_reproduction_writes_a_report_with_every_claim(paper, tmp_path):
    assert main(["reproduce", paper, "--smoke", "-o", str(tmp_path)]) == 0
    out = tmp_path / paper
    claims = pd.read_csv(out / "claims.csv")
    assert len(claims) >= 3 and claims.id.is_unique
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert f"flnet reproduce {paper} --smoke" in md and "smoke run" in md
    for row in claims.itertuples():
        assert (ROOT / row.scenario.split()[0]).exists()
        assert str(row.seeds) == "0"
        if row.holds == "not run here":  # a row another command produces names it
            assert row.command.startswith("flnet ") and "reproduce" not in row.command
            continue
        assert row.scenario.startswith(f"scenarios/papers/{paper}/")
        assert row.command == f"flnet reproduce {paper} --smoke"
        assert row.holds.startswith(("holds", "does not hold"))
        assert f"| {row.id} |" in md  # one markdown row per claim
        assert f'data-col="id">{row.id}</td>' in html
    for png in claims.figure.dropna().unique():
        assert (out / f"{png}.png").exists()


def test_every_paper_scenario_is_a_valid_scenario():
    files = sorted((ROOT / "scenarios" / "papers").rglob("*.yaml"))
    assert {f.parent.name for f in files} >= set(PAPERS)
    for f in files:
        load_scenario(f)


def test_a_claim_is_decided_seed_by_seed_and_says_why_only_where_it_fails():
    kw = {"paper": "p", "ours": "o", "scenario": "s.yaml", "seeds": [0, 1, 2]}
    held = checked("C1", "a", holds=pd.Series([True, True, True]), why_not="scale", **kw)
    partly = checked("C2", "b", holds=pd.Series([True, False, None]), why_not="scale", **kw)
    none = checked("C3", "c", holds=pd.Series([False, False, False]), why_not="erratum", **kw)
    assert (held.holds, held.why) == ("holds", "")
    assert (partly.holds, partly.why) == ("holds in 1 of 3 seeds", "scale")
    # holds wherever it is decided: the why says so, and why the rest is undecided
    gap = checked("C4", "d", holds=pd.Series([True, None, True]), why_not="scale", **kw)
    assert gap.holds == "holds in 2 of 3 seeds"
    assert gap.why == "holds in every seed it decides; 1 undecided: a run it needs did not complete"
    assert (none.holds, none.why) == ("does not hold", "erratum")
    report = PaperReport("p", "T", "ref", command("p", False, 3), "setup", [held, partly, none])
    table = claims_table(report).set_index("id")
    assert table.loc["C2", "holds"] == "holds in 1 of 3 seeds, 1 undecided"
    assert table.loc["C1", "seeds"] == "0, 1, 2"
    assert (table.command == "flnet reproduce p").all()
    md = render_markdown(report)
    assert "1 of 3 claims hold in every seed, 1 in some seeds, 1 in none." in md
    elsewhere = Claim("C9", "e", "p", "o", "not run here", "not run here", "x.yaml", [0])
    report.claims.append(elsewhere)
    assert "1 in none. 1 more not run by this command." in render_markdown(report)


def test_the_command_names_what_differs_from_the_default():
    assert command("oledfl", False, 3) == "flnet reproduce oledfl"
    assert command("oledfl", False, 5) == "flnet reproduce oledfl --seeds 5"
    assert command("oledfl", True, 1) == "flnet reproduce oledfl --smoke"


def test_publish_puts_the_figures_beside_the_page_and_rewrites_their_links(tmp_path):
    report = tmp_path / "runs" / "oledfl"
    report.mkdir(parents=True)
    (report / "report.md").write_text("# T\n\n![acc](accuracy.png)\n\nsee accuracy.png\n")
    (report / "accuracy.png").write_bytes(b"png")
    page = publish(report, tmp_path / "docs")
    assert page == tmp_path / "docs" / "oledfl.md"
    assert page.read_text() == "# T\n\n![acc](oledfl/accuracy.png)\n\nsee accuracy.png\n"
    assert (tmp_path / "docs" / "oledfl" / "accuracy.png").read_bytes() == b"png"


WHEEL_CHECK = """
import importlib, json, pathlib, re
import flnet
from flnet.papers import PAPERS, sources

studies = set()
for paper, module in PAPERS.items():
    text = pathlib.Path(importlib.import_module(module).__file__).read_text()
    studies |= set(re.findall(r'study[(]"(\\w+)"[)]', text))
    for name in ("cpu", "paper"):
        sources.scenario_data(paper, name)  # read as flnet run reads it
found = {
    "flnet": flnet.__file__,
    "root": str(sources.ROOT),
    "shown": sources.shown_path(sources.scenario_path("dfl", "cpu")),
    "studies": {s: sources.study(s).__file__ for s in sorted(studies)},
}
print(json.dumps(found))
"""


def test_an_installed_wheel_carries_the_papers_scenarios_and_studies(tmp_path):
    """`flnet reproduce` reads scenarios/papers/ and analysis/, which sit beside the package in
    a checkout. A wheel built from the sdist's files (MANIFEST.in) and installed into a folder
    of its own, read from outside any checkout, finds every paper's scenarios and studies in
    its copy, and shows their paths as in a checkout."""
    pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for part in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / part, src / part)
    for part in ("flnet", "analysis", "scenarios/papers"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    wheels, site = tmp_path / "dist", tmp_path / "site"
    options = ["--no-deps", "--no-index", "--no-build-isolation"]
    subprocess.run([*pip, "wheel", *options, "-w", wheels, src], check=True, cwd=tmp_path)
    [wheel] = wheels.glob("flnet-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", site, wheel], check=True
    )
    shutil.rmtree(src)  # no checkout left to read from
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", WHEEL_CHECK], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    shipped = site / "flnet" / "papers" / "shipped"
    assert found["flnet"] == str(site / "flnet" / "__init__.py")
    assert found["root"] == str(shipped)
    assert found["shown"] == "scenarios/papers/dfl/cpu.yaml"
    assert set(found["studies"]) == {
        "block_cyclic_study",
        "delta_sgd_study",
        "gossip_study",
        "central_study",
    }
    for name, path in found["studies"].items():
        assert path == str(shipped / "analysis" / f"{name}.py")
