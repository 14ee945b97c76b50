"""FedScale's device traces, converted to flnet's trace formats (`flnet.sim.traces`).

Followed from FedScale's code (SymbioticLab/FedScale at 7ec441c,
``fedscale/cloud/internal/client_metadata.py``, ``fedscale/cloud/client_manager.py``,
``benchmark/dataset/data/device_info/README.md``):

- Availability (``client_behave_trace``): a pickled dict, client id -> ``{'active': [s],
  'inactive': [s], 'finish_time': s, ...}``. ``ClientMetadata.is_active(t)`` replays it modulo
  ``finish_time`` and calls a client online when ``active[i] <= t mod finish_time <=
  inactive[i]``: the i-th on period runs from ``active[i]`` to ``inactive[i]``. flnet writes
  each pair as an interval ``[active[i], inactive[i])`` of a client with ``period_s =
  finish_time``. Choices where FedScale's code is not a rule: its ``is_active`` advances one
  remembered index per call (so a caller that skips a period can miss one); flnet uses the
  rule it approximates, online within any pair, so pairs are sorted and overlapping ones
  merged. Its intervals are closed, flnet's half-open (they differ at single instants). An
  ``active`` start with no ``inactive`` end runs to ``finish_time``; a pair is clipped to
  ``[0, finish_time]``; an empty one is dropped; a client left with none is written as never
  online. Other keys (``duration``, ``model``) are ignored.
- Capacity (``client_device_capacity``): client id -> ``{'computation': ms, 'communication':
  rate}``. ``get_completion_time`` charges ``3 * batch_size * local_steps * computation / 1000``
  seconds ("backward-pass takes around 2x the latency" of the traced inference) and
  ``(upload_size + download_size) / communication`` seconds with sizes in units of 1024 bits
  (the aggregator's ``getsizeof(pickle.dumps(model)) / 1024.0 * 8.0``). So flnet writes
  ``compute_s_per_sample = 3 * computation / 1000`` and ``up_rate_bps = down_rate_bps =
  communication * 1024``: a transfer then takes FedScale's seconds for the same bits.

Pickles run code when they are loaded, so these are read only by `read_plain_pickle`, which
refuses every class (nothing but dict, list, tuple, set, int, float, str, bytes, bool and None
can load) and files over `MAX_PICKLE_BYTES`.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from flnet.base.userfiles import open_bounded
from flnet.sim.traces import (
    CapacityTrace,
    TraceError,
    write_availability,
    write_capacity,
)

MAX_PICKLE_BYTES = 1 << 30
TRAINING_OVER_INFERENCE = 3.0  # FedScale's augmentation_factor: forward + backward
BITS_PER_FEDSCALE_KBIT = 1024.0  # FedScale sizes a model in getsizeof(...) / 1024 * 8


class _PlainDataUnpickler(pickle.Unpickler):
    """Loads only what pickle builds without looking anything up: every global (class,
    function) is refused, so no constructor, ``__reduce__`` or ``__setstate__`` runs."""

    def __init__(self, file: io.BufferedIOBase, path: Path) -> None:
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        raise TraceError(
            f"{self._path}: refused to load {module}.{name}: a trace pickle may hold only "
            "plain data (dict, list, tuple, int, float, str, bool, None)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise TraceError(f"{self._path}: refused a persistent reference: not plain data")


def read_plain_pickle(path: str | Path) -> Any:
    """The plain data in a pickle file, or a TraceError naming the file and what it held."""
    path = Path(path)
    with open_bounded(path, MAX_PICKLE_BYTES, "trace pickle", TraceError) as f:
        try:
            return _PlainDataUnpickler(f, path).load()
        except TraceError:
            raise
        except RecursionError:
            raise TraceError(f"{path}: nested too deeply to be a trace") from None
        except Exception as e:  # a torn or foreign file: pickle raises many kinds
            raise TraceError(f"{path} is not a readable pickle ({type(e).__name__}: {e})") from None


def _client_id(path: Path, key: Any) -> int:
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise TraceError(f"{path}: client key {_clip(key)} is not an integer id")
    try:
        value = int(key)
    except ValueError:  # also a string of over 4,300 digits
        raise TraceError(f"{path}: client key {_clip(key)} is not an integer id") from None
    if not -(2**63) <= value < 2**63:
        raise TraceError(
            f"{path}: client key {_clip(key)} does not fit 64 bits (at most {2**63 - 1:,})"
        )
    return value


def _clip(value: Any, limit: int = 40) -> str:
    """A key or value from the file, cut to `limit` characters: never echoed whole."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"<an integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _seconds(path: Path, key: Any, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"{path}: client {_clip(key)}: {field} holds {_clip(value)}, not a number")
    if not math.isfinite(value):
        raise TraceError(
            f"{path}: client {_clip(key)}: {field} holds {_clip(value)}, not a finite number"
        )
    return float(value)


def _entries(path: Path, data: Any) -> list[tuple[int, Any, dict]]:
    if not isinstance(data, dict) or not data:
        raise TraceError(f"{path}: expected a non-empty dict of client id -> dict")
    out = []
    for key, entry in data.items():
        if not isinstance(entry, dict):
            raise TraceError(
                f"{path}: client {_clip(key)} holds a {type(entry).__name__}, not a dict"
            )
        out.append((_client_id(path, key), key, entry))
    ids = [c for c, _, _ in out]
    if len(set(ids)) != len(ids):
        raise TraceError(f"{path}: two keys name the same client id")
    return out


def availability_intervals(
    path: str | Path,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """FedScale's availability pickle as rows (ids, from_s, until_s, period_s) and the ids of
    clients that are never online (module docstring)."""
    path = Path(path)
    ids: list[int] = []
    froms: list[float] = []
    untils: list[float] = []
    periods: list[float] = []
    never: list[int] = []
    for client, key, entry in _entries(path, read_plain_pickle(path)):
        for field in ("active", "inactive", "finish_time"):
            if field not in entry:
                raise TraceError(f"{path}: client {_clip(key)} has no {field!r}")
        period = _seconds(path, key, "finish_time", entry["finish_time"])
        if period <= 0:
            raise TraceError(
                f"{path}: client {_clip(key)}: finish_time must be > 0 (got {period:g})"
            )
        starts, ends = entry["active"], entry["inactive"]
        for field, seq in (("active", starts), ("inactive", ends)):
            if not isinstance(seq, (list, tuple)):
                raise TraceError(f"{path}: client {_clip(key)}: {field} is not a list")
        pairs = []
        for i, a in enumerate(starts):
            a_s = _seconds(path, key, f"active[{i}]", a)
            b_s = _seconds(path, key, f"inactive[{i}]", ends[i]) if i < len(ends) else period
            a_s, b_s = max(a_s, 0.0), min(b_s, period)
            if a_s < b_s:
                pairs.append((a_s, b_s))
        merged: list[list[float]] = []
        for a_s, b_s in sorted(pairs):
            if merged and a_s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b_s)
            else:
                merged.append([a_s, b_s])
        if not merged:
            never.append(client)
        for a_s, b_s in merged:
            ids.append(client)
            froms.append(a_s)
            untils.append(b_s)
            periods.append(period)
    return (
        np.array(ids, dtype=np.int64),
        np.array(froms),
        np.array(untils),
        np.array(periods),
        np.array(never, dtype=np.int64),
    )


def capacity(path: str | Path) -> CapacityTrace:
    """FedScale's capacity pickle in flnet's units (module docstring)."""
    path = Path(path)
    rows = []
    for client, key, entry in sorted(_entries(path, read_plain_pickle(path)), key=lambda e: e[0]):
        figures = []
        for field in ("computation", "communication"):
            if field not in entry:
                raise TraceError(f"{path}: client {_clip(key)} has no {field!r}")
            value = _seconds(path, key, field, entry[field])
            if value <= 0:
                raise TraceError(
                    f"{path}: client {_clip(key)}: {field} must be > 0 (got {value:g})"
                )
            figures.append(value)
        ms_per_inference, rate = figures
        rows.append((client, TRAINING_OVER_INFERENCE * ms_per_inference / 1000.0, rate))
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    rate_bps = np.array([r[2] for r in rows]) * BITS_PER_FEDSCALE_KBIT
    return CapacityTrace(ids, np.array([r[1] for r in rows]), rate_bps, rate_bps.copy())


def convert(
    availability: str | Path | None,
    capacity_pkl: str | Path | None,
    out: Path,
    force: bool = False,
) -> list[Path]:
    """Write `out`/availability.csv and/or `out`/capacity.csv; returns what was written.
    Both pickles are read and checked before anything is written; an existing CSV is
    replaced only with `force`."""
    tables: list[tuple[Path, Any]] = []
    if availability is not None:
        ids, a, b, period, never = availability_intervals(availability)
        comment = (
            f"converted from FedScale's availability trace {Path(availability).name} "
            "(flnet traces fedscale); period_s = its finish_time"
        )
        tables.append(
            (
                out / "availability.csv",
                lambda t: write_availability(
                    t, ids, a, b, period_s=period, never_online=never, comment=comment
                ),
            )
        )
    if capacity_pkl is not None:
        trace = capacity(capacity_pkl)
        note = (
            f"converted from FedScale's capacity trace {Path(capacity_pkl).name} "
            "(flnet traces fedscale): 3 x computation ms / 1000; communication x 1024 bit/s"
        )
        tables.append((out / "capacity.csv", lambda t: write_capacity(t, trace, comment=note)))
    if out.exists() and not out.is_dir():
        raise TraceError(f"{out} exists and is not a folder; -o names the folder for the CSVs")
    there = [str(target) for target, _ in tables if target.exists()]
    if there and not force:
        verb = "exists" if len(there) == 1 else "exist"
        raise TraceError(f"{' and '.join(there)} already {verb}; --force replaces")
    written = []
    for target, write in tables:
        part = target.with_name(target.name + ".part")
        try:
            out.mkdir(parents=True, exist_ok=True)
            write(part)
            os.replace(part, target)
        except OSError as e:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
            raise TraceError(f"cannot write {target}: {e.strerror}") from None
        written.append(target)
    return written
