"""The files of a results folder (records, ledger, summary.json, scenario.yaml, a sweep's
points.csv) read as user files: `flnet plot`, `report`, `analyze` and `flnet.compare` read
folders someone else may have made, so each file goes through `flnet.base.userfiles` (a
regular file, within a size limit) and every refusal is one `ResultsError` naming the file.

A FIFO named ``records.parquet`` would block the reader forever, a link to ``/dev/zero``
would fill memory, and a huge table would be parsed before anything said why; each is
refused by its kind or its size before the table reader sees a byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from flnet.base import userfiles
from flnet.errors import FlnetError

# Parquet is decompressed in memory: 4 GiB of it is already tens of GB of table, far past a
# sweep of thousands of points; a CSV is counted while it is read.
MAX_TABLE_BYTES = 4 << 30
MAX_SMALL_BYTES = 64 << 20  # summary.json, scenario.yaml: kilobytes, a per_client list MBs


class ResultsError(FlnetError):
    """A folder that is not a flnet results folder or sweep, or a results file flnet can't
    read."""


def read_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """The table in `path` (parquet or CSV by its suffix), with only `columns` (those of them
    it has) when given."""
    try:
        if path.suffix == ".csv":
            with userfiles.open_bounded(path, MAX_TABLE_BYTES, "results table", ResultsError) as f:
                return pd.read_csv(f, usecols=lambda c: columns is None or c in columns)
        with userfiles.open_regular(path, MAX_TABLE_BYTES, "results table", ResultsError) as f:
            if columns is not None:
                import pyarrow.parquet as pq

                names = set(pq.read_schema(f).names)
                columns = [c for c in columns if c in names]
                f.seek(0)
            return pd.read_parquet(f, columns=columns)
    except ResultsError:
        raise
    except (OSError, ValueError) as e:
        raise ResultsError(f"{path}: cannot read it as a table ({e})") from None


def read_json(path: Path) -> dict:
    """The JSON object in `path`; {} when it does not exist."""
    if not path.exists():
        return {}
    text = userfiles.read_text(path, MAX_SMALL_BYTES, "results file", ResultsError)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:  # where and what: never the file's own text
        raise ResultsError(
            f"{path}: cannot read it as JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except RecursionError:
        raise ResultsError(f"{path}: cannot read it as JSON (nested too deeply)") from None
    if not isinstance(value, dict):
        raise ResultsError(f"{path}: holds a JSON {type(value).__name__}, not an object")
    return value


def read_text(path: Path) -> str | None:
    """The UTF-8 text of `path`; None when it does not exist."""
    if not path.exists():
        return None
    return userfiles.read_text(path, MAX_SMALL_BYTES, "results file", ResultsError)
