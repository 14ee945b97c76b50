"""One record per algorithm: what the rest of flnet knows of an algorithm without loading its
module (torch). The scenario's union of algorithm sections (`CONFIGS`) and its cross-section
checks, the registry's module paths (`flnet.algorithms.MODULES`), trajectory reuse and
timing-only runs read these records rather than keep lists of algorithms of their own.

Light (pydantic and the standard library): `flnet validate` and `flnet schema` build the scenario
from here without the maths. Adding an algorithm is its module (`flnet/algorithms/<name>.py`,
which re-exports its `Config`), its `Config` (a class in `configs.py`), its record below (named
in `RECORDS`) and its test (docs/how-to/add-algorithm.md); `tests/test_algorithm_records.py`
checks that the records, their configs and their modules agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel

from flnet.algorithms.configs import (
    CdflConfig,
    DfedavgConfig,
    DfedavgmConfig,
    DfedsamConfig,
    DflConfig,
    DpsgdConfig,
    DrdmConfig,
    DrfaConfig,
    FedAsyncConfig,
    FedAvgConfig,
    FedBuffConfig,
    FedDynConfig,
    FedProxConfig,
    McPsgdConfig,
    MmPsgdConfig,
    MoonConfig,
    OledflSamConfig,
    OledflSgdConfig,
    ScaffoldConfig,
)

Pattern = Literal["round_trip", "exchange", "stream"]  # flnet.sim.patterns: what a step is


class Problem(NamedTuple):
    """Why a scenario cannot run an algorithm: the field to change, and the sentence that says
    why (`Scenario` raises it as an `inconsistent` error on that field)."""

    field: str
    message: str


# What an algorithm's own checks read of the scenario: Protocols, so that this module need not
# import scenario.py (which imports it); `Scenario` matches them as it is.


class _D2dView(Protocol):
    @property
    def loss_probability(self) -> float: ...


class _RadioView(Protocol):
    @property
    def d2d(self) -> _D2dView: ...


class _AvailabilityView(Protocol):
    @property
    def kind(self) -> str: ...


class _ClientsView(Protocol):
    @property
    def availability(self) -> _AvailabilityView: ...

    @property
    def battery(self) -> object: ...

    @property
    def dropout_probability(self) -> float: ...


class ScenarioView(Protocol):
    """The sections of a scenario that algorithms' checks read."""

    @property
    def clients(self) -> _ClientsView: ...

    @property
    def radio(self) -> _RadioView: ...


@dataclass(frozen=True)
class Replay:
    """Trajectory reuse and timing-only runs may replay this round-trip algorithm (`flnet.reuse`
    says when that is sound): each message's size in models, server to client and back."""

    down_models: int
    up_models: int


@dataclass(frozen=True)
class NotReplayable:
    """Why trajectory reuse cannot replay this algorithm (shown to the user)."""

    why: str


C = TypeVar("C", bound=BaseModel)

Check = Callable[[C, ScenarioView], Problem | None]


@dataclass(frozen=True)
class AlgorithmRecord(Generic[C]):
    """An algorithm, as the scenario, the registry and trajectory reuse need to know it.

    `replay` None: not examined, so not replayed (reuse says "not known to be replayable").
    `extra_forwards`: forward passes each gradient evaluation adds (MOON's contrastive term runs
    the global and the previous model too); the FLOPs a timing-only run charges. `follows_blocks`:
    the algorithm passes the round's data block to the learner (block-cyclic data). `checks`:
    the algorithm's own conditions on the rest of the scenario, in order; each returns the first
    `Problem` it finds or None.
    """

    config: type[C]
    module: str  # imported on first use (`flnet.algorithms.ALGORITHMS`)
    pattern: Pattern
    replay: Replay | NotReplayable | None = None
    extra_forwards: int = 0
    follows_blocks: bool = False
    checks: tuple[Check[C], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.config.model_fields["name"].default, str):
            raise TypeError(f"{self.config.__name__} needs a `name` with its default")
        if isinstance(self.replay, Replay) and self.pattern != "round_trip":
            raise ValueError(f"{self.name}: only round trips are replayed, not {self.pattern}")
        if self.extra_forwards < 0:
            raise ValueError(f"{self.name}: extra_forwards {self.extra_forwards} < 0")

    @property
    def name(self) -> str:
        """The scenario's `algorithm.name`: the default of the config's `name` field."""
        name: str = self.config.model_fields["name"].default
        return name


# ---------------------------------------------------------------- C-DFL's conditions
# C-DFL keeps public copies of every node's model at its neighbours, updated by compressed
# messages it never resends: whatever loses one message splits the copies for good.


def _cdfl_lossless_d2d(cfg: CdflConfig, scenario: ScenarioView) -> Problem | None:
    if scenario.radio.d2d.loss_probability > 0:
        return Problem(
            "radio.d2d.loss_probability",
            "must be 0 for cdfl: a lost compressed message would leave the public copies "
            "of its sender apart (C-DFL has no way to resend it)",
        )
    return None


def _cdfl_always_online(cfg: CdflConfig, scenario: ScenarioView) -> Problem | None:
    kind = scenario.clients.availability.kind
    if kind != "always":
        return Problem(
            "clients.availability.kind",
            f"must be 'always' for cdfl, got '{kind}': an offline node would miss its "
            "neighbours' compressed messages and leave the public copies apart (C-DFL has no "
            "way to resend them)",
        )
    return None


def _cdfl_no_battery(cfg: CdflConfig, scenario: ScenarioView) -> Problem | None:
    if scenario.clients.battery is not None:
        return Problem(
            "clients.battery",
            "must be unset for cdfl: a node opted out by its battery would miss its "
            "neighbours' compressed messages and leave the public copies apart (C-DFL has no "
            "way to resend them)",
        )
    return None


def _cdfl_no_dropout(cfg: CdflConfig, scenario: ScenarioView) -> Problem | None:
    if scenario.clients.dropout_probability > 0:
        return Problem(
            "clients.dropout_probability",
            "must be 0 for cdfl: a node that drops out of its local work sends no compressed "
            "message that round and leaves the public copies apart (C-DFL has no way to "
            "resend it)",
        )
    return None


def _cdfl_fixed_graph(cfg: CdflConfig, scenario: ScenarioView) -> Problem | None:
    if cfg.topology.kind == "random_k":
        return Problem(
            "algorithm.topology.kind",
            "cdfl needs a fixed graph: each node's public copy is held by its neighbours, "
            "which random_k draws afresh every round",
        )
    return None


# ---------------------------------------------------------------- the records

FEDAVG = AlgorithmRecord(
    FedAvgConfig, "flnet.algorithms.fedavg", "round_trip", replay=Replay(1, 1), follows_blocks=True
)

FEDPROX = AlgorithmRecord(
    FedProxConfig, "flnet.algorithms.fedprox", "round_trip", replay=Replay(1, 1)
)

DPSGD = AlgorithmRecord(
    DpsgdConfig,
    "flnet.algorithms.dpsgd",
    "exchange",
    replay=NotReplayable("D-PSGD's gossip is not replayed (its timeout would let timing decide)"),
)

FEDBUFF = AlgorithmRecord(
    FedBuffConfig,
    "flnet.algorithms.fedbuff",
    "stream",
    replay=NotReplayable("FedBuff's stream aggregates uploads in arrival order (timing decides)"),
)

FEDASYNC = AlgorithmRecord(FedAsyncConfig, "flnet.algorithms.fedasync", "stream")

SCAFFOLD = AlgorithmRecord(
    ScaffoldConfig, "flnet.algorithms.scaffold", "round_trip", replay=Replay(2, 2)
)

FEDDYN = AlgorithmRecord(FedDynConfig, "flnet.algorithms.feddyn", "round_trip", replay=Replay(1, 1))

MOON = AlgorithmRecord(
    MoonConfig, "flnet.algorithms.moon", "round_trip", replay=Replay(1, 1), extra_forwards=2
)

DRFA = AlgorithmRecord(
    DrfaConfig,
    "flnet.algorithms.drfa",
    "round_trip",
    replay=NotReplayable(
        "DRFA's rounds hold a second round trip (the dual step), which is not replayed"
    ),
)

DRDM = AlgorithmRecord(
    DrdmConfig,
    "flnet.algorithms.drdm",
    "round_trip",
    replay=NotReplayable(
        "DRDM's rounds hold a second round trip (the dual step), which is not replayed"
    ),
)

DFEDAVG = AlgorithmRecord(DfedavgConfig, "flnet.algorithms.dfedavg", "exchange")

DFEDAVGM = AlgorithmRecord(DfedavgmConfig, "flnet.algorithms.dfedavgm", "exchange")

DFEDSAM = AlgorithmRecord(DfedsamConfig, "flnet.algorithms.dfedsam", "exchange")

OLEDFL_SGD = AlgorithmRecord(OledflSgdConfig, "flnet.algorithms.oledfl", "exchange")

OLEDFL_SAM = AlgorithmRecord(OledflSamConfig, "flnet.algorithms.oledfl_sam", "exchange")

DFL = AlgorithmRecord(DflConfig, "flnet.algorithms.dfl", "exchange")

CDFL = AlgorithmRecord(
    CdflConfig,
    "flnet.algorithms.cdfl",
    "exchange",
    checks=(
        _cdfl_lossless_d2d,
        _cdfl_always_online,
        _cdfl_no_battery,
        _cdfl_no_dropout,
        _cdfl_fixed_graph,
    ),
)

MM_PSGD = AlgorithmRecord(
    MmPsgdConfig, "flnet.algorithms.mm_psgd", "round_trip", follows_blocks=True
)

MC_PSGD = AlgorithmRecord(
    McPsgdConfig, "flnet.algorithms.mc_psgd", "round_trip", follows_blocks=True
)


def by_name(*records: AlgorithmRecord[Any]) -> dict[str, AlgorithmRecord[Any]]:
    """The records by their scenario names, refusing two of one name."""
    named = {record.name: record for record in records}
    if len(named) != len(records):
        raise ValueError(f"two records of one name among {[r.name for r in records]}")
    return named


RECORDS = by_name(
    FEDAVG,
    FEDPROX,
    DPSGD,
    FEDBUFF,
    FEDASYNC,
    SCAFFOLD,
    FEDDYN,
    MOON,
    DRFA,
    DRDM,
    DFEDAVG,
    DFEDAVGM,
    DFEDSAM,
    OLEDFL_SGD,
    OLEDFL_SAM,
    DFL,
    CDFL,
    MM_PSGD,
    MC_PSGD,
)
"""Every algorithm by its scenario name, in the order the schema lists them."""

CONFIGS: dict[str, type[BaseModel]] = {name: r.config for name, r in RECORDS.items()}
"""Each algorithm's scenario section by name; the scenario's `algorithm` is their union."""
