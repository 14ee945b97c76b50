"""Where a sweep stands, read from its folder without running anything (``flnet sweep
--status``): while a cluster runs it, after its driver stopped, or before it started.

Each point's status comes from its own folder, as the sweep's table would give it: finished
(completed, diverged), ``running`` (a live run holds its folder), ``killed`` or
``interrupted`` (its run stopped; the sweep started again continues it), ``not finished``
(nothing written yet), or ``invalid``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flnet.columns import REUSE_COLUMNS, SUMMARY_COLUMNS
from flnet.run_folders import default_sweep_folder, finished
from flnet.scenario import Scenario
from flnet.sweeps import Spec, combine, left_behind, load_base, plan, point_row, typed


def sweep_status(
    scenario: Scenario | dict | str | Path,
    spec: Spec | None = None,
    out_dir: str | Path | None = None,
) -> tuple[pd.DataFrame, Path]:
    """The points table of the sweep `scenario` x `spec` as its folder holds it now, and
    that folder (`out_dir`, default ``runs/<name>-sweep`` as `flnet.sweeps.run_sweep`)."""
    base, file_spec = load_base(scenario)
    points = plan(base, combine(file_spec, spec or Spec()))
    out = Path(out_dir) if out_dir else default_sweep_folder(base.get("name", "scenario"))
    rows = []
    for p in points:
        summary = finished(out / p.key) if p.key else None
        outcome = left_behind(out / p.key) if p.key and summary is None else None
        rows.append(point_row(p, summary, outcome))
    swept = list(points[0].values) if points else []
    columns = ["point", *swept, *SUMMARY_COLUMNS, "error", *REUSE_COLUMNS, "note"]
    return typed(pd.DataFrame(rows, columns=columns), swept), out
