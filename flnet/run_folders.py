"""A sweep point's folder as both the sweep and trajectory reuse see it: its name (a hash of
the point's resolved scenario) and whether it holds a finished run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FINISHED = ("completed", "diverged")  # a folder holding one of these is not run again
NAME_MAX_BYTES = 255  # one path component, on every common file system
SWEEP_SUFFIX = "-sweep"


def identity(data: dict) -> str:
    """Hash of a resolved scenario minus where and how often it writes and what it is called in
    plots (`label`: presentation, not simulation; dropped, not nulled, so that the names of
    points written before the field existed stay the same; `resources` likewise while
    unset): the point's name."""
    data = {
        **{k: v for k, v in data.items() if k != "label" and not (k == "resources" and v is None)},
        "output": None,
        "run": {k: v for k, v in data["run"].items() if not k.startswith("checkpoint")},
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def finished(folder: Path) -> dict | None:
    """The summary of a finished run in `folder`, or None (absent, interrupted, failed,
    running or killed)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    fmt = summary.get("format") or format_of(folder)
    if summary.get("status") not in FINISHED or fmt is None:
        return None
    return summary


def format_of(folder: Path) -> str | None:
    """The format of the records `folder` holds (None: none written)."""
    return next((f for f in ("parquet", "csv") if (folder / f"records.{f}").exists()), None)


def default_sweep_folder(name: str) -> Path:
    """``runs/<name>-sweep``, a sweep's folder when no ``--out`` is given. A scenario name may
    take the 255 bytes a folder name has (``runs/<name>`` fits), so when the suffix does not
    fit, the name is cut on a character boundary and an 8-hex hash of the whole name takes the
    cut part's place: the folder stays one for that name, and two long names sharing a start
    stay apart."""
    raw = name.encode("utf-8", "replace")
    if len(raw) + len(SWEEP_SUFFIX) <= NAME_MAX_BYTES:
        return Path("runs") / (name + SWEEP_SUFFIX)
    tag = "-" + hashlib.sha256(raw).hexdigest()[:8] + SWEEP_SUFFIX
    head = raw[: NAME_MAX_BYTES - len(tag)].decode("utf-8", "ignore")  # a cut character dropped
    return Path("runs") / (head + tag)
