"""Where a paper's reproduction finds its scenarios and its studies: the source checkout.

A paper's scenarios live in ``scenarios/papers/<paper>/`` (the paper's own setup beside the
CPU-scale version run here) and its studies in ``analysis/``; both sit beside the flnet package
in a checkout of the repository, not in an installed wheel.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from flnet.errors import FlnetError
from flnet.scenario import resolve

ROOT = Path(__file__).resolve().parents[2]  # the checkout: flnet/papers/ -> flnet/ -> root
SCENARIOS = ROOT / "scenarios" / "papers"
STUDIES = ROOT / "analysis"


def _need(path: Path) -> Path:
    if not path.exists():
        raise FlnetError(
            f"{path} does not exist: `flnet reproduce` runs from a checkout of the flnet "
            "repository (its scenarios/papers/ and analysis/ folders)"
        )
    return path


def scenario_path(paper: str, name: str) -> Path:
    """``scenarios/papers/<paper>/<name>.yaml``."""
    return _need(SCENARIOS / paper / f"{name}.yaml")


def shown_path(path: Path) -> str:
    """A scenario's path as a reader types it: relative to the checkout."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def scenario_data(paper: str, name: str) -> dict:
    """A paper's scenario file as data, read as `flnet run` reads it (its comments are the
    documentation)."""
    return resolve(scenario_path(paper, name))


def scenario_base(paper: str, name: str, *without: str) -> dict:
    """A paper's scenario file as data, less the fields `without` (dotted paths): a study's
    base, whose points set those fields themselves."""
    data = scenario_data(paper, name)
    for dotted in without:
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            node = node[key]
        del node[last]
    return data


_loaded: dict[str, ModuleType] = {}


def study(name: str) -> ModuleType:
    """``analysis/<name>.py`` as a module (loaded once)."""
    if name not in _loaded:
        path = _need(STUDIES / f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"flnet_study_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses and pickling look it up there
        spec.loader.exec_module(module)
        _loaded[name] = module
    return _loaded[name]
