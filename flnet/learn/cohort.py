"""Batched local training: every client of a cohort takes its local steps in one computation.

Parameters are stacked ``[C, P]``. One step gathers the cohort's minibatches ``[C, B, ...]``,
runs the vmapped forward pass, and differentiates the *sum* of the per-client mean losses: since
client c's loss depends only on row c, row c of that gradient is exactly client c's gradient.
Clients with fewer local steps than the longest are masked, not special-cased.

Engines compute a step's losses and gradients, with the same maths:

- `autograd_value_and_grad`: any `nn.Module` without buffers and any per-client loss
  (`loss_fn(model, params [C, P], x [C, B, ...], y [C, B], aux) -> [C]`), via autograd: the
  readable path;
- its accelerators in `flnet.learn.kernels` for the default cross-entropy: `DenseStack`
  (Flatten/Linear/ReLU stacks) and `ConvStack` (small CNNs), written out as batched matmuls
  into reused buffers (benchmarks/bench.py compares them with autograd); a step with a short
  batch (an epoch's last) takes their `padded` twin, its empty slots masked, in the same call.

A cohort too large to stack trains in slices of clients (`path: sequential` is slices of one);
the numbers are the same, since every row's maths is independent of the others. Per-client data
other than parameters and batches (SCAFFOLD's correction c - c_i, FedDyn's gradient term, MOON's
previous model) travels as `aux`, a pytree of ``[C, ...]`` rows that is sliced with the cohort and
handed to the loss and to the optimizer: a loss that closed over a ``[C, ...]`` tensor would see
the whole cohort's rows beside a slice's parameters.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._pytree import tree_leaves, tree_map

from flnet.learn import optim
from flnet.learn.kernels.conv import ConvStack, conv_layers
from flnet.learn.kernels.dense import DenseStack, dense_layers
from flnet.learn.kernels.padded import PAD  # an empty minibatch slot's label (short batch)
from flnet.learn.models import Model
from flnet.learn.optim import GradientTransformation

# (model, params [C, P], x [C, B, ...], y [C, B], aux: rows [C, ...] or None) -> loss [C]
LossFn = Callable[[Model, torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]
# (params [C, P], x [C, B, ...], y [C, B], out [C, P] or None, aux) -> (loss [C], grads [C, P])
ValueAndGrad = Callable[..., tuple[torch.Tensor, torch.Tensor]]

BATCH_MEMORY_BYTES = 1 << 30  # `path: auto` stacks as many clients as fit in this
# `path: auto` through `ConvStack` on the CPU: the most clients a call, and the most bytes
# of a call's engine buffers and parameters (one client a call where one client's exceed
# it). On a 2-vCPU Intel Xeon (one-off, thread CPU time): two a call were 6% faster than
# one on (b) (6 MiB a client), one 7% faster than two on (c) (12 MiB) and 8% on C1's cohort
# (22 MiB: 14 of buffers, 8 of parameters); three or four no faster (benchmarks/bench.py's
# rows "path auto" against "sequential" print the difference).
CPU_CONV_CLIENTS_PER_CALL = 2
CPU_CONV_CALL_BYTES = 8 << 20
# a call's [C, P] parameters at most this large step in a tensor the trainer keeps (its
# engine's plans then kept too) rather than in the fresh one it returns (`Trainer._train`)
KEPT_PARAMS_BYTES = 16 << 20


class CohortResult(NamedTuple):
    params: torch.Tensor  # [C, P] after local training
    opt_state: Any  # per-client optimizer state, leaves [C, ...]
    loss: torch.Tensor  # [C] mean minibatch loss over the steps taken
    grad_evals: torch.Tensor  # [C] gradient evaluations, each over one minibatch
    sample_grads: torch.Tensor  # [C] per-sample gradients computed: sum over evaluations of
    # the minibatch's real size (steps * B * grads per step when no batch is short)
    snapshot: torch.Tensor | None = None  # [C, P] each client's iterate at step t' (if asked)


def cross_entropy(
    model: Model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, aux: Any = None
) -> torch.Tensor:
    """Per-client mean cross-entropy ``[C]`` over the real samples: params [C, P],
    x [C, B, *input], y [C, B] with PAD in slots that hold no sample."""
    return sample_losses(model.forward_stacked(params, x), y).sum(1) / (y != PAD).sum(1)


def sample_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of every minibatch slot ``[C, B]``: logits [C, B, K], y [C, B]; 0 where
    the slot holds no sample (PAD)."""
    return F.cross_entropy(
        logits.flatten(0, 1), y.flatten(), reduction="none", ignore_index=PAD
    ).view(y.shape)


class ProximalLoss:
    """The mean cross-entropy plus ``(mu / 2) ||w - anchor||^2`` per client, anchor [P] one
    point for the whole cohort (FedProx's x_t, FedAsync's x_tau), or with anchor None each
    client's own, its row of the trainer's `aux` [C, P] (sliced with the cohort: FedAsync's
    clients trained together from different versions). A `LossFn` (for autograd),
    and `over(engine)`: a hand-derived engine's losses and gradients plus the term's value
    and its gradient ``mu (w - anchor)``, the same maths without autograd (`Trainer.train`
    takes it where the model has such an engine)."""

    def __init__(self, mu: float, anchor: torch.Tensor | None) -> None:
        self.mu, self.anchor = mu, anchor

    def _anchor(self, aux: Any) -> torch.Tensor:
        return aux if self.anchor is None else self.anchor

    def __call__(
        self, model: Model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, aux: Any = None
    ) -> torch.Tensor:
        return cross_entropy(model, params, x, y) + self._term(params - self._anchor(aux))

    def _term(self, diff: torch.Tensor) -> torch.Tensor:
        return 0.5 * self.mu * diff.square().sum(1)

    def over(self, engine: ValueAndGrad) -> ValueAndGrad:
        def value_and_grad(
            params: torch.Tensor,
            x: torch.Tensor,
            y: torch.Tensor,
            out: torch.Tensor | None = None,
            aux: Any = None,
        ) -> tuple[torch.Tensor, torch.Tensor]:
            loss, grads = engine(params, x, y, out=out, aux=aux)
            diff = params - self._anchor(aux)  # once for the term's value and its gradient
            return loss + self._term(diff), grads.add_(diff, alpha=self.mu)

        anchor = self.anchor
        if not isinstance(engine, DenseStack) or anchor is None:  # (descend has no aux)
            return value_and_grad

        def descend(params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, lr: float) -> Any:
            """`DenseStack.descend` with the term: each gradient piece plus its slice of
            mu (w - anchor), then the step: `value_and_grad`'s and plain SGD's maths."""
            loss, pieces = engine._pieces(params, x, y)
            diff = params - anchor  # before any piece of params moves
            for (view, grad), span in zip(pieces, engine.spans):
                view.add_(grad.add_(diff[:, slice(*span)], alpha=self.mu), alpha=-lr)
            return loss + self._term(diff)

        return _Descending(value_and_grad, descend)


class _Descending:
    """An engine's `value_and_grad` and its plain SGD step (`DenseStack.descend`'s shape)."""

    def __init__(self, value_and_grad: ValueAndGrad, descend: Callable[..., Any]) -> None:
        self.value_and_grad, self.descend = value_and_grad, descend

    def __call__(
        self,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        out: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.value_and_grad(params, x, y, out=out, aux=aux)


def autograd_value_and_grad(model: Model, loss_fn: LossFn = cross_entropy) -> ValueAndGrad:
    """Losses ``[C]`` and gradients ``[C, P]`` of `loss_fn` by autograd on their sum."""

    def value_and_grad(
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        out: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            w = params.detach().requires_grad_(True)
            loss = loss_fn(model, w, x, y, aux)
            (grad,) = torch.autograd.grad(loss.sum(), w)
        # a loss linear in w gets an expanded (stride-0) gradient, which optimizers updating
        # their state in place cannot write to
        return loss.detach(), grad.contiguous()

    return value_and_grad


def _single_tail(calls: list[tuple[int, int]], workers: int) -> list[tuple[int, int]]:
    """`calls` (first client, clients) with the last `workers` calls of several clients split
    into calls of one: threads taking calls from a queue then finish within about one client
    of each other, not one call (C1: 25 calls of two over two threads, one thread's 13
    against 12 cost 4% of the wall). Only for engines whose clients' numbers do not depend
    on the call they are in (`ConvStack`: every kernel is batched over clients, each
    client's part its own)."""
    head, tail = calls[:-workers], calls[-workers:]
    return head + [(i + k, 1) for i, n in tail for k in range(n)]


def _rows(tree: Any, start: int, stop: int) -> Any:
    return tree_map(lambda leaf: leaf[start:stop] if _per_client(leaf) else leaf, tree)


def _per_client(leaf: Any) -> bool:
    return isinstance(leaf, torch.Tensor) and leaf.dim() > 0


def _rows_of(active: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """active [C] shaped to select rows of `like` [C, ...]."""
    return active.view(-1, *([1] * (like.dim() - 1)))


def _where_rows(active: torch.Tensor, new: Any, old: Any) -> Any:
    if not _per_client(new):
        return new
    return torch.where(_rows_of(active, new), new, old)


class Trainer:
    """Local training of cohorts of one model on one training set (on one device)."""

    def __init__(
        self,
        model: Model,
        x_data: torch.Tensor,
        y_data: torch.Tensor,
        memory_bytes: int = BATCH_MEMORY_BYTES,
        threads: int = 1,
    ) -> None:
        self.model = model
        self.x_data = x_data  # [N, *input]
        self.y_data = y_data  # [N]
        self.memory_bytes = memory_bytes
        self._has_conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in model.module.modules())
        layers = dense_layers(model)
        conv = None if layers else conv_layers(model)
        # the hand-derived engine of the model's mean cross-entropy, where it has one
        self.hand: DenseStack | ConvStack | None = (
            DenseStack(layers) if layers else ConvStack(conv) if conv else None
        )
        self.default_value_and_grad: ValueAndGrad = self.hand or autograd_value_and_grad(model)
        # the hand engine for steps with a short batch (its buffers shared)
        self.hand_padded = None if self.hand is None else self.hand.padded()
        # by use, the key and tensors `_kept_rows` keeps: a step's buffers, the dense engine's
        # pieces, the steps' [C, P] parameters
        self._kept: dict[str, tuple[tuple, list[torch.Tensor]]] = {}
        # threads a cohort trained in several calls is split over (CPU only; `_in_threads`)
        self.threads = threads
        self._copies: list[Trainer] = []  # the other threads' trainers, made on first use
        self._kept_outputs: list[torch.Tensor] = []  # `_output`'s

    def clients_per_call(
        self,
        num_clients: int,
        batch_size: int,
        path: str,
        optimizer: GradientTransformation,
        engine: ValueAndGrad | None = None,
    ) -> int:
        """How many clients one batched computation through `engine` (default: the model's
        own) takes: all (batched), one (sequential), or as many as fit in `memory_bytes`
        (auto): per client, parameters, gradients, updates and optimizer state (about
        3 + 2 * grads_per_step copies of P) and one minibatch's forward and backward tensors
        (through `ConvStack`, its columns and buffers where those are larger).

        Except that auto trains models with convolutions on the CPU in small calls: one
        client a call through autograd, where vmap turns the cohort's convolutions into one
        grouped convolution, which runs slower there than a loop; at most
        `CPU_CONV_CLIENTS_PER_CALL` through `ConvStack`, whose buffers for more clients
        outgrow the caches, and one where a client's buffers and parameters take more than
        `CPU_CONV_CALL_BYTES` (benchmarks/bench.py's rows (b) and (c) print one client a call,
        sequential, against all 50, batched, and path auto)."""
        if path == "batched":
            return num_clients
        engine = engine or self.default_value_and_grad
        hand = engine if isinstance(engine, ConvStack) else None
        on_cpu_conv = self._has_conv and self.x_data.device.type == "cpu"
        if path == "sequential" or (on_cpu_conv and hand is None):
            return 1
        m = self.model
        per_sample = m.training_cost_per_sample.floats
        if hand is not None:
            per_sample = max(per_sample, hand.floats_per_sample())
        floats = m.num_params * (3 + 2 * optimizer.grads_per_step) + batch_size * per_sample
        per_client = floats * self.x_data.element_size()
        fit = max(1, min(num_clients, self.memory_bytes // max(1, math.ceil(per_client))))
        if not on_cpu_conv:
            return fit
        assert hand is not None  # on the CPU a CNN without the engine takes one a call (above)
        call = (batch_size * hand.floats_per_sample() + m.num_params) * self.x_data.element_size()
        return max(1, min(fit, CPU_CONV_CLIENTS_PER_CALL, CPU_CONV_CALL_BYTES // call))

    def train(
        self,
        params: torch.Tensor,
        batches: torch.Tensor,
        steps: torch.Tensor,
        optimizer: GradientTransformation,
        opt_state: Any = None,
        *,
        loss_fn: LossFn | None = None,
        path: str = "auto",
        sizes: np.ndarray | None = None,
        aux: Any = None,
        snapshot_at: int | torch.Tensor | None = None,
    ) -> CohortResult:
        """Run each client's local steps.

        params [C, P]; batches [C, T, B] rows of the training set; steps [C] local steps per
        client (at most T); `opt_state` from ``optimizer.init`` or a previous round (None:
        fresh); `loss_fn` replaces the mean cross-entropy (e.g. to add a proximal term);
        `path` is the scenario's ``algorithm.local.path``; `sizes` [C, T] (host), if given,
        the samples each minibatch really holds (its first `sizes` slots; the loss is the mean
        over them): steps with a short batch take the engine's `padded` twin (the generic
        engine where there is no hand-derived one). `aux` is per-client data,
        a pytree of ``[C, ...]`` tensors handed (sliced with the cohort) to `loss_fn` and to
        the optimizer's ``update(..., aux=)``; `snapshot_at` (an int or [C]) asks for each
        client's iterate after that many of its steps (its last, where it takes fewer).
        """
        engines, engine = self._engines(loss_fn)
        c = params.shape[0]
        for leaf in tree_leaves(aux) if aux is not None else ():
            if not (isinstance(leaf, torch.Tensor) and leaf.dim() and leaf.shape[0] == c):
                raise ValueError(
                    f"aux leaves must be per-client tensors [C={c}, ...]; got "
                    f"{getattr(leaf, 'shape', type(leaf).__name__)}"
                )
        if snapshot_at is not None:
            snapshot_at = torch.as_tensor(snapshot_at, device=steps.device).expand(c)
        per_call = self.clients_per_call(c, batches.shape[2], path, optimizer, engine)
        if per_call >= c:
            return self._train(
                params, batches, steps, optimizer, opt_state, engines, sizes, aux, snapshot_at
            )
        # every call's parameters go into their rows of one tensor: no concatenation after
        trained = self._output(params)

        def part(trainer: Trainer, i: int, n: int) -> CohortResult:
            """Clients i .. i + n - 1, through `trainer`'s engines and buffers, trained in
            their rows of `trained`; the engines then let go of their views of those rows."""
            rows = lambda tree: None if tree is None else _rows(tree, i, i + n)  # noqa: E731
            result = trainer._train(
                params[i : i + n],
                batches[i : i + n],
                steps[i : i + n],
                optimizer,
                rows(opt_state),
                engines if trainer is self else trainer._engines(loss_fn)[0],
                None if sizes is None else sizes[i : i + n],
                rows(aux),
                rows(snapshot_at),
                out=trained[i : i + n],
            )
            for hand in (trainer.hand, trainer.hand_padded):
                if isinstance(hand, ConvStack):
                    hand.release()
            return result

        workers = min(self.threads, -(-c // per_call)) if params.device.type == "cpu" else 1
        calls = [(i, min(per_call, c - i)) for i in range(0, c, per_call)]
        if workers > 1 and isinstance(engine, ConvStack):
            calls = _single_tail(calls, workers)
        if workers > 1:
            parts = self._in_threads(part, calls, workers)
        else:
            parts = [part(self, i, n) for i, n in calls]
        cat = lambda *rows: torch.cat(rows) if _per_client(rows[0]) else rows[0]  # noqa: E731
        rest = (tree_map(cat, *field) for field in list(zip(*parts))[1:])
        return CohortResult(trained, *rest)

    def _output(self, params: torch.Tensor) -> torch.Tensor:
        """A tensor for a split cohort's trained parameters, of `params`' shape: one that an
        earlier call returned where nothing holds it any more (nor any view of it: its
        storage's only user is this trainer's reference), else a new one, kept for later.
        Two are kept: a caller still holds the last cohort's while it trains the next
        (``work = learner.local_train(...)``). A C1 cohort's parameters are 431 MB, and fresh
        memory costs a page fault every 4 KiB on first write (in this VM also a slow one on
        the host): 0.2 CPU-s and 0.5 s of wall a cohort in one-off timings, against
        nothing for memory written before."""
        like = (params.shape, params.dtype, params.device)
        for kept in self._kept_outputs:
            # in use by this reference and the count's own wrapper alone
            free = torch._C._storage_Use_Count(kept.untyped_storage()._cdata) <= 2
            if free and (kept.shape, kept.dtype, kept.device) == like:
                return kept.view(kept.shape)  # a new tensor on it: holding that counts
        kept = torch.empty(params.shape, dtype=params.dtype, device=params.device)
        self._kept_outputs = [kept, *self._kept_outputs[:1]]
        return kept.view(kept.shape)

    def _engines(
        self, loss_fn: LossFn | None
    ) -> tuple[tuple[ValueAndGrad, ValueAndGrad], ValueAndGrad]:
        """(the steps' engine for full batches, the one for short batches: the hand engine's
        `padded` twin, or autograd, whose cross-entropy masks PAD slots), and the engine
        `clients_per_call` sizes the cohort by: this trainer's own (its buffers)."""
        hand, padded = self.hand, self.hand_padded
        if hand is not None and padded is not None:
            if loss_fn is None:
                return (hand, padded), hand
            if isinstance(loss_fn, ProximalLoss):
                return (loss_fn.over(hand), loss_fn.over(padded)), hand
        value_and_grad = autograd_value_and_grad(self.model, loss_fn or cross_entropy)
        return (value_and_grad, value_and_grad), value_and_grad

    def _in_threads(
        self,
        part: Callable[[Trainer, int, int], CohortResult],
        calls: list[tuple[int, int]],
        workers: int,
    ) -> list[CohortResult]:
        """The cohort's calls (first client, clients) over `workers` threads, each taking the
        next call not yet taken (a shared queue: a thread slowed by the machine's other work
        takes fewer), each thread with its own copy of the trainer (engines and buffers are
        reused call to call, so never shared) and torch's kernels on one thread each. Every
        call's maths is the one it has in a single thread, so the results are the same bit
        for bit whatever the number of threads: only the order in which the calls run
        changes."""
        while len(self._copies) < workers - 1:
            self._copies.append(Trainer(self.model, self.x_data, self.y_data, self.memory_bytes))
        trainers = [self, *self._copies[: workers - 1]]
        for copy in trainers[1:]:  # the data as they are now (`Learner` swaps them per cohort)
            copy.x_data, copy.y_data = self.x_data, self.y_data
        taken = itertools.count()  # its next() is atomic under the GIL
        parts: list[CohortResult | None] = [None] * len(calls)

        def work(trainer: Trainer) -> None:
            for j in taken:
                if j >= len(calls):
                    return
                parts[j] = part(trainer, *calls[j])

        intra_op = torch.get_num_threads()
        torch.set_num_threads(1)  # the threads are the parallelism; a pool in each would fight
        try:
            with ThreadPoolExecutor(workers, thread_name_prefix="flnet-cohort") as pool:
                list(pool.map(work, trainers))  # (re-raises a thread's error)
        finally:
            torch.set_num_threads(intra_op)
        return [result for result in parts if result is not None]

    def _kept_rows(
        self, use: str, key: tuple, c: int, make: Callable[[], list[torch.Tensor]]
    ) -> list[torch.Tensor]:
        """The first C rows of the tensors kept for `use`, kept for the next call instead of
        allocated again: made by `make` (C rows) where `key` changed or more clients come
        than those made for (a stream's calls vary in size); each a view at its start laid
        out as a [C, ...] tensor of its own. Nothing returned from `train` holds them."""
        kept = self._kept.get(use)
        if kept is None or kept[0] != key or kept[1][0].shape[0] < c:
            kept = self._kept[use] = (key, make())
        return [t[:c] for t in kept[1]]

    def _step_buffers(
        self, params: torch.Tensor, b: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A step's gradient [C, P] and minibatch (x [C, B, ...], y [C, B]) buffers, kept
        (`_kept_rows`)."""
        x, y = self.x_data, self.y_data
        c = params.shape[0]
        key = (
            params.shape[1:],
            params.dtype,
            params.device,
            b,
            x.shape[1:],
            x.dtype,
            x.device,
            y.dtype,
        )
        grads, xb, yb = self._kept_rows(
            "step",
            key,
            c,
            lambda: [
                params.new_empty(params.shape),
                x.new_empty((c, b, *x.shape[1:])),
                y.new_empty((c, b)),
            ],
        )
        return grads, xb, yb

    def _params_buffer(self, like: torch.Tensor) -> torch.Tensor:
        """A tensor for the steps' [C, P] parameters, kept (`_kept_rows`): see `_train`."""
        key = (like.shape[1:], like.dtype, like.device)
        (kept,) = self._kept_rows("params", key, len(like), lambda: [like.new_empty(like.shape)])
        return kept

    def _split_buffers(self, engine: DenseStack, like: torch.Tensor) -> list[torch.Tensor]:
        """Tensors for `engine.split`'s pieces of `like` [C, P], kept (`_kept_rows`): the
        engine's plans, which hold their views, are then found again for every call of a
        size seen before, not made anew each call."""
        c = like.shape[0]
        key = (tuple(engine.shapes), like.dtype, like.device)
        return self._kept_rows(
            "pieces", key, c, lambda: [like.new_empty((c, *shape)) for shape in engine.shapes]
        )

    def _train(
        self,
        params: torch.Tensor,
        batches: torch.Tensor,
        steps: torch.Tensor,
        optimizer: GradientTransformation,
        opt_state: Any,
        engines: tuple[ValueAndGrad, ValueAndGrad],
        sizes: np.ndarray | None,
        aux: Any = None,
        snapshot_at: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> CohortResult:
        """`train`'s work for one call; the trained parameters go into `out` [C, P]
        (contiguous) where given."""
        c, t_max, b = batches.shape
        short: list[bool] = [False] * t_max
        if sizes is not None:  # where a client still training has a short batch (the steps
            # repeated past a client's own are masked, whichever engine takes them)
            own = np.arange(t_max) < steps.cpu().numpy()[:, None]  # [C, T]
            short = np.any((np.asarray(sizes) < b) & own, axis=0).tolist()
        if any(short):  # each step's sizes [T, C] and empty slots [T, C, B], moved once
            assert sizes is not None  # a step is short only where sizes say so
            sizes_by_step = torch.as_tensor(np.ascontiguousarray(sizes.T), device=params.device)
            empty_slots = torch.arange(b, device=params.device) >= sizes_by_step[..., None]
        sample_grads = torch.zeros(c, dtype=torch.int64, device=params.device)
        if opt_state is None:
            opt_state = optimizer.init(params)
        start = params  # [C, P], or [P] expanded: copied into the steps' own tensors below
        params = (
            torch.empty_like(params, memory_format=torch.contiguous_format) if out is None else out
        )
        grads_buf, xb, yb = self._step_buffers(params, b)
        xb_rows, yb_rows = xb.view(c * b, *xb.shape[2:]), yb.view(-1)  # gathered into
        rows_by_step = batches.transpose(0, 1).reshape(t_max, c * b)  # a step's rows, contiguous
        # an engine that takes a plain SGD step itself, without a [C, P] gradient (DenseStack),
        # on its own layout of the parameters where it has one (`DenseStack.split`, a contiguous
        # tensor each): `work` is then what the steps update; it is joined into params where
        # [C, P] is read (a step through the optimizer, a snapshot, the end) and split again
        # after such a step
        # (a full batch's, a short batch's): engines of one kind, so one layout
        plain = optimizer.plain_lr is not None
        descends = [getattr(e, "descend", None) if plain else None for e in engines]
        split = getattr(engines[0], "split", None) if descends[0] is not None else None
        join = getattr(engines[0], "join", None)
        # a ConvStack's first step reads `start` and writes the stepped values into params:
        # no copy of the starting parameters first (every client steps: none keeps them)
        uniform = bool((steps == t_max).all())
        from_start = (
            uniform
            and t_max > 0
            and descends[short[0]] is not None
            and isinstance(engines[short[0]], ConvStack)
        )
        # plain SGD on the dense engine's [C, P] layout (a proximal loss: FedProx, FedAsync)
        # steps in a tensor kept from call to call, copied into the one returned at the end:
        # the engine's plan, which holds its views, is found again rather than made anew each
        # call (a stream's calls are small: FedAsync's took 5-7% less CPU, one-off)
        returned = None
        if (
            plain
            and split is None
            and out is None
            and isinstance(self.hand, DenseStack)
            and params.numel() * params.element_size() <= KEPT_PARAMS_BYTES
        ):
            returned, params = params, self._params_buffer(params)
        if split is not None:
            assert isinstance(engines[0], DenseStack)  # the engine that splits
            work = split(start, out=self._split_buffers(engines[0], params))
        else:
            work = params if from_start else params.copy_(start)

        def joined() -> torch.Tensor:
            """params [C, P] as the steps left them."""
            if join is not None and work is not params:
                join(work, params)
            return params

        loss_sum = torch.zeros(c, dtype=params.dtype, device=params.device)
        grad_evals = torch.zeros(c, dtype=torch.int64, device=params.device)
        evals = samples = 0  # uniform full steps' counts, every client's (added at the end)
        snapshot = None
        if snapshot_at is not None:  # after min(t', steps) steps; masked steps change nothing
            snapshot_at = snapshot_at.clamp(0, t_max)
            snapshot = start.clone(memory_format=torch.contiguous_format)
        for s in range(t_max):
            rows = rows_by_step[s]
            torch.index_select(self.x_data, 0, rows, out=xb_rows)
            torch.index_select(self.y_data, 0, rows, out=yb_rows)
            value_and_grad = engines[short[s]]
            size: torch.Tensor | int
            if short[s]:
                size = sizes_by_step[s]  # [C]
                yb.masked_fill_(empty_slots[s], PAD)
            else:
                size = b
            calls = 0

            def grad_fn(p: torch.Tensor) -> torch.Tensor:
                nonlocal calls
                calls += 1
                return value_and_grad(p, xb, yb, aux=aux)[1]  # noqa: B023 (called within this step)

            before = None if uniform else tree_map(torch.clone, work)
            step_descend = descends[short[s]]
            if step_descend is not None and from_start and s == 0:
                loss, new_state = step_descend(work, xb, yb, optimizer.plain_lr, start), opt_state
            elif step_descend is not None:  # plain SGD, stepped by the engine
                loss, new_state = step_descend(work, xb, yb, optimizer.plain_lr), opt_state
            else:
                loss, grads = value_and_grad(joined(), xb, yb, out=grads_buf, aux=aux)
                new_state = optim.step(
                    optimizer, grads, opt_state, params, grad_fn=grad_fn, loss=loss, aux=aux
                )
                if split is not None:
                    split(params, out=work)
            if before is None:
                opt_state = new_state
                loss_sum += loss
                evals += 1 + calls
                if isinstance(size, int):
                    samples += (1 + calls) * size
                else:
                    sample_grads += (1 + calls) * size
            else:  # clients past their own steps keep their parameters and state
                active = steps > s  # [C]
                for new, old in zip(tree_leaves(work), tree_leaves(before)):
                    torch.where(_rows_of(active, new), new, old, out=new)
                opt_state = tree_map(
                    lambda new, old: _where_rows(active, new, old),  # noqa: B023 (called now)
                    new_state,
                    opt_state,
                )
                loss_sum += torch.where(active, loss, torch.zeros_like(loss))
                grad_evals += active * (1 + calls)
                sample_grads += active * (1 + calls) * size
            if snapshot is not None:
                assert snapshot_at is not None  # a snapshot is taken only where asked
                snapshot = torch.where((snapshot_at == s + 1)[:, None], joined(), snapshot)
        grad_evals += evals
        sample_grads += samples
        return CohortResult(
            joined() if returned is None else returned.copy_(joined()),
            opt_state,
            loss_sum / steps.clamp_min(1).to(loss_sum.dtype),
            grad_evals,
            sample_grads,
            snapshot,
        )
