"""pfl-research 0.6's side of the side-by-side workloads in benchmarks/bench.py (W1 and C1 of
../shared/BENCHMARKS.md): FedAvg in pfl's simulator on the work flnet did, so that both sides
do the same work. Runs in pfl's own environment (`make bench-pfl` makes .venv-pfl: torch 2.13.0
and pfl[pytorch] 0.6, apart from flnet's), as one process or as torchrun's workers:

    .venv-pfl/bin/python benchmarks/pfl_side.py PLAN
    .venv-pfl/bin/python -m torch.distributed.run --nproc-per-node 2 benchmarks/pfl_side.py PLAN

PLAN is a folder that bench.py's flnet run wrote (`--child-plan`): the data as flnet's model
sees them (plan.npz: x_train, y_train, x_test, y_test), the model with flnet's initial
parameters (model.pt, a plain nn.Sequential), and what flnet trained: per round its cohort's
clients, each client's training rows in the order of its minibatches (flnet's partition,
cohort sampling and batch order) and its FedAvg weight (its sample count); meta.json holds the
local lr and batch size, the rounds and the evaluation interval.

pfl trains each round's users (a user is (round, position in the cohort)) through its own
FederatedAveraging, SimulatedBackend and PyTorchModel: 1 local epoch of its user's rows in
order, in batches of the batch size (so the same minibatches as flnet's), torch.optim.SGD at
the local lr, the average of the model differences weighted by the sample counts
(a Postprocessor), central SGD at lr 1.0 (FedAvg). The test accuracy is evaluated after rounds
eval_every, 2 * eval_every, ... by a callback (on the first worker).

Each worker prints one line of JSON, and with --out DIR writes it to DIR/rank<r>.json: its
rank, wall_s (from loading the plan to the final accuracy, imports excluded; torchrun's start
of the workers excluded), cpu_s (its own) and accuracy {round: test accuracy} (the first
worker's; the others' are empty)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pfl.aggregate.simulate import SimulatedBackend
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics, Weighted
from pfl.model.pytorch import PyTorchModel
from pfl.postprocessor.base import Postprocessor


class Net(torch.nn.Module):
    """flnet's model, with the `loss` and `metrics` pfl's PyTorchModel calls."""

    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
        self.eval() if eval else self.train()
        return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict:
        self.eval() if eval else self.train()
        logits = self(x)
        n = len(y)
        return {
            "loss": Weighted(float(F.cross_entropy(logits, y, reduction="sum")), n),
            "accuracy": Weighted(float((logits.argmax(1) == y).sum()), n),
        }


class WeightByPlan(Postprocessor):
    """Each user's model difference weighted by its FedAvg weight in the plan."""

    def __init__(self, weights: dict) -> None:
        self.weights = weights

    def postprocess_one_user(self, *, stats, user_context):
        stats.reweight(self.weights[user_context.user_id])
        return stats, Metrics()


class TestAccuracy(TrainingProcessCallback):
    """The test accuracy after every `every` rounds, into `curve` (on the first worker)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, every: int, curve: dict) -> None:
        self.x, self.y, self.every, self.curve = x, y, every, curve

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        done = central_iteration + 1
        if done % self.every == 0 and int(os.environ.get("RANK", 0)) == 0:
            with torch.no_grad():
                model._model.eval()
                right = (model._model(self.x).argmax(1) == self.y).sum()
            self.curve[done] = round(float(right) / len(self.y), 4)
        return False, Metrics()


def run(plan: Path) -> tuple[float, float, dict[int, float]]:
    """(wall s, this process's CPU s, {round: test accuracy} on the first worker)."""
    start, cpu = time.perf_counter(), time.process_time()
    meta = json.loads((plan / "meta.json").read_text())
    arrays = np.load(plan / "plan.npz")
    x, y = torch.from_numpy(arrays["x_train"]), torch.from_numpy(arrays["y_train"])
    x_test, y_test = torch.from_numpy(arrays["x_test"]), torch.from_numpy(arrays["y_test"])
    cohorts, rows, weights = arrays["cohorts"], arrays["rows"], arrays["weights"]
    rounds, cohort_size = cohorts.shape
    users = ((r, i) for r in range(rounds) for i in range(cohort_size))  # in order, every worker

    def make_dataset(user: tuple[int, int]) -> Dataset:
        take = torch.from_numpy(rows[user])
        return Dataset(raw_data=[x[take], y[take]], user_id=user)

    data = FederatedDataset(make_dataset, lambda: next(users))
    net = Net(torch.load(plan / "model.pt", weights_only=False))
    model = PyTorchModel(
        model=net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    weight_of = {(r, i): float(weights[r, i]) for r in range(rounds) for i in range(cohort_size)}
    backend = SimulatedBackend(
        training_data=data, val_data=None, postprocessors=[WeightByPlan(weight_of)]
    )
    curve: dict[int, float] = {}
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=rounds,
            evaluation_frequency=rounds + 1,  # no federated evaluation: TestAccuracy's
            train_cohort_size=cohort_size,
            val_cohort_size=None,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=meta["lr"],
            local_num_epochs=1,
            local_batch_size=meta["batch_size"],
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=None),
        callbacks=[TestAccuracy(x_test, y_test, meta["eval_every"], curve)],
        send_metrics_to_platform=False,  # no per-round report on the console
    )
    return time.perf_counter() - start, time.process_time() - cpu, curve


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("plan", type=Path)
    p.add_argument("--out", type=Path, help="also write each worker's JSON to OUT/rank<r>.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    wall_s, cpu_s, curve = run(args.plan)
    rank = int(os.environ.get("RANK", 0))
    accuracy = {str(r): a for r, a in curve.items()}
    line = json.dumps({"rank": rank, "wall_s": wall_s, "cpu_s": cpu_s, "accuracy": accuracy})
    if args.out is not None:  # torchrun's workers share one stdout, where lines can interleave
        (args.out / f"rank{rank}.json").write_text(line)
    print(line)


if __name__ == "__main__":
    main()
