"""Import layers, read from the source with `ast` (nothing is imported, every import counts:
module level, inside functions and under TYPE_CHECKING).

Bottom to top: base (the schema: top-level `units`, `errors`, `config`, `dists`, `rng`,
`draws`, `columns`, `scenario`, `cache`, everything under `flnet.schema`, and the light
`flnet.algorithms.configs` / `records`), then `sim` | `learn` side by side (neither imports the
other), then `algorithms`, then the face (every other top-level module). A module imports its
own layer or lower ones, no two modules import each other through any chain, and an import sits
inside a function only to load a heavy dependency late (start-up speed), as listed here with its
reason.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
BASE_TOP = {"units", "errors", "config", "dists", "rng", "draws", "columns", "scenario", "cache"}
BASE_ALGORITHMS = {"configs", "records"}  # per-algorithm declarations, no torch
ALLOWED = {
    "base": {"base"},
    "sim": {"base", "sim"},
    "learn": {"base", "learn"},
    "algorithms": {"base", "sim", "learn", "algorithms"},
    "face": {"base", "sim", "learn", "algorithms", "face"},
}

CLI = "start-up speed: each command loads its own modules, `flnet --help` answers at once"
# (importing module, imported module or its package): why the import waits inside a function
LATE = {
    ("flnet.algorithms", "flnet.algorithms.base"): "start-up speed: the schema loads this "
    "package for its configs, and base loads simpy",
    ("flnet.cli", "flnet.analysis"): CLI,
    ("flnet.cli", "flnet.comparison"): CLI,
    ("flnet.cli", "flnet.cluster"): CLI,
    ("flnet.cli", "flnet.sweep_status"): CLI,
    ("flnet.ray_cluster", "ray"): "optional and heavy: only for the Ray backend",
    ("flnet.ray_cluster", "torch"): "a Ray task's own process loads torch, the driver's does not",
    ("flnet.ray_cluster", "flnet.tasks"): "start-up speed: torch, in the Ray task only",
    ("flnet.ray_cluster", "flnet.runner"): "start-up speed: torch, once results come back",
    ("flnet.ray_cluster", "flnet.scenario"): "beside runner's import, once results come back",
    ("flnet.shipping", "flnet.learn"): "start-up speed: torch, only for a real data set's folder",
    ("flnet.slurm", "torch"): "a Slurm task's own process loads torch, the driver's does not",
    ("flnet.slurm", "submitit"): "optional: only for the Slurm backend",
    ("flnet.workers", "flnet.ray_cluster"): "optional backend: Ray only when asked for",
    ("flnet.workers", "flnet.slurm"): "optional backend: submitit only when asked for",
    ("flnet.analysis", "flnet.runner"): "start-up speed: torch, only where a study runs",
    ("flnet.analysis", "flnet.scenario"): "plot and report load analysis without pydantic",
    ("flnet.reuse", "flnet.algorithms"): "start-up speed: torch",
    ("flnet.cli", "flnet.calibrate"): CLI,
    ("flnet.cli", "flnet.divergence"): CLI,
    ("flnet.cli", "flnet.fedscale"): CLI,
    ("flnet.cli", "flnet.plot"): CLI,
    ("flnet.cli", "flnet.report"): CLI,
    ("flnet.cli", "flnet.reuse"): CLI,
    ("flnet.cli", "flnet.runner"): CLI,
    ("flnet.cli", "flnet.scenario"): CLI,
    ("flnet.cli", "flnet.stop"): CLI,
    ("flnet.cli", "flnet.sweeps"): CLI,
    ("flnet.cli", "pandas"): CLI,
    ("flnet.cli", "flnet.papers"): CLI,
    ("flnet.papers", "flnet.papers.report"): "start-up speed: the CLI lists the papers at once",
    ("flnet.learn.data.embedded", "sklearn"): "start-up speed: only the digits, once per cache",
    ("flnet.learn.data.embedded", "mnist1d"): "start-up speed: it loads matplotlib",
    ("flnet.output", "pandas"): "start-up speed: the CLI imports this module",
    ("flnet.output", "pyarrow"): "start-up speed: the CLI imports this module",
    ("flnet.plot", "matplotlib"): "start-up speed: matplotlib only when a figure is drawn",
    ("flnet.result_files", "pyarrow"): "start-up speed: parquet only when a table is read",
    ("flnet.sim.topology", "scipy"): "start-up speed: scipy only where a gossip graph is built",
    ("flnet.sim.ledger", "pyarrow"): "start-up speed: the ledger's text columns, at write time",
    ("flnet.report", "selenium"): "start-up speed, and optional: only for screenshots",
    ("flnet.reuse", "flnet.runner"): "start-up speed: a sweep's own process loads no torch",
    ("flnet.reuse", "flnet.checkpoint"): "start-up speed: torch",
    ("flnet.reuse", "flnet.learn"): "start-up speed: torch",
    ("flnet.sweeps", "flnet.runner"): "start-up speed: a sweep's own process loads no torch",
    ("flnet.sweeps", "flnet.checkpoint"): "start-up speed: torch",
    ("flnet.workers", "torch"): "the worker process loads torch, the sweep's own does not",
    ("flnet.workers", "flnet.runner"): "start-up speed: torch",
    ("flnet.workers", "ray"): "optional and heavy: only for the Ray backend",
}

# Temporary: modules other helpers of issue 40 are reshaping now; the lead removes these at merge.
PENDING_ARROWS = {}
PENDING_CYCLES = []
PENDING_LATE = {}
PENDING_SCENARIO_USERS: set[str] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(f): f for f in sorted((ROOT / "flnet").rglob("*.py"))}


def layer(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1:
        return "face"
    if parts[1] in ("schema", "base") or (len(parts) == 2 and parts[1] in BASE_TOP):
        return "base"
    if parts[1] == "algorithms" and len(parts) > 2 and parts[2] in BASE_ALGORITHMS:
        return "base"
    if parts[1] in ("sim", "learn", "algorithms"):
        return parts[1]
    return "face"


class Import(NamedTuple):
    line: int
    in_function: bool
    module: str  # the module named: `import a.b` -> a.b, `from a import b` -> a
    submodules: tuple[str, ...]  # what it may mean below: `from a import b` -> (a.b,)


def imports(mod: str, path: Path) -> list[Import]:
    """Every import in `mod`, one per imported module, relative ones resolved."""
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(child.lineno, in_function, a.name, ()) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = tuple(f"{base}.{a.name}" for a in child.names)
                found.append(Import(child.lineno, in_function, base, subs))
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            visit(child, inside)

    visit(ast.parse(path.read_text()), False)
    return found


def targets(imp: Import, mods: dict[str, Path]) -> set[str]:
    """The flnet modules an import loads (a name imported from a package counts as its
    submodule when there is one, else as the package)."""
    named = [s for s in imp.submodules if s in mods]
    if len(named) < len(imp.submodules) or not imp.submodules:
        named.append(imp.module)
    out = set()
    for name in named:
        while name and name not in mods:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        if name.startswith("flnet"):
            out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the flnet modules it imports, leaving out the package root's re-exports."""
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for imp in imports(m, path):
            edges[m] |= {t for t in targets(imp, mods) if t not in (m, "flnet")}
    edges["flnet"] = set()
    return edges


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan), leaving out a
    package's `__init__` importing its own submodules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w.startswith(v + "."):  # a package's __init__ re-exporting its submodule
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def late_imports() -> list[tuple[str, str, int]]:
    """(module, imported module, line) of every import inside a function."""
    mods = modules()
    return [
        (m, next((s for s in imp.submodules if s in mods), imp.module), imp.line)
        for m, path in mods.items()
        for imp in imports(m, path)
        if imp.in_function
    ]


def _listed(mod: str, name: str, table: dict) -> bool:
    """Whether `table` lists `name` (or its package; the flnet root only by itself)."""
    return any(
        mod == m and (name == t or (t != "flnet" and name.startswith(t + "."))) for m, t in table
    )


def test_the_layers_are_read_as_documented():
    assert layer("flnet.schema.radio") == layer("flnet.scenario") == "base"
    assert layer("flnet.algorithms.configs") == "base"
    assert layer("flnet.sim.world") == "sim" and layer("flnet.learn.data.blocks") == "learn"
    assert layer("flnet.algorithms.fedavg") == "algorithms" and layer("flnet.runner") == "face"
    edges = graph()
    assert "flnet.schema" in edges["flnet.scenario"]  # the parser sees real arrows
    assert "flnet.learn.models" in edges["flnet.learn.references"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_points_up_a_layer():
    up = sorted(
        (a, b)
        for a, targets in graph().items()
        for b in targets
        if layer(b) not in ALLOWED[layer(a)] and (a, b) not in PENDING_ARROWS
    )
    assert not up, "imports pointing up a layer: " + ", ".join(f"{a} -> {b}" for a, b in up)


def test_no_import_cycle():
    found = [c for c in cycles(graph()) if not any(c <= p for p in PENDING_CYCLES)]
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_imports_inside_functions_are_only_for_start_up_speed():
    unlisted = [
        f"{m}:{line} imports {name}"
        for m, name, line in late_imports()
        if not _listed(m, name, LATE) and not _listed(m, name, PENDING_LATE)
    ]
    assert not unlisted, (
        "imports inside functions not listed in LATE with their reason (move them to the top "
        "of the module unless they load a heavy dependency late): " + "; ".join(unlisted)
    )


def test_time_side_imports_no_torch_and_math_side_no_simpy():
    wrong = [
        f"{m}:{imp.line} imports {name}"
        for m, path in modules().items()
        for imp in imports(m, path)
        for name in (imp.module, *imp.submodules)
        if (layer(m) == "sim" and name.split(".")[0] == "torch")
        or (layer(m) == "learn" and name.split(".")[0] == "simpy")
        or (layer(m) == "base" and name.split(".")[0] in ("torch", "simpy"))
    ]
    assert not wrong, "; ".join(wrong)


def test_sim_and_learn_take_sections_from_the_schema():
    users = sorted(
        m
        for m, targets in graph().items()
        if layer(m) in ("sim", "learn") and "flnet.scenario" in targets
    )
    assert set(users) <= PENDING_SCENARIO_USERS, f"import flnet.schema instead: {users}"


def test_the_schema_loads_without_torch_or_simpy():
    """`flnet validate` and `flnet schema` stay quick: the schema layer pulls in neither."""
    code = (
        "import sys, flnet.schema, flnet.scenario; "
        "print(sorted({'torch', 'simpy'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
