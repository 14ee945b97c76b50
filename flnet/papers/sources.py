"""Where a paper's reproduction finds its scenarios and its studies: the source checkout, or
an installed wheel's copy of them.

A paper's scenarios live in ``scenarios/papers/<paper>/`` (the paper's own setup beside the
CPU-scale version run here) and its studies in ``analysis/``; both sit beside the flnet package
in a checkout of the repository. A wheel carries a copy of them with the same layout under
``flnet/papers/shipped/`` (setup.py puts it there), read when no checkout is beside the
package; paths are shown relative to either root, so a report reads the same from both.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from flnet.errors import FlnetError
from flnet.scenario import resolve

CHECKOUT = Path(__file__).resolve().parents[2]  # flnet/papers/ -> flnet/ -> the checkout
SHIPPED = Path(__file__).resolve().parent / "shipped"  # an installed wheel's copy


def _root() -> Path:
    """The checkout where the package sits in one (an editable install too), else the copy."""
    return CHECKOUT if (CHECKOUT / "scenarios" / "papers").is_dir() else SHIPPED


ROOT = _root()
SCENARIOS = ROOT / "scenarios" / "papers"
STUDIES = ROOT / "analysis"


def _need(path: Path) -> Path:
    if not path.exists():
        raise FlnetError(
            f"{path} does not exist: `flnet reproduce` reads the papers' scenarios/papers/ and "
            "analysis/ folders from the checkout of the flnet repository that holds the "
            f"package, or else from the copy an installed wheel has in {SHIPPED}"
        )
    return path


def scenario_path(paper: str, name: str) -> Path:
    """``scenarios/papers/<paper>/<name>.yaml``."""
    return _need(SCENARIOS / paper / f"{name}.yaml")


def shown_path(path: Path) -> str:
    """A scenario's path as a reader types it: relative to the checkout (or the copy)."""
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
