"""One reproduction per paper: `flnet reproduce PAPER` runs the paper's CPU-scale scenarios
(scenarios/papers/PAPER/), checks each of its claims seed by seed, and writes a report
(`flnet.papers.report`): markdown for the documentation and one self-contained HTML file.

    from flnet.papers import reproduce
    reproduce("oledfl", "runs/reproduce", seeds=3)       # -> runs/reproduce/oledfl/report.md
"""

from __future__ import annotations

import importlib
import time
import warnings
from pathlib import Path

from flnet.errors import FlnetError, TopologyWarning

# paper -> the module that reproduces it: run(seeds, smoke, work folder) -> PaperReport
PAPERS = {
    "oledfl": "flnet.papers.oledfl",
    "block_cyclic": "flnet.papers.block_cyclic",
    "dfl": "flnet.papers.dfl",
    "drdm": "flnet.papers.drdm",
    "delta_sgd": "flnet.papers.delta_sgd",
}
DEFAULT_SEEDS = 3


def command(paper: str, smoke: bool, seeds: int) -> str:
    """The command line that reproduces `paper` as run."""
    parts = ["flnet reproduce", paper]
    if smoke:
        parts.append("--smoke")
    elif seeds != DEFAULT_SEEDS:
        parts.append(f"--seeds {seeds}")
    return " ".join(parts)


def reproduce(
    paper: str, out: str | Path = "runs/reproduce", smoke: bool = False, seeds: int | None = None
) -> dict[str, Path]:
    """Run `paper`'s reproduction and write its report under `out`/`paper`/; returns the
    written files by name. `smoke`: the tiniest version (one seed, a few rounds: seconds),
    whose figures are no result; `seeds`: how many (0, 1, ...; default 3, smoke 1)."""
    if paper not in PAPERS:
        raise FlnetError(f"unknown paper {paper!r}; papers: {', '.join(PAPERS)}")
    n = seeds if seeds is not None else (1 if smoke else DEFAULT_SEEDS)
    if n < 1:
        raise FlnetError(f"--seeds must be at least 1, got {n}")
    from flnet.papers.report import write

    module = importlib.import_module(PAPERS[paper])
    start = time.perf_counter()
    with warnings.catch_warnings():  # unstable and asymmetric W on purpose: the report says
        warnings.simplefilter("ignore", TopologyWarning)
        report = module.run(list(range(n)), smoke, Path(out) / paper / "runs")
    report.command = command(paper, smoke, n)
    report.notes = [
        *report.notes,
        f"Wall time of this reproduction: {time.perf_counter() - start:.0f} s.",
    ]
    return write(report, Path(out) / paper)
