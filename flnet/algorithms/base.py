"""The shape of an algorithm module, stated once.

A module is its own implementation of `AlgorithmModule` (PEP 544 lets a module satisfy a
Protocol), so an algorithm file stays a flat list of functions that read like the paper, with
no class to inherit from. Each module checks itself against it for mypy, with its own `Config`
and `State` (its last lines); the registry (`flnet/algorithms/__init__.py`) checks at import
that the members are there.

A module may take more than the runner passes (`loss_fn=` for tests); what it must accept is
what `flnet.runner` calls it with, written here. Optionally `check(world, learn, cfg)`: what
its protocol checks before its first step (a gossip W's properties), run without the
simulation by `flnet validate` (`runner.check`), so that validate says what a run would.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, runtime_checkable

import simpy

if TYPE_CHECKING:  # annotations only: the registry loads this module with the algorithm
    from flnet.learn.local import Learner
    from flnet.sim.world import AbstractWorld, Progress

Steps: TypeAlias = Generator[simpy.Event, Any, None]
"""A protocol as SimPy runs it: yields the World's events (or a pattern's, via `yield from`),
returns nothing; what it learns it publishes."""

Cfg = TypeVar("Cfg", contravariant=True)  # the module's `Config` (its scenario section)
S = TypeVar("S")  # the module's `State`


@runtime_checkable
class AlgorithmModule(Protocol[Cfg, S]):
    """What `flnet.runner` uses of an algorithm module."""

    @property
    def State(self) -> type[S]:
        """A NamedTuple of tensors and numbers: what a checkpoint saves, `State(**saved)`."""

    def init(self, learn: Learner, cfg: Cfg) -> S:
        """The state before step 1."""

    def progress(self, state: S) -> Progress:
        """What observers judge after step `state.round` (and after init, step 0)."""

    def protocol(self, world: AbstractWorld, learn: Learner, cfg: Cfg, state: S) -> Steps:
        """Steps from `state` on, each published; the run ends when it returns."""
