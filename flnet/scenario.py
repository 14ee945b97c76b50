"""The scenario file: one validated schema for everything a run needs.

``load_scenario(path)`` reads YAML (safely), follows ``extends:`` chains, applies ``--set``
overrides and validates. Every mistake becomes one `ScenarioError` whose lines name the field
(``radio.uplink.bandwidth_hz``) and what is allowed.

The sections' types live in `flnet.schema` (below sim/ and learn/, which use them); this module
joins them into `Scenario` with the checks across sections, and re-exports them.
"""

from __future__ import annotations

import copy
import json
import reprlib
import types
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from flnet import units
from flnet.algorithms.records import CONFIGS, RECORDS
from flnet.base import userfiles, yaml_text
from flnet.config import Strict, topology_problem
from flnet.dists import PerClient
from flnet.errors import ScenarioError, UnitWarning
from flnet.schema import *  # noqa: F403  (re-exported: `from flnet.scenario import X` works)
from flnet.schema import (
    D2D,
    ClientsConfig,
    DataConfig,
    MlpConfig,
    ModelConfig,
    OutputConfig,
    PhysicalRadio,
    Radio,
    ResourcesConfig,
    RunConfig,
    inconsistent,
)


def _algorithm_union() -> Any:
    configs = tuple(CONFIGS.values())
    if len(configs) == 1:
        return configs[0]
    return Annotated[Union[configs], Field(discriminator="name")]  # noqa: UP007 (a tuple)


if TYPE_CHECKING:  # mypy cannot follow the union built from CONFIGS: it sees what all configs have
    from flnet.algorithms.configs import AnyAlgorithmConfig as AlgorithmConfig
else:
    AlgorithmConfig = _algorithm_union()


class Scenario(Strict):
    name: str = Field(
        "scenario",
        description="one plain path component: the default results folder is runs/<name>",
    )
    label: str | None = Field(
        None,
        description="the name of this run's series in plots, reports and flnet.compare; "
        "default: the fewest fields that tell the runs apart",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**32 - 1,
        description="root of every random stream: the same seed, the same run",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where the training maths runs; auto: cuda when present, else cpu"
    )
    data: DataConfig = Field(
        DataConfig(), description="the data set and how it is split among the clients"
    )
    model: ModelConfig = Field(MlpConfig(), description="the model trained, chosen by `kind`")
    algorithm: AlgorithmConfig = Field(description="the learning algorithm, chosen by `name`")
    clients: ClientsConfig = ClientsConfig()
    radio: Radio = Field(
        PhysicalRadio(),
        description="links, powers and bands; `mode` physical (SNR from distance) or direct (SNR "
        "in dB)",
    )
    resources: ResourcesConfig | None = Field(
        None,
        description="per-round resource policies (scheduling, bandwidth, CPU frequency and "
        "transmit power) for round-trip algorithms; null: none (today's behaviour)",
    )
    run: RunConfig = RunConfig()
    output: OutputConfig = Field(
        OutputConfig(), description="where and in which format results are written"
    )

    @model_validator(mode="before")
    @classmethod
    def _default_tags(cls, data: Any) -> Any:
        """`radio:` without `mode:` is physical; `model:` without `kind:` is an MLP."""
        if isinstance(data, dict):
            for section, tag, default in (("radio", "mode", "physical"), ("model", "kind", "mlp")):
                if isinstance(data.get(section), dict) and tag not in data[section]:
                    data = {**data, section: {tag: default, **data[section]}}
        return data

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        """The name becomes a folder name (runs/<name>): never a path that leaves it."""
        bad = (
            "is empty"
            if not name
            else "is '.' or '..'"
            if name in (".", "..")
            else "holds a path separator"
            if "/" in name or "\\" in name
            else "holds a NUL character"
            if "\0" in name
            else "is longer than 255 bytes"
            if len(name.encode("utf-8", "replace")) > 255
            else None
        )
        if bad:
            raise ValueError(
                f"{bad}; the name is a folder name (runs/<name>), so it must be one "
                f"plain path component: not empty, not '.' or '..', no '/', '\\' "
                f"or NUL, at most 255 bytes"
            )
        return name

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        n = self.clients.count
        cohort = getattr(self.algorithm, "cohort", None)
        if cohort is not None and cohort.k(n) > n:
            raise inconsistent(
                "algorithm.cohort.clients_per_round",
                f"{cohort.k(n)} clients per round but clients.count is {n}",
            )
        m = getattr(self.algorithm, "clients_per_round", None)  # DRFA, DRDM: m
        if m is not None and m > n:
            raise inconsistent(
                "algorithm.clients_per_round",
                f"m = {m} clients per round (and in the dual step) but clients.count is {n}",
            )
        topology = getattr(self.algorithm, "topology", None)
        problem = topology_problem(topology, n) if topology is not None else None
        if problem is not None:
            raise inconsistent(f"algorithm.topology.{problem[0]}", problem[1])
        if self.data.blocks is not None and self.algorithm.name not in BLOCK_AWARE:
            raise inconsistent(
                "data.blocks",
                f"block-cyclic data is followed by {', '.join(BLOCK_AWARE)} only; "
                f"{self.algorithm.name} would train on block 0's rows throughout",
            )
        if self.clients.capacity_trace is not None and self.radio.rayleigh_fading:
            raise inconsistent(
                "radio.rayleigh_fading",
                "a capacity trace gives each link's measured rate (clients.capacity_trace); "
                "fading would scale it, so the two do not go together",
            )
        pattern = RECORDS[self.algorithm.name].pattern
        d2d = self.radio.d2d
        d2d_set = [f for f in type(d2d).model_fields if getattr(d2d, f) != getattr(D2D(), f)]
        if d2d_set and pattern != "exchange":
            raise inconsistent(
                f"radio.d2d.{d2d_set[0]}",
                f"{self.algorithm.name} sends nothing device to device (its messages go by "
                f"{pattern}, through the server's links): radio.d2d is for gossip algorithms",
            )
        if getattr(self.radio, "cells", None) is not None and pattern == "exchange":
            raise inconsistent(
                "radio.cells",
                f"{self.algorithm.name} is a gossip algorithm: its nodes talk device to device "
                "(radio.d2d), not through the cells' base stations",
            )
        judged = getattr(self.clients.availability, "check", "during")
        if judged == "at_completion" and pattern == "exchange":
            raise inconsistent(
                "clients.availability.check",
                f"at_completion judges an upload by who is online as it ends; "
                f"{self.algorithm.name} uploads nothing: a gossip node is asked at the "
                "iteration's start and sits it out if offline (leave check: during)",
            )
        for check in RECORDS[self.algorithm.name].checks:  # the algorithm's own
            problem = check(self.algorithm, self)
            if problem is not None:
                raise inconsistent(problem.field, problem.message)
        if getattr(topology, "kind", None) == "random_geometric" and self.clients.positions is None:
            raise inconsistent(
                "algorithm.topology.kind",
                "random_geometric needs clients.positions (uniform or given)",
            )
        if self.radio.d2d.path_loss is not None and self.clients.positions is None:
            raise inconsistent(
                "radio.d2d.path_loss",
                "needs clients.positions (uniform or given) to measure distances",
            )
        cells = getattr(self.radio, "cells", None)
        if cells is not None and self.clients.positions is None:
            raise inconsistent(
                "radio.cells",
                "needs clients.positions (uniform or given) to measure distances to stations",
            )
        moving = getattr(cells, "mobility", None)
        positions = self.clients.positions
        if moving is not None and moving.side_m is None and positions is not None:
            if positions.kind != "uniform":
                raise inconsistent(
                    "radio.cells.mobility.side_m",
                    "needed with given positions (the square the clients walk in)",
                )
        if cells is not None and self.clients.capacity_trace is not None:
            raise inconsistent(
                "radio.cells",
                "a capacity trace gives each link's measured rate (clients.capacity_trace); "
                "cells compute rates from positions, so the two do not go together",
            )
        if self.run.divergence.consensus_above is not None and topology is None:
            raise inconsistent(
                "run.divergence.consensus_above",
                f"{self.algorithm.name} keeps one model: no consensus distance to bound "
                "(gossip algorithms only)",
            )
        problem = self._resources_problem()
        if problem is not None:
            raise inconsistent(*problem)
        for section in ("clients", "radio"):
            for name, value in getattr(self, section):
                if isinstance(value, PerClient) and len(value.values) != n:
                    raise inconsistent(
                        f"{section}.{name}",
                        f"lists {len(value.values)} per_client values for clients.count = {n}",
                    )
        return self

    def _resources_problem(self) -> tuple[str, str] | None:
        """Why the resource policies cannot apply to this scenario (field, why), or None."""
        res, name = self.resources, self.algorithm.name
        if res is None:
            return None
        pattern = RECORDS[name].pattern
        if name not in RESOURCE_AWARE:
            kind = {
                "exchange": "a gossip algorithm",
                "stream": "an asynchronous algorithm (work items, no rounds)",
            }.get(pattern, "a round trip the policies are not wired into")
            return (
                "resources",
                f"resource policies ({res.named}) apply to round trips "
                f"whose server draws its cohort uniformly ({', '.join(RESOURCE_AWARE)}); "
                f"{name} is {kind}",
            )
        cohort = getattr(self.algorithm, "cohort", None)
        sampling = getattr(cohort, "sampling", "uniform")
        if sampling != "uniform" and res.active:
            return (
                "resources.scheduling",
                f"{name}'s algorithm.cohort.sampling is {sampling}: the cohort is drawn by "
                "data size, which a scheduler would override; use sampling: uniform",
            )
        cut_s = getattr(cohort, "deadline_s", None)  # the server's own deadline
        needs = res.needs_deadline
        if needs is not None and res.deadline_s is None and cut_s is None:
            return (
                "resources.deadline_s",
                f"{needs} needs the deadline it keeps to (seconds): set resources.deadline_s "
                "or algorithm.cohort.deadline_s",
            )
        if res.deadline_s is not None and cut_s is not None and res.deadline_s > cut_s:
            return (
                "resources.deadline_s",
                f"{res.deadline_s:g} s is later than algorithm.cohort.deadline_s = {cut_s:g} s, "
                "where the server cuts the round: a plan for it would lose its members",
            )
        if res.bandwidth != "equal" and self.radio.uplink.sharing != "shared":
            return (
                "radio.uplink.sharing",
                f"resources.bandwidth {res.bandwidth} splits a shared uplink; a dedicated "
                "uplink gives every transfer the whole band",
            )
        if res.allocates and self.clients.capacity_trace is not None:
            return (
                "resources",
                "a capacity trace gives measured rates and seconds (clients.capacity_trace): "
                "no band, frequency or power for resources.bandwidth or compute_power to set",
            )
        cells = getattr(self.radio, "cells", None)
        if res.allocates and cells is not None:
            return (
                "resources",
                "radio.cells shares each cell's band among its own transfers under "
                "interference, which the allocation planner does not model: use "
                "resources.bandwidth equal and compute_power fixed with cells",
            )
        if res.schedules and getattr(cells, "mobility", None) is not None:
            return (
                "resources.scheduling",
                "radio.cells.mobility moves clients between rounds, and the schedulers rank "
                "them by their channels at the start: schedule uniform with mobility",
            )
        if res.scheduling.kind == "energy_aware" and self.clients.battery is None:
            return (
                "resources.scheduling.kind",
                "energy_aware ranks candidates by battery charge: set clients.battery",
            )
        return None

    @property
    def resources_planned(self) -> ResourcesConfig | None:
        """`resources` as the World applies them: the deadline they plan for defaults to the
        algorithm's cohort.deadline_s."""
        res = self.resources
        if res is None or res.deadline_s is not None:
            return res
        cohort = getattr(self.algorithm, "cohort", None)
        return res.model_copy(update={"deadline_s": getattr(cohort, "deadline_s", None)})

    def output_dir(self) -> Path:
        return Path(self.output.dir or Path("runs") / self.name)


BLOCK_AWARE = tuple(name for name, record in RECORDS.items() if record.follows_blocks)
# round trips whose cohort the World draws uniformly: what the resource policies act on
RESOURCE_AWARE = ("fedavg", "fedprox", "moon", "scaffold", "feddyn")


# ---------------------------------------------------------------- loading


MAX_FILE_BYTES = 16 * 2**20  # a per_client list for a million clients fits
MAX_ALIAS_NODES = 100_000  # nodes that YAML aliases (*name) may add to a document


def _read_yaml(path: Path) -> dict:
    """The mapping a scenario file holds. A file that is not one (a device, a FIFO, a file
    whose top-level keys are not scenario fields, such as a password file named by
    `extends`) is refused without quoting any of its lines."""
    text = userfiles.read_text(path, MAX_FILE_BYTES, "scenario file", ScenarioError)
    data = safe_yaml(text, str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{path}: the top level must be a mapping of fields, got {type(data).__name__}"
        )
    fields = {*Scenario.model_fields, "extends", "sweep"}  # a sweep file is a scenario too
    others = [k for k in data if k not in fields]
    if others and (
        len(others) == len(data)
        or not all(
            isinstance(k, str)
            and k.isascii()
            and len(k) <= 64
            and k.replace("-", "_").isidentifier()
            for k in others
        )
    ):
        raise ScenarioError(
            f"{path} is not a scenario file: {len(others)} of its {len(data)} top-level keys "
            f"are not scenario fields ({', '.join(sorted(fields))})"
        )
    return data


def safe_yaml(text: str, source: str) -> Any:
    """`yaml.safe_load`, refusing documents that aliases blow up (a "billion laughs" in 1 kB)
    or make refer to themselves: the node graph is composed first (linear in the text), its
    expanded size counted, and only then turned into Python objects."""
    loader = yaml_text.Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        composed, expanded = _node_counts(node, source)
        if expanded - composed > MAX_ALIAS_NODES:
            raise ScenarioError(
                f"{source}: YAML aliases (*name) expand it to more than "
                f"{composed + MAX_ALIAS_NODES:,} nodes; at most "
                f"{MAX_ALIAS_NODES:,} may come from aliases"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as e:  # where and what, never a piece of the file
        raise ScenarioError(f"{source}: not valid YAML{yaml_text.describe(e, text)}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()


def _node_counts(root: yaml.Node, source: str) -> tuple[int, int]:
    """(distinct nodes, nodes once every alias is expanded); refuses a node inside itself."""
    expanded: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in expanded:
            return expanded[key]
        if key in open_:
            raise ScenarioError(
                f"{source}: YAML aliases make a value contain itself (line "
                f"{node.start_mark.line + 1})"
            )
        open_.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in node.value)
        else:
            total = 1
        open_.discard(key)
        expanded[key] = min(total, 2**62)
        return expanded[key]

    total = size(root)
    return len(expanded), total


TAG_KEYS = ("name", "kind", "mode")
# Fields of which a section takes one: an override that sets one drops the other from the base.
ALTERNATIVES = (("steps", "epochs"), ("clients_per_round", "client_fraction"))


def _same_variant(base: dict, override: dict) -> bool:
    return all(override.get(t, base.get(t)) == base.get(t) for t in TAG_KEYS)


def merge(base: dict, override: dict, _path: tuple = ()) -> dict:
    """Deep-merge mappings; `override` wins, lists and scalars are replaced whole.

    A section whose variant changes (another `name`, `kind` or `mode`) keeps only the fields the
    new variant has too: switching `algorithm.name` keeps `cohort` and `local`, switching
    `model.kind` from mlp to logistic drops `hidden`. Setting one of two ALTERNATIVES (local
    `epochs` over a base's `steps`) drops the other.
    """
    out = copy.deepcopy(base)
    for pair in ALTERNATIVES:
        for mine, other in (pair, pair[::-1]):
            if override.get(mine) is not None and other not in override:
                out.pop(other, None)
    for key, value in override.items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            if not _same_variant(old, value):
                keep = _variant_fields((*_path, key), value)
                old = {k: v for k, v in old.items() if k in keep and k not in TAG_KEYS}
            out[key] = merge(old, value, (*_path, key))
        else:
            out[key] = copy.deepcopy(value)
    return out


def _variant_fields(path: tuple, section: dict) -> set[str]:
    """Field names of the union member that `section`'s tag picks at `path` (empty if none)."""
    node: Any = Scenario
    for seg in path:
        members = node if isinstance(node, tuple) else (node,)
        owner = next((m for m in members if seg in getattr(m, "model_fields", {})), None)
        if owner is None:
            return set()
        node = _unwrap(owner.model_fields[seg].annotation)
    tag = next((section[t] for t in TAG_KEYS if t in section), None)
    members = node if isinstance(node, tuple) else (node,)
    chosen = next((m for m in members if tag in _tags_of(m)), None)
    return set(getattr(chosen, "model_fields", {}))


def resolve(path: str | Path, _seen: tuple = ()) -> dict:
    """Read a scenario file and the files it `extends` (relative to it), merged."""
    path = Path(path)
    if path.resolve() in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path.resolve()))
        raise ScenarioError(f"extends forms a cycle: {chain}", field="extends")
    data = _read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or "\0" in parent:
        raise ScenarioError("must be a path to another scenario file", field="extends")
    base = resolve(path.parent / parent, (*_seen, path.resolve()))
    base.pop("name", None)
    return merge(base, data)


def parse_override(text: str) -> dict:
    """``algorithm.local.lr=0.1`` -> ``{"algorithm": {"local": {"lr": 0.1}}}`` (value as YAML)."""
    if "=" not in text:
        raise ScenarioError(f"override {short(text)} must look like field.path=value")
    key, raw = text.split("=", 1)
    try:
        value = safe_yaml(raw, f"--set {short(key.strip(), 60)}")
    except ScenarioError as e:
        if "not valid YAML" not in str(e):
            raise
        value = raw
    return nest(key.strip(), value)


def nest(path: str, value: Any) -> dict:
    """``"algorithm.local.lr", 0.1`` -> ``{"algorithm": {"local": {"lr": 0.1}}}``."""
    for part in reversed(path.split(".")):
        value = {part: value}
    return value


def load_scenario(
    path: str | Path | None = None,
    overrides: list[str] | dict | None = None,
    data: dict | None = None,
) -> Scenario:
    """Read, merge and validate a scenario from a file and/or a dict."""
    merged: dict = {}
    if path is not None:
        merged = resolve(path)
        merged.setdefault("name", Path(path).stem)
    if data is not None:
        merged = merge(merged, data)
    if isinstance(overrides, dict):
        merged = merge(merged, overrides)
    else:
        for text in overrides or []:
            merged = merge(merged, parse_override(text))
    scenario = validate(merged, source=str(path) if path else "scenario")
    for line in units.implausible(scenario):
        warnings.warn(line, UnitWarning, stacklevel=2)
    return scenario


def validate(data: dict, source: str = "scenario") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        lines = [describe(err) for err in e.errors()]
        raise ScenarioError(f"{source} is not a valid scenario:\n  " + "\n  ".join(lines)) from None


def json_schema() -> str:
    return json.dumps(Scenario.model_json_schema(), indent=2)


# ---------------------------------------------------------------- error messages


def _walk(loc: tuple) -> tuple[str, Any]:
    """Split pydantic's `loc` into the path the user wrote and the schema node at its end.

    Pydantic puts a union member's tag (``physical``, ``fedavg``) into `loc`; the user never
    wrote it, so it is dropped from the path and used to pick the member instead.
    """
    parts: list[str] = []
    node: Any = Scenario
    for seg in loc:
        if isinstance(node, tuple):
            member = next((m for m in node if seg in _tags_of(m)), None)
            if member is not None:
                node = member
                continue
        if isinstance(seg, str) and seg.startswith("function-"):
            continue
        parts.append(f"[{seg}]" if isinstance(seg, int) else str(seg))
        fields = getattr(node, "model_fields", None)
        node = _unwrap(fields[seg].annotation) if fields and seg in fields else None
    return ".".join(parts).replace(".[", "[") or "(top level)", node


def _fields_of(node: Any) -> list[str]:
    members = node if isinstance(node, tuple) else (node,)
    return sorted({f for m in members for f in getattr(m, "model_fields", {})})


def _unwrap(annotation: Any) -> Any:
    """Model class, or a tuple of classes for unions."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if hasattr(a, "model_fields")]
        return tuple(members) if len(members) > 1 else (members[0] if members else None)
    return annotation


def _tags_of(model: Any) -> tuple:
    """The values of a union member's tag field (a Literal may allow several)."""
    for key in ("name", "kind", "mode"):
        f = getattr(model, "model_fields", {}).get(key)
        if f is not None:
            return get_args(f.annotation) or (f.default,)
    return ()


def describe(err: ErrorDetails) -> str:
    """One line for one pydantic error: ``field: what is wrong; what is allowed``."""
    loc, kind, ctx = err["loc"], err["type"], err.get("ctx", {})
    path = ctx.get("field") or _walk(loc)[0]
    got = err.get("input")
    if kind == "extra_forbidden":
        parent = _walk(loc[:-1])[1]
        # a field another algorithm has (a feature that stops at this family's edge): say whose
        owner = next((f" for {name}" for name, r in RECORDS.items() if r.config is parent), "")
        return f"{path}: unknown field{owner}; allowed fields here: {', '.join(_fields_of(parent))}"
    if kind == "missing":
        return f"{path}: this field is required"
    if kind == "literal_error":
        return f"{path}: {short(got)} is not allowed; allowed: {ctx.get('expected')}"
    if kind == "union_tag_invalid":
        return (
            f"{path}: unknown {ctx.get('discriminator', 'kind').strip(chr(39))} "
            f"{short(ctx.get('tag'))}; allowed: {ctx.get('expected_tags')}"
        )
    if kind == "union_tag_not_found":
        return f"{path}: missing {ctx.get('discriminator')}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }[kind]
        bound = next(iter(ctx.values()))
        return f"{path}: must be {op} {bound} (got {short(got)})"
    if kind == "inconsistent":
        return f"{path}: {err['msg']}"
    if kind == "not_a_number":  # raised by the section that holds the field
        return f"{_walk((*loc, ctx['field_name']))[0]}: expected a number, got {ctx['value']}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{path}: {msg} (got {short(got)})" if not isinstance(got, dict) else f"{path}: {msg}"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to about `limit` characters, in time bounded by the limit (never the
    whole of a huge or alias-expanded value)."""
    text = value if isinstance(value, str) and limit > 80 else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
