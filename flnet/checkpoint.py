"""Checkpoints: what a run needs to continue from a safe point (`flnet.sim.patterns`).

At a safe point no client work is in flight (or, for `stream`, what is in flight is part of the
algorithm's state) and every random stream is keyed by the step or the work it belongs to, so the
whole trajectory resumes from: the algorithm's state (tensors and ints, handed over in the
`Progress` record), the simulated clock and event count, the records so far, and how much of the
two journals belongs to it: the ledger's (appended as the run goes, see `flnet.sim.ledger`) and
the per-client tables' (`flnet.journal`: each checkpoint appends only the rows changed since the
previous one, so a checkpoint at a million clients does not rewrite every client's row).
The file is written to a temporary name and renamed (atomic on POSIX), and read back with
``torch.load(weights_only=True)``: tensors and plain containers only, never arbitrary objects.
What comes back is checked field by field, so a torn, foreign or hand-edited file is one clear
error, never an AttributeError or KeyError further on.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import numbers
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
import torch

from flnet import output
from flnet.base import userfiles
from flnet.errors import FlnetError
from flnet.scenario import Scenario

FORMAT = 4  # 3: per-client state as ClientTable rows; 4: those rows in the table journal
FILE = output.CHECKPOINT
JOURNAL = output.JOURNAL  # the ledger, appended at each checkpoint (Ledger.flush)


class Checkpoint(NamedTuple):
    round: int  # the step: the pattern's unit (round, iteration, server update)
    events: int  # client results delivered so far
    now_s: float
    state: dict  # the algorithm's State fields
    tables: dict  # TableJournal.position(): where the per-client rows end in their journal
    ledger_rows: int  # rows of the journal that belong to this checkpoint
    ledger_bytes: int  # and their length in bytes
    records: list[dict]
    stop_reason: str | None
    scenario: dict  # the scenario's fields that define the trajectory
    # sha256 of each input file's bytes (`input_digests`), by the scenario field naming it;
    # None: a checkpoint written before digests were kept (it resumes unchecked, as it did)
    inputs: dict[str, str | None] | None = None
    # the resource policies' history (`flnet.sim.resources.Policies.state`); None: none
    resources: dict | None = None


def trajectory_fields(scenario: Scenario) -> dict:
    """The scenario minus what may change between a run and its resumption (when to stop,
    where to write, which folder holds the data sets' files, what its series is called)."""
    exclude: dict[str, Any] = {
        "run": True,
        "output": True,
        "name": True,
        "label": True,
        "data": {"root"},
    }
    if scenario.resources is None:  # unset: as checkpoints written before the field existed
        exclude["resources"] = True
    return scenario.model_dump(mode="json", exclude=exclude)


def input_digests(files: dict[str, str]) -> dict[str, str | None]:
    """sha256 of each file's bytes ({field: path} -> {field: hex digest}; None: it cannot be
    read): what a resumed run checks its inputs against, so that a trace or features file
    edited between a checkpoint and its resumption is refused, not mixed into one run."""
    out: dict[str, str | None] = {}
    for field, path in files.items():
        try:
            sha = hashlib.sha256()
            with userfiles.open_regular(path, 1 << 40, "input file") as f:  # never a FIFO or device
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    sha.update(chunk)
            out[field] = sha.hexdigest()
        except (OSError, FlnetError):
            out[field] = None
    return out


NAMEDTUPLE = "__namedtuple__"  # key naming a NamedTuple's class (a field cannot start with _)
ALLOWED_MODULES = ("flnet.",)  # the only modules a checkpoint may name a class from


def _plain(value: Any) -> Any:
    """numpy scalars and arrays -> Python numbers and tensors, and NamedTuples -> dicts that
    name their class, at any depth (loadable with weights_only; `_rebuilt` undoes it)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        cls = type(value)
        fields = {k: _plain(v) for k, v in cast(Any, value)._asdict().items()}
        return {NAMEDTUPLE: f"{cls.__module__}:{cls.__qualname__}", **fields}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _rebuilt(value: Any) -> Any:
    """`_plain`'s NamedTuples back, at any depth. A class is looked up only in flnet's own
    modules and must be a NamedTuple: a checkpoint never makes other code run."""
    if isinstance(value, dict):
        fields = {k: _rebuilt(v) for k, v in value.items() if k != NAMEDTUPLE}
        return _namedtuple(value[NAMEDTUPLE])(**fields) if NAMEDTUPLE in value else fields
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuilt(v) for v in value)
    return value


def _namedtuple(name: Any) -> type:
    module, _, qualname = str(name).partition(":")
    if not module.startswith(ALLOWED_MODULES) or not qualname:
        raise ValueError(f"it names {name!r}, not a NamedTuple of flnet")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError):
        raise ValueError(f"it names {name!r}, which this flnet does not have") from None
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(f"it names {name!r}, which is not a NamedTuple")
    return cls


def save(directory: Path, ckpt: Checkpoint, committed: Callable[[], None] | None = None) -> Path:
    """Write atomically (`committed` as in `output.atomic`) and durably: the file is fsynced
    before its rename and the folder after it, before `committed` (which may delete the journal
    file the previous checkpoint named); the journals it points into were fsynced before this is
    called (`Checkpointer.save_or_raise`). A failed write raises the OSError behind it
    (torch reports one as a RuntimeError) and leaves the previous checkpoint as it was."""
    path = directory / FILE
    payload = {"format": FORMAT, **{k: _plain(v) for k, v in ckpt._asdict().items()}}
    payload["scenario"] = json.dumps(ckpt.scenario, sort_keys=True)
    with output.atomic(path, committed, durable=True) as tmp:
        try:
            with open(tmp, "wb") as f:  # a file object: torch keeps the OSError as context
                torch.save(payload, f)
                f.flush()
                os.fsync(f.fileno())  # its bytes on disk before the name points at them
        except RuntimeError as e:
            raise (output.os_error(e) or e) from None
    return path


def load(directory: Path, device: torch.device) -> Checkpoint | None:
    """The checkpoint in `directory`, None when there is none; a file that is not a whole
    checkpoint of this format is a FlnetError naming it and what is wrong."""
    path = directory / FILE
    if not path.exists():
        return None
    userfiles.check_regular(
        path, "checkpoint", FlnetError
    )  # a FIFO or device would block or never end
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # torn, foreign, or not loadable without running code
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise FlnetError(
            f"cannot read checkpoint {path}: it is truncated or not an flnet "
            f"checkpoint ({e.__class__.__name__}{': ' + first if first else ''}); "
            "start afresh with --force"
        ) from None
    problem = _problem(payload)
    if problem:
        raise FlnetError(
            f"checkpoint {path} is not an flnet checkpoint of format {FORMAT}: "
            f"{problem}; start afresh with --force"
        )
    payload.pop("format")
    payload["scenario"] = json.loads(payload["scenario"])
    try:
        payload["state"] = _rebuilt(payload["state"])
    except (TypeError, ValueError) as e:  # a class we do not have, or fields it does not take
        raise FlnetError(
            f"checkpoint {path} holds an algorithm state this flnet cannot rebuild: {e}; "
            "start afresh with --force"
        ) from None
    return Checkpoint(**payload)


def _problem(payload: Any) -> str | None:
    """What is wrong with a loaded payload, or None: every field there, of its type."""
    if not isinstance(payload, dict):
        return f"it holds a {type(payload).__name__}, not a mapping"
    if payload.get("format") != FORMAT:
        return f"its format is {payload.get('format')!r}"
    expected = {"format", *Checkpoint._fields}
    # absent from checkpoints written before input digests, or resource policies
    optional = {"inputs", "resources"}
    if not expected - optional <= set(payload) <= expected:
        missing = sorted(expected - optional - set(payload))
        extra = sorted(set(payload) - expected)
        return "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"unexpected {', '.join(map(str, extra))}"] if extra else [])
        )
    types: dict[str, type | tuple[type, ...]] = {
        "round": numbers.Integral,
        "events": numbers.Integral,
        "now_s": numbers.Real,
        "state": dict,
        "tables": dict,
        "ledger_rows": numbers.Integral,
        "ledger_bytes": numbers.Integral,
        "records": list,
        "stop_reason": (str, type(None)),
        "scenario": str,
    }
    for name, kind in types.items():
        if not isinstance(payload[name], kind) or isinstance(payload[name], bool):
            return f"{name} is a {type(payload[name]).__name__}"
    if not isinstance(payload.get("resources"), (dict, type(None))):
        return "its resource policies' history is not a mapping"
    inputs = payload.get("inputs")
    if inputs is not None and not (
        isinstance(inputs, dict)
        and all(isinstance(k, str) and isinstance(v, (str, type(None))) for k, v in inputs.items())
    ):
        return "its input digests are not a mapping of field to digest"
    for name in ("round", "events", "ledger_rows", "ledger_bytes"):
        if payload[name] < 0:
            return f"{name} is {payload[name]}"
    tables = _table_problem(payload["tables"])
    if tables:
        return f"its table journal position {tables}"
    if not all(isinstance(r, dict) for r in payload["records"]):
        return "its records are not rows"
    try:
        scenario = json.loads(payload["scenario"])
    except ValueError:
        return "its scenario is not JSON"
    if not isinstance(scenario, dict):
        return "its scenario is not a mapping"
    return None


def _table_problem(position: dict) -> str | None:
    """What is wrong with a table journal position (`flnet.journal`), or None."""
    fields = {"file": str, "entries": numbers.Integral, "bytes": numbers.Integral, "sha256": str}
    if set(position) != set(fields):
        return f"has fields {sorted(map(str, position))}, not {sorted(fields)}"
    for name, kind in fields.items():
        if not isinstance(position[name], kind) or isinstance(position[name], bool):
            return f"has a {type(position[name]).__name__} {name}"
    if position["file"] not in output.TABLE_JOURNALS:
        return f"names the file {position['file']!r}, not one of {list(output.TABLE_JOURNALS)}"
    if position["entries"] < 0 or position["bytes"] < 0:
        return "has a negative count"
    return None


def differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted paths where two nested mappings differ."""
    out = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}{key}"
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += differences(va, vb, path + ".")
        elif va != vb:
            out.append(path)
    return out
