"""Build the world for a scenario, run its algorithm, record and write the results."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import yaml

from flnet import data as data_mod, models
from flnet.algorithms import ALGORITHMS
from flnet.errors import ScenarioError
from flnet.evaluate import Evaluator
from flnet.ledger import NOBODY, SERVER
from flnet.scenario import Scenario, load_scenario
from flnet.world import World

SMALL_MODEL_PARAMS = 5_000_000  # below this, one torch thread: batching is the parallelism


@dataclass
class Result:
    """What a run returns: the two tables, a summary, and where they were written."""

    records: pd.DataFrame
    ledger: pd.DataFrame
    summary: dict
    scenario: Scenario
    output_dir: Path | None = None
    partition: pd.DataFrame = field(default_factory=pd.DataFrame)


class Recorder:
    """Observer: evaluates every `eval_every` rounds (and at the end), applies the stop rules."""

    def __init__(self, scenario: Scenario, evaluator: Evaluator):
        self.scenario = scenario
        self.evaluator = evaluator
        self.rows: list[dict] = []

    def limit_reached(self, world: World, round: int) -> str | None:
        run = self.scenario.run
        if round >= run.rounds:
            return "rounds"
        if run.time_budget_s is not None and world.now >= run.time_budget_s:
            return "time_budget"
        if run.energy_budget_j is not None and world.ledger.total_energy_j >= run.energy_budget_j:
            return "energy_budget"
        return None

    def on_round(self, world, round, params, state, stopping):
        if not bool(torch.isfinite(params).all()):
            return "diverged"
        reason = stopping or self.limit_reached(world, round)
        if round % self.scenario.run.eval_every and reason is None:
            return None
        metrics = self.evaluator(params)
        if not all(map(_finite, metrics.values())):
            return "diverged"
        world.ledger.add(round, SERVER, NOBODY, "evaluate", world.now, world.now)
        self.rows.append(record_row(self.scenario, world, round, metrics))
        target = self.scenario.run.target_accuracy
        if reason is None and target is not None and metrics["test_accuracy"] >= target:
            reason = "target_accuracy"
        return reason


def _finite(v: float) -> bool:
    return v == v and abs(v) != float("inf")


def record_row(scenario: Scenario, world: World, round: int, metrics: dict) -> dict:
    e, b = world.ledger.energy_j, world.ledger.bits
    return {
        "scenario": scenario.name, "algorithm": scenario.algorithm.name, "seed": scenario.seed,
        "round": round, "sim_time_s": world.now,
        "energy_j": world.ledger.total_energy_j,
        "energy_compute_j": e["compute"], "energy_uplink_j": e["upload"],
        "energy_downlink_j": e["download"],
        "bits_up": b["upload"], "bits_down": b["download"],
        **metrics,
    }


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("'cuda' was asked for but no CUDA device is available; "
                            "use 'auto' or 'cpu'", field="device")
    return torch.device(name)


def build_world(scenario: Scenario) -> World:
    device = resolve_device(scenario.device)
    fed = data_mod.load(scenario.data, scenario.clients.count, scenario.seed, device)
    model = models.build(scenario.model, fed.input_shape, fed.num_classes, scenario.seed, device)
    return World(scenario, fed, model)


def run(scenario: Scenario | str | Path, overrides: list[str] | dict | None = None, *,
        write: bool = True, observers: tuple = ()) -> Result:
    """Simulate a scenario (object or YAML path) and return its records and ledger."""
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario, overrides)
    elif overrides:
        scenario = load_scenario(data=scenario.model_dump(), overrides=overrides)
    wall_start = time.perf_counter()
    world = build_world(scenario)
    threads = torch.get_num_threads()
    if world.model.num_params < SMALL_MODEL_PARAMS and world.data.x_train.device.type == "cpu":
        torch.set_num_threads(1)
    try:
        recorder = Recorder(scenario, Evaluator(world.model, world.data))
        world.observers = [recorder, *observers]
        algorithm = ALGORITHMS[scenario.algorithm.name]
        state = algorithm.init(world, scenario.algorithm)
        world.publish(0, state.x, state)
        # Run until the protocol ends: timers it left behind (a deadline that was not needed)
        # must not move the clock past the last round.
        world.env.run(until=world.env.process(algorithm.protocol(world, scenario.algorithm,
                                                                 state)))
    finally:
        torch.set_num_threads(threads)
    records = pd.DataFrame(recorder.rows)
    ledger = world.ledger.frame()
    summary = summarize(scenario, world, records, time.perf_counter() - wall_start)
    result = Result(records, ledger, summary, scenario, partition=world.data.label_histogram())
    if write:
        result.output_dir = write_results(result)
    return result


def summarize(scenario: Scenario, world: World, records: pd.DataFrame, wall_s: float) -> dict:
    last = records.iloc[-1].to_dict() if len(records) else {}
    reason = world.stop_reason or "no_rounds"
    return {
        "scenario": scenario.name,
        "algorithm": scenario.algorithm.name,
        "seed": scenario.seed,
        "status": "diverged" if reason == "diverged" else "completed",
        "stop_reason": reason,
        "rounds": int(last.get("round", 0)),
        "final_test_accuracy": last.get("test_accuracy"),
        "best_test_accuracy": float(records["test_accuracy"].max()) if len(records) else None,
        "sim_time_s": world.now,
        "energy_j": world.ledger.total_energy_j,
        "bits_up": world.ledger.bits["upload"],
        "bits_down": world.ledger.bits["download"],
        "model_params": world.model.num_params,
        "training_flops_per_sample": world.flops_per_sample,
        "wall_s": wall_s,
    }


def write_results(result: Result) -> Path:
    out = result.scenario.output_dir()
    out.mkdir(parents=True, exist_ok=True)
    fmt = result.scenario.output.format
    for name, df in (("records", result.records), ("ledger", result.ledger),
                     ("partition", result.partition)):
        _write_table(df, out / f"{name}.{fmt}")
    (out / "scenario.yaml").write_text(
        yaml.safe_dump(result.scenario.model_dump(mode="json"), sort_keys=False))
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2, default=_jsonable))
    return out


def _write_table(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    if path.suffix == ".csv":
        df.to_csv(tmp, index=False)
    else:
        df.to_parquet(tmp, index=False)
    tmp.replace(path)


def _jsonable(value: Any):
    try:
        return value.item()
    except AttributeError:
        return str(value)


def read_table(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
