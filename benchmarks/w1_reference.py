"""W1 of ../shared/BENCHMARKS.md written plainly, outside flnet: what a researcher would run
instead. One client's local training (`train_client`) is shared by the plain torch loop here
and by Flower's ClientApp (benchmarks/flower_w1.py), so both train exactly alike.

    .venv/bin/python benchmarks/w1_reference.py loop|vmap [--rounds N]   # prints JSON

- `torch_loop`: `nn.Module` + `torch.optim.SGD`, one client after another, one thread;
- `torch_vmap`: the same maths with `torch.func` (vmap of grad over the clients' stacked
  parameters), one thread.

Each returns the wall seconds from data load to the final accuracy (imports excluded) and the
accuracy after rounds 10, 20, ..., as in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

import numpy as np
import sklearn.datasets
import sklearn.model_selection
import torch
from torch import nn

CLIENTS, ROUNDS, STEPS, BATCH, LR = 100, 50, 10, 32, 0.05
EVAL_EVERY = 10
# W1's accuracy after rounds 10, 20, 30, 40, 50 (BENCHMARKS.md; tests/test_fedavg.py)
W1_CURVE = (0.7861, 0.8806, 0.9028, 0.9167, 0.9278)


@dataclass(frozen=True)
class Digits:
    """The digits split of W1: train and test features [n, 64] / 16, labels, and each
    client's training rows (positions in x_train)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    parts: list[np.ndarray]


def load() -> Digits:
    x, y = sklearn.datasets.load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = sklearn.model_selection.train_test_split(
        (x / 16.0).astype(np.float32), y, test_size=0.2, random_state=0, stratify=y
    )
    parts = np.array_split(np.random.RandomState(0).permutation(len(y_tr)), CLIENTS)
    t = torch.from_numpy
    return Digits(t(x_tr), t(y_tr), t(x_te), t(y_te), parts)


def init_model() -> nn.Sequential:
    """Linear(64, 64) -> ReLU -> Linear(64, 10), torch's default init after manual_seed(0)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def minibatch_rows(round: int, client: int, n: int) -> np.ndarray:
    """[STEPS, BATCH] positions in the client's n rows; round from 1, row s is step s."""
    return np.random.default_rng([0, round, client]).integers(0, n, size=(STEPS, BATCH))


def train_client(model: nn.Module, data: Digits, round: int, client: int) -> int:
    """STEPS plain SGD steps of mean cross-entropy on the client's minibatches, in place;
    returns the client's sample count (its weight in the average)."""
    part = data.parts[client]
    rows = torch.from_numpy(part[minibatch_rows(round, client, len(part))])
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step_rows in rows:
        opt.zero_grad()
        nn.functional.cross_entropy(
            model(data.x_train[step_rows]), data.y_train[step_rows]
        ).backward()
        opt.step()
    return len(part)


def accuracy(model: nn.Module, data: Digits) -> float:
    with torch.no_grad():
        return (model(data.x_test).argmax(1) == data.y_test).float().mean().item()


def torch_loop(rounds: int = ROUNDS) -> tuple[float, dict[int, float]]:
    """FedAvg over all clients every round, one `nn.Module` trained client after client."""
    start = time.perf_counter()
    data = load()
    model = init_model()
    curve = {}
    for r in range(1, rounds + 1):
        global_state = {k: v.clone() for k, v in model.state_dict().items()}
        total = {k: torch.zeros_like(v) for k, v in global_state.items()}
        weight = 0
        for k in range(CLIENTS):
            model.load_state_dict(global_state)
            n = train_client(model, data, r, k)
            for name, v in model.state_dict().items():
                total[name] += n * v
            weight += n
        model.load_state_dict({name: v / weight for name, v in total.items()})
        if r % EVAL_EVERY == 0:
            curve[r] = accuracy(model, data)
    return time.perf_counter() - start, curve


def torch_vmap(rounds: int = ROUNDS) -> tuple[float, dict[int, float]]:
    """The same FedAvg with `torch.func`: one vmap of grad over the clients' stacked
    parameters per step, the minibatches of all clients gathered at once."""
    from torch.func import functional_call, grad, vmap

    start = time.perf_counter()
    data = load()
    model = init_model()
    names = [name for name, _ in model.named_parameters()]
    sizes = torch.tensor([len(p) for p in data.parts], dtype=torch.float32)

    def loss(params, x, y):
        return nn.functional.cross_entropy(functional_call(model, params, (x,)), y)

    step_grads = vmap(grad(loss))
    global_params = {name: p.detach().clone() for name, p in model.named_parameters()}
    curve = {}
    for r in range(1, rounds + 1):
        rows = torch.from_numpy(
            np.stack([p[minibatch_rows(r, k, len(p))] for k, p in enumerate(data.parts)], axis=1)
        )  # [STEPS, CLIENTS, BATCH]
        params = {n: p.expand(CLIENTS, *p.shape).clone() for n, p in global_params.items()}
        for step_rows in rows:
            grads = step_grads(params, data.x_train[step_rows], data.y_train[step_rows])
            params = {n: params[n] - LR * grads[n] for n in names}
        global_params = {
            n: (p * sizes.view(-1, *[1] * (p.dim() - 1))).sum(0) / sizes.sum()
            for n, p in params.items()
        }
        if r % EVAL_EVERY == 0:
            with torch.no_grad():
                model.load_state_dict(global_params)
            curve[r] = accuracy(model, data)
    return time.perf_counter() - start, curve


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variant", choices=["loop", "vmap"])
    p.add_argument("--rounds", type=int, default=ROUNDS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    wall_s, curve = (torch_loop if args.variant == "loop" else torch_vmap)(args.rounds)
    print(
        json.dumps({"wall_s": wall_s, "accuracy": {str(r): round(a, 4) for r, a in curve.items()}})
    )


if __name__ == "__main__":
    main()
