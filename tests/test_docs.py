"""The documentation site: its generated references cover the schema and the parser, every code
block of its tutorials and how-to guides runs as printed, and `mkdocs build --strict` passes
(skipped without MkDocs, except under CI=true, where a skip fails)."""

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import get_args, get_origin

import pytest

from flnet.cli import main, parser
from flnet.scenario import Scenario

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def _load_hook():
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _load_hook()


def _sections(page: str) -> dict[str, dict]:
    """anchor -> {"at": [dotted paths], "fields": [field names]} of a scenario reference page."""
    sections: dict[str, dict] = {}
    current: dict = {}
    for line in page.splitlines():
        heading = re.match(r"#{2,3} .*\{#([\w-]+)\}$", line)
        if heading:
            current = sections.setdefault(heading[1], {"at": [], "fields": []})
        elif line.startswith("**At:**"):
            current["at"] = re.findall(r"`([^`]+)`", line)
        else:
            row = re.match(r"\| `(\w+)` \|", line)
            if row and current is not None:
                current["fields"].append(row[1])
    return sections


@pytest.fixture(scope="module")
def scenario_page():
    return hook.scenario_page()


def test_scenario_reference_lists_every_field_of_the_schema(scenario_page):
    schema = json.loads((REPO / "scenario.schema.json").read_text())
    sections = _sections(scenario_page)
    expected = {"scenario": list(schema["properties"])} | {
        name.lower(): list(d.get("properties", {})) for name, d in schema["$defs"].items()
    }
    listed = {anchor: sections.get(anchor, {}).get("fields") for anchor in expected}
    assert listed == expected


def _models_in(annotation, suffix=""):
    """(model class, path suffix) for each model an annotation holds: unions give each member,
    a list adds `[]` (so ``list[DeviceClass] | None`` gives ``(DeviceClass, "[]")``)."""
    if hasattr(annotation, "model_fields"):
        yield annotation, suffix
        return
    inner = suffix + "[]" if get_origin(annotation) is list else suffix
    for arg in get_args(annotation):
        yield from _models_in(arg, inner)


def _model_paths(model, prefix=""):
    """Every dotted field path through the scenario's models (unions: every member)."""
    for name, f in model.model_fields.items():
        yield f"{prefix}{name}"
        for sub, suffix in _models_in(f.annotation):
            yield from _model_paths(sub, f"{prefix}{name}{suffix}.")


def test_every_field_path_of_the_models_is_on_the_page(scenario_page):
    """The page's paths (a section's **At:** joined with its fields) cover every path through
    the pydantic models themselves, not only the schema the page is made from."""
    documented = set()
    sections = _sections(scenario_page)
    for anchor, section in sections.items():
        at_paths = section["at"] or ([""] if anchor == "scenario" else [])
        if anchor.startswith("distribution-"):  # the fields that take one: listed once
            at_paths = sections["per-client-distributions"]["at"]
        for at in at_paths:
            documented |= {f"{at}.{f}" if at else f for f in section["fields"]}
    paths = set(_model_paths(Scenario))
    assert "clients.device_classes[].cpu_hz" in paths  # the walk reaches into lists
    assert "algorithm.local.optimizer.b1" in paths  # and into unions
    assert paths - documented == set()


def test_scenario_reference_rows_say_type_default_and_unit(scenario_page):
    cpu = next(line for line in scenario_page.splitlines() if line.startswith("| `cpu_hz` |"))
    cells = [c.strip() for c in cpu.strip("|").split(" | ")]
    assert cells[1] == "number or [per-client distribution](#per-client-distributions)"
    assert cells[3:5] == ["`1e9`", "Hz"]
    assert "`kind: lognormal`" in scenario_page  # the distributions have their own section


def test_every_field_on_the_scenario_reference_has_a_description(scenario_page):
    """Each row says what its field means: from the field's own description, its model's
    docstring, or, for the tag that picks a section (`kind`, `name`, `mode`), the hook's."""
    bare = []
    for anchor, line in _rows(scenario_page):
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if not cells[-1]:
            bare.append(f"{anchor}.{cells[0].strip('`')}")
    assert bare == []


def _rows(page: str) -> list[tuple[str, str]]:
    """(section anchor, table row) of each field row of a scenario reference page."""
    rows, anchor = [], ""
    for line in page.splitlines():
        heading = re.match(r"#{2,3} .*\{#([\w-]+)\}$", line)
        if heading:
            anchor = heading[1]
        elif re.match(r"\| `\w+` \|", line):
            rows.append((anchor, line))
    return rows


def test_units_come_from_names_and_the_plausible_ranges():
    named = hook.named_units()
    assert hook.unit_of("noise_psd_dbm_hz", named) == "dBm/Hz"
    assert hook.unit_of("tx_power_dbm", named) == "dBm"
    assert hook.unit_of("checkpoint_interval_s", named) == "s"
    assert hook.unit_of("kappa", named) == "J/(cycle Hz^2)"
    assert hook.unit_of("path_loss_slope_db", named) == "dB/decade"
    assert hook.unit_of("lr", named) == ""


def test_schema_text_stays_literal_markdown():
    assert hook._prose("W[i][j] is `W[i][j]`") == "W\\[i\\]\\[j\\] is `W[i][j]`"
    assert hook._prose("a * b | c") == "a \\* b \\| c"
    assert hook._prose("runs/<name>") == "runs/&lt;name&gt;"


def test_cli_reference_names_every_command_and_option():
    page = hook.cli_page()
    missing = []

    def walk(p):
        if f"`{p.prog}`" not in page:
            missing.append(p.prog)
        for action in p._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and option not in page:
                    missing.append(f"{p.prog} {option}")
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    walk(child)

    walk(parser())
    assert "`flnet traces fedscale`" in page  # nested commands too
    assert missing == []


def test_python_api_page_documents_every_name_flnet_exports():
    """Each name in `flnet.__all__` has its mkdocstrings entry (`::: module.Name`)."""
    import flnet

    page = (DOCS / "reference" / "python-api.md").read_text()
    documented = {path.rsplit(".", 1)[-1] for path in re.findall(r"^::: ([\w.]+)", page, re.M)}
    assert "compare" in flnet.__all__
    assert set(flnet.__all__) - documented == set()


# ---------------------------------------------------------------- the ledger's outcomes

OUTCOME_ROUNDS = 30  # the page says "in their first 30 rounds"


def documented_outcomes() -> dict[str, list[tuple[str, list[str]]]]:
    """outcome -> [(scenario, overrides)] from the outcomes table of the results reference:
    its last column names `scenarios/X.yaml`, optionally "with `field=value`"."""
    page = (DOCS / "reference" / "results.md").read_text()
    header = "| `outcome` | meaning | produced by |\n"
    table = page[page.index(header) + len(header) :].split("\n\n")[0]
    rows = {}
    for m in re.finditer(r"^\| `([a-z_]+)` \|.*\| ([^|]*) \|$", table, re.M):
        producers = re.finditer(r"`(scenarios/[\w/]+\.yaml)`(?: with `([\w.]+=[\w.]+)`)?", m[2])
        rows[m[1]] = [(p[1], [p[2]] if p[2] else []) for p in producers]
    return rows


def test_the_outcome_table_names_every_outcome_the_ledger_knows():
    from flnet.sim.ledger import OUTCOMES

    rows = documented_outcomes()
    assert set(rows) == set(OUTCOMES)
    assert rows["timeout"] == [("scenarios/gossip_radio.yaml", ["algorithm.timeout_s=0.05"])]
    assert rows["battery"] == []  # no shipped scenario runs a battery empty in 30 rounds


def _producer_runs() -> dict[tuple[str, tuple[str, ...]], set[str]]:
    runs: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    for outcome, producers in documented_outcomes().items():
        for scenario, overrides in producers:
            runs.setdefault((scenario, tuple(overrides)), set()).add(outcome)
    return runs


@pytest.mark.parametrize("run", sorted(_producer_runs().items()), ids=lambda r: r[0][0])
def test_the_shipped_scenarios_produce_the_outcomes_the_table_says(run, monkeypatch):
    import flnet

    (scenario, overrides), outcomes = run
    monkeypatch.chdir(REPO)  # the scenarios name their traces relative to the repository
    rounds = [f"run.rounds={OUTCOME_ROUNDS}", f"run.eval_every={OUTCOME_ROUNDS}"]
    result = flnet.run(scenario, [*overrides, *rounds], write=False)
    assert outcomes <= set(result.ledger.outcome.astype(str)), scenario


# ---------------------------------------------------------------- runnable pages

RUNNABLE = sorted(
    p
    for folder in ("tutorials", "how-to")
    for p in (DOCS / folder).glob("*.md")
    if p.name != "index.md"
)
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: .+ -->\s*$")


def code_blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, title, code) of each block that runs: bash and python run, yaml with a title
    is written to that file; text blocks are output. A block right after a comment
    `<!-- not run: why -->` is left out."""
    blocks = []
    for m in FENCE.finditer(text):
        language, attrs, code = m[1], m[2], m[3]
        title = re.search(r'title="([^"]+)"', attrs)
        if NOT_RUN.search(text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1] + "\n"):
            continue
        if language in ("bash", "python") or (language == "yaml" and title):
            blocks.append((language, title[1] if title else "", code))
        elif language == "yaml":
            raise AssertionError(f"a yaml block without a title (its file name): {code[:60]!r}")
    return blocks


def test_code_blocks_are_found():
    text = (
        '```yaml title="a.yaml"\nx: 1\n```\n\n<!-- not run: needs a cluster -->\n```bash\n'
        "ray up\n```\n```bash\nls\n```\n```text\nout\n```\n"
    )
    assert code_blocks(text) == [("yaml", "a.yaml", "x: 1\n"), ("bash", "", "ls\n")]


SHELL = re.compile(r"[|&;<>$`(){}\\*?~]")


def flnet_commands(code: str) -> list[list[str]] | None:
    """The argument lists of a bash block that is only plain `flnet ...` lines (run in this
    process through `flnet.cli.main`: no second torch import), else None (run by bash)."""
    lines = [s for s in code.splitlines() if s.strip() and not s.lstrip().startswith("#")]
    if lines and all(s.startswith("flnet ") and not SHELL.search(s) for s in lines):
        return [shlex.split(s)[1:] for s in lines]
    return None


def test_plain_flnet_lines_run_in_process_and_the_rest_in_bash():
    assert flnet_commands("flnet run a.yaml --set x=1\n") == [["run", "a.yaml", "--set", "x=1"]]
    assert flnet_commands("flnet run a.yaml | head\n") is None
    assert flnet_commands("ls runs\n") is None


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_page_code_runs(page, tmp_path, monkeypatch):
    """The page's blocks in order, in an empty folder: files written, commands run (this
    checkout's flnet), Python in one namespace as a reader would paste it."""
    blocks = code_blocks(page.read_text())
    assert blocks, f"{page} has no code to run"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    }
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for language, title, code in blocks:
        if language == "yaml":
            (tmp_path / title).write_text(code)
        elif language == "bash" and flnet_commands(code) is not None:
            for argv in flnet_commands(code) or []:
                assert main(argv) == 0, f"{page.name}: `flnet {shlex.join(argv)}` failed"
        elif language == "bash":
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", code],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, f"{page.name}: `{code.strip()}` failed:\n{done.stderr}"
        else:
            exec(compile(code, f"{page.name}", "exec"), namespace)


# ---------------------------------------------------------------- the build


def test_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true needs the docs build: install the docs extra (make docs)")
        pytest.skip("MkDocs is not installed (pip install -e '.[docs]', or make docs)")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    scenario_html = (tmp_path / "reference" / "scenario" / "index.html").read_text()
    assert 'id="clientsconfig"' in scenario_html  # the generated pages are in the site
    assert (tmp_path / "reference" / "cli" / "index.html").exists()
