"""Algorithms, one module each: a frozen `Config` (defined in the light `configs` module),
`init(learn, cfg) -> State`, `progress(state) -> Progress` (what observers judge), pure maths,
and `protocol(world, learn, cfg, state) -> Steps`, a SimPy generator over one of
`flnet.sim.patterns` that reads like the paper. `base.AlgorithmModule` states that shape once;
each module checks itself against it for mypy (its last lines), and `ALGORITHMS` on first use.

`ALGORITHMS[name]` imports the module its record (`records.RECORDS`) names on first use, so the
scenario schema (which needs only the records and their configs) never loads torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

from flnet.algorithms.records import RECORDS

MODULES = {name: record.module for name, record in RECORDS.items()}  # every module's path

if TYPE_CHECKING:
    from flnet.algorithms.base import AlgorithmModule


class _Lazy(Mapping):
    def __getitem__(self, name: str) -> AlgorithmModule[Any, Any]:
        from flnet.algorithms.base import AlgorithmModule  # loads simpy: not for the schema

        module = import_module(RECORDS[name].module)
        if not isinstance(module, AlgorithmModule):
            raise TypeError(
                f"{module.__name__} is not an algorithm module: it needs State, init, progress "
                "and protocol (flnet.algorithms.base.AlgorithmModule)"
            )
        config = RECORDS[name].config
        if getattr(module, "Config", None) is not config:
            raise TypeError(
                f"{module.__name__}.Config is not {config.__name__}, the config of its record "
                "in flnet/algorithms/records.py"
            )
        return module

    def __iter__(self) -> Iterator[str]:
        return iter(RECORDS)

    def __len__(self) -> int:
        return len(RECORDS)


ALGORITHMS: Mapping[str, AlgorithmModule[Any, Any]] = _Lazy()
