"""Algorithms, one module each: a frozen `Config` (defined in the light `configs` module),
`init(learn, cfg) -> State`, `progress(state) -> Progress` (what observers judge), pure maths,
and `protocol(world, learn, cfg, state)`, a SimPy generator over one of `flnet.sim.patterns`
that reads like the paper's pseudocode.

`ALGORITHMS[name]` imports an algorithm's module on first use, so the scenario schema (which
needs only `configs.CONFIGS`) never loads torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from types import ModuleType

MODULES = {
    "fedavg": "flnet.algorithms.fedavg",
    "fedprox": "flnet.algorithms.fedprox",
    "dpsgd": "flnet.algorithms.dpsgd",
    "fedbuff": "flnet.algorithms.fedbuff",
    "scaffold": "flnet.algorithms.scaffold",
}


class _Lazy(Mapping):
    def __getitem__(self, name: str) -> ModuleType:
        return import_module(MODULES[name])

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)


ALGORITHMS: Mapping[str, ModuleType] = _Lazy()
