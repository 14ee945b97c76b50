"""W1 of ../shared/BENCHMARKS.md in Flower 1.41's simulation runtime, for the side-by-side in
benchmarks/bench.py (`bench.py --w1`). Needs the `bench` extra: `make bench` or
`pip install -e ".[bench]"`.

    .venv/bin/python benchmarks/flower_w1.py [--rounds N]    # prints JSON (wall_s, accuracy)

As BENCHMARKS.md runs it: the Ray backend with 2 CPUs and client_resources num_cpus=1 (2 actors),
100 SuperNodes (partition-id = client), Flower's FedAvg weighted by each reply's "num-examples",
every client every round, no federated evaluation; the global model is judged on the test set
by the strategy's evaluate_fn after rounds 10, 20, ... (it runs in this process, one torch
thread). Local training is `w1_reference.train_client`, the plain torch loop's own, on one
torch thread per actor; same split, init and minibatch keys.

Wall seconds run from data load to the final accuracy with imports excluded in this process;
Ray's start, its workers' own imports and every message's (de)serialisation are Flower's cost
and counted. Ray is started here (the arguments Flower's backend would pass, plus a small object
store, no dashboard, logs kept off the console) under a watchdog: if it fails or has not started
in RAY_START_TIMEOUT_S, this prints why and exits with status 3.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
import warnings
from functools import cache

# read when Flower and Ray are imported or start: no usage statistics or telemetry sent, no
# log-deduplication notices, no `uv run` runtime environment
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import torch
import w1_reference as ref
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

RAY_CPUS = 2
RAY_START_TIMEOUT_S = 120.0
OBJECT_STORE_BYTES = 100 * 1024**2  # Ray's minimum is 75 MiB; a model here is 19 kB


@cache
def _client_side() -> tuple[ref.Digits, torch.nn.Module]:
    """The data and a model to train into, once per Ray actor (process)."""
    torch.set_num_threads(1)
    return ref.load(), ref.init_model()


def train(msg: Message, context: Context) -> Message:
    """One client's round: W1's local SGD from the global model, replying with its weights
    and sample count."""
    data, model = _client_side()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    client = int(context.node_config["partition-id"])
    n = ref.train_client(model, data, int(msg.content["config"]["server-round"]), client)
    content = RecordDict(
        {"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord({"num-examples": n})}
    )
    return Message(content=content, reply_to=msg)


def client_app() -> ClientApp:
    app = ClientApp()
    app.train()(train)
    return app


def server_app(rounds: int, curve: dict[int, float]) -> ServerApp:
    """FedAvg for `rounds` rounds; `curve` receives the accuracy after rounds 10, 20, ..."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        data, model = ref.load(), ref.init_model()

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            if server_round == 0 or server_round % ref.EVAL_EVERY:
                return None
            model.load_state_dict(arrays.to_torch_state_dict())
            curve[server_round] = ref.accuracy(model, data)
            return MetricRecord({"accuracy": curve[server_round]})

        strategy = FedAvg(
            fraction_evaluate=0.0,
            min_train_nodes=ref.CLIENTS,
            min_available_nodes=ref.CLIENTS,
        )
        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(model.state_dict()),
            num_rounds=rounds,
            evaluate_fn=evaluate,
        )

    return app


class RayStartError(RuntimeError):
    pass


def start_ray(timeout_s: float = RAY_START_TIMEOUT_S) -> None:
    """ray.init with what Flower's RayBackend passes (workers get this sys.path), quiet and
    small; a watchdog ends the process if Ray hangs on its way up."""
    import ray

    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(timeout_s):
            print(f"Ray did not start within {timeout_s:.0f} s; giving up", file=sys.stderr)
            os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    pythonpath = os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONPATH"] = pythonpath
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a FutureWarning about accelerators when num_gpus=0
            ray.init(
                num_cpus=RAY_CPUS,
                num_gpus=0,
                object_store_memory=OBJECT_STORE_BYTES,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=True,
                runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
            )
    except Exception as e:  # Ray raises many kinds; all mean the same here
        raise RayStartError(f"Ray failed to start: {type(e).__name__}: {e}") from e
    finally:
        done.set()


def run(rounds: int = ref.ROUNDS) -> tuple[float, dict[int, float]]:
    """W1 in Flower's simulation runtime: (wall seconds, {round: test accuracy})."""
    import ray
    from flwr.simulation import run_simulation

    torch.set_num_threads(1)
    logging.getLogger("flwr").setLevel(logging.ERROR)  # no per-round INFO lines
    curve: dict[int, float] = {}
    start = time.perf_counter()
    start_ray()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_simulation(
                server_app=server_app(rounds, curve),
                client_app=client_app(),
                num_supernodes=ref.CLIENTS,
                backend_name="ray",
                backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
            )
        wall_s = time.perf_counter() - start
    finally:
        ray.shutdown()
    if sorted(curve) != list(range(ref.EVAL_EVERY, rounds + 1, ref.EVAL_EVERY)):
        raise RuntimeError(
            f"Flower's run ended without its evaluations (got rounds {sorted(curve)})"
        )
    return wall_s, curve


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=ref.ROUNDS)
    args = p.parse_args(argv)
    try:
        wall_s, curve = run(args.rounds)
    except RayStartError as e:
        print(e, file=sys.stderr)
        sys.exit(3)
    print(
        json.dumps({"wall_s": wall_s, "accuracy": {str(r): round(a, 4) for r, a in curve.items()}})
    )


if __name__ == "__main__":
    # run as the importable module `flower_w1` (this script's folder is on sys.path, and Ray's
    # workers get the same path), so the ClientApp pickled into every message refers to its
    # functions by name rather than carrying them, as an installed Flower app's would
    import flower_w1

    flower_w1.main()
