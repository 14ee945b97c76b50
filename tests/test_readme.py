"""The README, CONTRIBUTING.md and the documentation's pages name only files, modules and
objects that exist. (Every scenario field is documented by the generated scenario reference,
`tests/test_docs.py`; the ledger's outcomes by `docs/reference/results.md`, tested there.)"""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOP = {
    "flnet",
    "tests",
    "scenarios",
    "benchmarks",
    "analysis",
    "Makefile",
    "pyproject.toml",
    "scenario.schema.json",
    "README.md",
    "CONTRIBUTING.md",
    "docs",
    "mkdocs.yml",
}  # what a clone holds at its top (runs/ it makes)
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


def _mentioned_paths(text, links=True):
    """Repository paths the README names: in code (inline or blocks) or as link targets,
    starting with a top-level entry of the repository (flnet/, tests/, ...) or with ../."""
    blocks = re.findall(r"```.*?```", text, re.S)
    code = blocks + re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    tokens = [t for c in code for t in c.split()]
    if links:  # a docs page's links are relative to the page: MkDocs checks them
        tokens += re.findall(r"\]\(([^)#\s]+)\)", text)
    for token in tokens:
        token = token.lstrip("`'\"(").rstrip("`'\"().,:;")
        first = token.split("/")[0]
        if (
            ("/" in token or "." in token)
            and (first in TOP or first == "..")
            and not re.search(r"[<>*]", token)
        ):
            yield token


def test_every_path_the_pages_mention_exists():
    """Paths from the repository's top, in README, CONTRIBUTING.md and every docs page (a
    page's own relative links are MkDocs' to check: `mkdocs build --strict`)."""
    missing = []
    for page in PAGES:
        paths = set(_mentioned_paths(page.read_text(), links=page.parent == REPO))
        if page.name == "README.md":
            assert "scenarios/quickstart.yaml" in paths  # the search finds what it should
        missing += [
            f"{page.relative_to(REPO)}: {p}" for p in sorted(paths) if not (REPO / p).exists()
        ]
    assert not missing, f"pages name files that are not in the repository: {missing}"


def test_every_module_the_pages_name_exists():
    import importlib

    text = "\n".join(page.read_text() for page in PAGES)
    names = set(re.findall(r"`(flnet(?:\.[a-z_][a-z_0-9]*)+)", text))
    missing = []
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ModuleNotFoundError:
                continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            missing.append(name)
    assert not missing, f"pages name modules or objects that do not exist: {missing}"


def test_the_readmes_scenario_is_the_first_tutorials():
    """README shows the first tutorial's scenario and quotes what its run printed there, so the
    two must stay the same file (the tutorial's code runs in tests/test_docs.py)."""
    readme = (REPO / "README.md").read_text()
    tutorial = (REPO / "docs" / "tutorials" / "first-scenario.md").read_text()
    shown = re.search(r"```yaml\n(.*?)```", readme, re.S)[1]
    run = re.search(r'```yaml title="first.yaml"\n(.*?)```', tutorial, re.S)[1]
    assert shown == run
    assert "│ final test accuracy │                0.9250 │" in readme
    assert "│ final test accuracy │                0.9250 │" in tutorial
