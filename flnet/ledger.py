"""The ledger: one row per compute, transfer and evaluation event, with its time, joules and bits.

Rows are appended column-wise (cheap on the hot path) and become a DataFrame on demand. Running
totals per kind feed the records without rescanning the rows.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

SERVER = -1  # node id of the server / access point
NOBODY = -2  # peer of an event that has none (compute, evaluate)

KINDS = ("download", "compute", "upload", "d2d", "evaluate")
OUTCOMES = ("ok", "deadline", "cancelled", "dropped", "lost")
COLUMNS = ("round", "node", "peer", "kind", "start_s", "end_s", "energy_j", "bits", "flops",
           "outcome")


class Ledger:
    def __init__(self):
        self._cols: dict[str, list] = {c: [] for c in COLUMNS}
        self.energy_j: dict[str, float] = defaultdict(float)  # by kind
        self.bits: dict[str, float] = defaultdict(float)  # by kind

    def add(self, round: int, node: int, peer: int, kind: str, start_s: float, end_s: float,
            energy_j: float = 0.0, bits: float = 0.0, flops: float = 0.0,
            outcome: str = "ok") -> None:
        row = (round, node, peer, kind, start_s, end_s, energy_j, bits, flops, outcome)
        for col, value in zip(self._cols.values(), row):
            col.append(value)
        self.energy_j[kind] += energy_j
        self.bits[kind] += bits

    def __len__(self) -> int:
        return len(self._cols["round"])

    @property
    def total_energy_j(self) -> float:
        return sum(self.energy_j.values())

    def frame(self, start: int = 0) -> pd.DataFrame:
        """Rows from `start` on, with typed columns (kind and outcome categorical)."""
        df = pd.DataFrame({c: v[start:] for c, v in self._cols.items()})
        df["round"] = df["round"].astype(np.int64)
        df["node"] = df["node"].astype(np.int64)
        df["peer"] = df["peer"].astype(np.int64)
        for c in ("start_s", "end_s", "energy_j", "bits", "flops"):
            df[c] = df[c].astype(np.float64)
        df["kind"] = pd.Categorical(df["kind"], categories=KINDS)
        df["outcome"] = pd.Categorical(df["outcome"], categories=OUTCOMES)
        return df

    def columns(self) -> dict:
        """The rows for a checkpoint: numbers as float64/int64 arrays (saved in one piece, not
        value by value, which made every checkpoint cost more than the rounds between them),
        kind and outcome as lists of strings."""
        return {c: list(v) if c in ("kind", "outcome")
                else np.asarray(v, dtype=np.int64 if c in ("round", "node", "peer") else np.float64)
                for c, v in self._cols.items()}

    def load_columns(self, columns: dict) -> None:
        """Replay saved rows in order (resuming a run): the running totals come out identical."""
        values = [columns[c].tolist() if hasattr(columns[c], "tolist")
                  else list(map(_py, columns[c])) for c in COLUMNS]
        for row in zip(*values):
            self.add(*row)


def _py(value):
    return value.item() if hasattr(value, "item") else value
