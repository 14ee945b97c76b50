"""The README's scenario reference names every field of the schema."""

import re
from pathlib import Path

from flnet.scenario import Scenario, _unwrap


def field_paths(model, prefix=""):
    members = model if isinstance(model, tuple) else (model,)
    for m in members:
        for name, f in m.model_fields.items():
            path = f"{prefix}{name}"
            yield path
            sub = _unwrap(f.annotation)
            if isinstance(sub, tuple) or hasattr(sub, "model_fields"):
                yield from field_paths(sub, path + ".")


def test_readme_documents_every_scenario_field():
    text = Path("README.md").read_text()
    documented = set(re.findall(r"`([a-z_][a-z_0-9.]*)`", text))

    def ok(path):
        return (
            path in documented
            or path.rsplit(".", 1)[0] in documented
            or any(d.startswith(path + ".") for d in documented)
        )

    missing = sorted({p for p in field_paths(Scenario) if not ok(p)})
    assert not missing, f"README's scenario reference lacks: {missing}"


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
}  # what a clone holds at its top (runs/ it makes)


def _mentioned_paths(text):
    """Repository paths the README names: in code (inline or blocks) or as link targets,
    starting with a top-level entry of the repository (flnet/, tests/, ...) or with ../."""
    blocks = re.findall(r"```.*?```", text, re.S)
    code = blocks + re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    tokens = [t for c in code for t in c.split()] + re.findall(r"\]\(([^)#\s]+)\)", text)
    for token in tokens:
        token = token.lstrip("`'\"(").rstrip("`'\"().,:;")
        first = token.split("/")[0]
        if (
            ("/" in token or "." in token)
            and (first in TOP or first == "..")
            and not re.search(r"[<>*]", token)
        ):
            yield token


def test_every_path_the_readme_mentions_exists():
    text = (REPO / "README.md").read_text()
    paths = set(_mentioned_paths(text))
    assert "scenarios/quickstart.yaml" in paths  # the search finds what it should
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"README names files that are not in the repository: {missing}"


def test_every_module_the_readme_names_exists():
    import importlib

    names = set(re.findall(r"`(flnet(?:\.[a-z_][a-z_0-9]*)+)", (REPO / "README.md").read_text()))
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
    assert not missing, f"README names modules or objects that do not exist: {missing}"


def test_readme_explains_every_ledger_outcome():
    from flnet.sim.ledger import OUTCOMES

    text = (REPO / "README.md").read_text()
    table = text[text.index("| `outcome` | meaning |") :]
    explained = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    assert set(OUTCOMES) <= explained, set(OUTCOMES) - explained
