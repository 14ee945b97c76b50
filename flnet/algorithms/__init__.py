"""Algorithms, one module each: a frozen `Config` (defined in the light `configs` module),
`init(learn, cfg) -> State`, `progress(state) -> Progress` (what observers judge), pure maths,
and `protocol(world, learn, cfg, state) -> Steps`, a SimPy generator over one of
`flnet.sim.patterns` that reads like the paper. `base.AlgorithmModule` states that shape once;
each module checks itself against it for mypy (its last lines), and `ALGORITHMS` on first use.

`ALGORITHMS[name]` imports an algorithm's module on first use, so the scenario schema (which
needs only `configs.CONFIGS`) never loads torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

MODULES = {
    "fedavg": "flnet.algorithms.fedavg",
    "fedprox": "flnet.algorithms.fedprox",
    "dpsgd": "flnet.algorithms.dpsgd",
    "fedbuff": "flnet.algorithms.fedbuff",
    "fedasync": "flnet.algorithms.fedasync",
    "scaffold": "flnet.algorithms.scaffold",
    "feddyn": "flnet.algorithms.feddyn",
    "moon": "flnet.algorithms.moon",
    "drfa": "flnet.algorithms.drfa",
    "drdm": "flnet.algorithms.drdm",
    "dfedavg": "flnet.algorithms.dfedavg",
    "dfedavgm": "flnet.algorithms.dfedavgm",
    "dfedsam": "flnet.algorithms.dfedsam",
    "oledfl_sgd": "flnet.algorithms.oledfl",
    "oledfl_sam": "flnet.algorithms.oledfl_sam",
    "dfl": "flnet.algorithms.dfl",
    "cdfl": "flnet.algorithms.cdfl",
    "mm_psgd": "flnet.algorithms.mm_psgd",
    "mc_psgd": "flnet.algorithms.mc_psgd",
}

if TYPE_CHECKING:
    from flnet.algorithms.base import AlgorithmModule


class _Lazy(Mapping):
    def __getitem__(self, name: str) -> AlgorithmModule[Any, Any]:
        from flnet.algorithms.base import AlgorithmModule  # loads simpy: not for the schema

        module = import_module(MODULES[name])
        if not isinstance(module, AlgorithmModule):
            raise TypeError(
                f"{module.__name__} is not an algorithm module: it needs State, init, progress "
                "and protocol (flnet.algorithms.base.AlgorithmModule)"
            )
        return module

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)


ALGORITHMS: Mapping[str, AlgorithmModule[Any, Any]] = _Lazy()
