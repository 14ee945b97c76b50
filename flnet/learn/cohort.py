"""Batched local training: every client of a cohort takes its local steps in one computation.

Parameters are stacked ``[C, P]``. One step gathers the cohort's minibatches ``[C, B, ...]``,
runs the vmapped forward pass, and differentiates the *sum* of the per-client mean losses: since
client c's loss depends only on row c, row c of that gradient is exactly client c's gradient.
Clients with fewer local steps than the longest are masked, not special-cased.

Two engines compute a step's losses and gradients, with the same maths:

- `autograd_value_and_grad`: any `nn.Module` without buffers and any per-client loss
  (`loss_fn(model, params [C, P], x [C, B, ...], y [C, B], aux) -> [C]`), via autograd;
- `DenseStack`: Flatten/Linear/ReLU stacks with the default cross-entropy, written out as
  batched matmuls into reused buffers (benchmarks/bench.py compares the two on an MLP).

A cohort too large to stack trains in slices of clients (`path: sequential` is slices of one);
the numbers are the same, since every row's maths is independent of the others. Per-client data
other than parameters and batches (SCAFFOLD's correction c - c_i, FedDyn's gradient term, MOON's
previous model) travels as `aux`, a pytree of ``[C, ...]`` rows that is sliced with the cohort and
handed to the loss and to the optimizer: a loss that closed over a ``[C, ...]`` tensor would see
the whole cohort's rows beside a slice's parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._pytree import tree_leaves, tree_map

from flnet.learn import optim
from flnet.learn.conv import ConvStack, batched_affine, conv_layers
from flnet.learn.models import Model
from flnet.learn.optim import GradientTransformation

# (model, params [C, P], x [C, B, ...], y [C, B], aux: rows [C, ...] or None) -> loss [C]
LossFn = Callable[[Model, torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]
# (params [C, P], x [C, B, ...], y [C, B], out [C, P] or None, aux) -> (loss [C], grads [C, P])
ValueAndGrad = Callable[..., tuple[torch.Tensor, torch.Tensor]]

BATCH_MEMORY_BYTES = 1 << 30  # `path: auto` stacks as many clients as fit in this
# `path: auto` through `ConvStack` on the CPU: the most clients a call. On a 2-vCPU Intel
# Xeon two were no slower than one on (b) and (c), three or four no faster (one-off)
# (benchmarks/bench.py's rows "path auto" against "sequential" print two against one).
CPU_CONV_CLIENTS_PER_CALL = 2


class CohortResult(NamedTuple):
    params: torch.Tensor  # [C, P] after local training
    opt_state: Any  # per-client optimizer state, leaves [C, ...]
    loss: torch.Tensor  # [C] mean minibatch loss over the steps taken
    grad_evals: torch.Tensor  # [C] gradient evaluations, each over one minibatch
    sample_grads: torch.Tensor  # [C] per-sample gradients computed: sum over evaluations of
    # the minibatch's real size (steps * B * grads per step when no batch is short)
    snapshot: torch.Tensor | None = None  # [C, P] each client's iterate at step t' (if asked)


PAD = -100  # label of a minibatch slot with no sample (a short last batch of an epoch)


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
    point for the whole cohort (FedProx's x_t, FedAsync's x_tau). A `LossFn` (for autograd),
    and `over(engine)`: a hand-derived engine's losses and gradients plus the term's value
    and its gradient ``mu (w - anchor)``, the same maths without autograd (`Trainer.train`
    takes it where the model has such an engine)."""

    def __init__(self, mu: float, anchor: torch.Tensor) -> None:
        self.mu, self.anchor = mu, anchor

    def __call__(
        self, model: Model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, aux: Any = None
    ) -> torch.Tensor:
        return cross_entropy(model, params, x, y) + self._term(params - self.anchor)

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
            diff = params - self.anchor  # once for the term's value and its gradient
            return loss + self._term(diff), grads.add_(diff, alpha=self.mu)

        if not isinstance(engine, DenseStack):
            return value_and_grad

        def descend(params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, lr: float) -> Any:
            """`DenseStack.descend` with the term: each gradient piece plus its slice of
            mu (w - anchor), then the step: `value_and_grad`'s and plain SGD's maths."""
            loss, pieces = engine._pieces(params, x, y)
            diff = params - self.anchor  # before any piece of params moves
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


class _Dense(NamedTuple):
    weight: tuple[int, int]  # [start, end) of the [out, in] weight in the flat vector
    bias: tuple[int, int] | None
    shape: tuple[int, int]  # (out, in)
    relu: bool  # a ReLU follows


def dense_layers(model: Model) -> list[_Dense] | None:
    """The Linear layers of an ``nn.Sequential`` of Flatten (first), Linear and ReLU, else None."""
    module = model.module
    flat = len(model.input_shape) == 1
    if not isinstance(module, nn.Sequential):
        return None
    offsets = dict(zip(model.names, np.cumsum([0, *model.sizes])))

    def span(name: str) -> tuple[int, int]:
        start = int(offsets[name])
        return start, start + model.sizes[model.names.index(name)]

    layers: list[_Dense] = []
    for name, child in module.named_children():
        if isinstance(child, nn.Flatten) and not layers:
            flat = (child.start_dim, child.end_dim) == (1, -1)
        elif isinstance(child, nn.Linear) and flat:
            bias = span(f"{name}.bias") if child.bias is not None else None
            layers.append(
                _Dense(span(f"{name}.weight"), bias, (child.out_features, child.in_features), False)
            )
        elif isinstance(child, nn.ReLU) and layers and not layers[-1].relu:
            layers[-1] = layers[-1]._replace(relu=True)
        else:
            return None
    return layers if layers and not layers[-1].relu else None


class DenseStack:
    """Mean cross-entropy and its gradient for a Flatten/Linear/ReLU stack, by hand.

    The same maths as `autograd_value_and_grad(model)` (a test checks it): forward
    ``a_{l+1} = relu(a_l W_l^T + b_l)`` as batched matmuls; the logits are kept as ``[C, K, B]``
    so the log-softmax reduces over a middle dimension (torch's softmax over a last dimension of
    10 is an order of magnitude slower); one log-softmax kernel gives both the loss (minus its
    mean at the labels) and the gradient ``(exp(log-softmax) - onehot) / B``, fewer passes than
    max, exp, sum and log apart; the backward pass reuses the activations. Activations live in
    buffers reused across calls, and every view a step takes of them and of the parameters (a
    `_DensePlan`) while the same parameter tensors come back (the trainer's, updated in place):
    a step only calls its kernels.

    `descend` takes a plain SGD step on the parameters as `split` lays them out, one contiguous
    tensor per parameter: each weight's step is then one GEMM, ``W += (-lr) dZ^T A``
    (`baddbmm_`), which writes no gradient and reads none back (in the [C, P] vector a weight is
    a strided slice, which torch's batched GEMM cannot write in place): benchmarks/bench.py's
    row (a) printed 59% of the matmul peak before it and 66% after. The GEMM adds ``-lr``
    times its sum where the unfused step adds the rounded gradient times ``-lr``: equal up to
    float rounding (tests compare within tests/tolerance.py; W1's curve is unchanged).
    """

    def __init__(self, layers: list[_Dense]) -> None:
        self.layers = layers
        # [start, end) and shape of every parameter in the flat vector, in order
        self.spans = [span for layer in layers for span in (layer.weight, layer.bias) if span]
        self.shapes = [
            shape
            for layer in layers
            for shape, span in ((layer.shape, layer.weight), (layer.shape[:1], layer.bias))
            if span
        ]
        self._plans: dict[tuple, _DensePlan] = {}  # the two most recent, by params and B
        self._buffers: dict[tuple, dict[str, Any]] = {}  # the two most recent, by shape

    def split(
        self, params: torch.Tensor, out: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """`params` [C, P] as one contiguous tensor per parameter (a copy, into `out` if given),
        in the flat vector's order: weights [C, out, in], biases [C, out]. What `descend`
        steps; `join` undoes it."""
        c = params.shape[0]
        pieces = out if out is not None else [params.new_empty((c, *s)) for s in self.shapes]
        for piece, span in zip(pieces, self.spans):
            piece.view(c, -1).copy_(params[:, slice(*span)])
        return pieces

    @staticmethod
    def join(pieces: list[torch.Tensor], out: torch.Tensor) -> None:
        """`split`'s pieces back into `out` [C, P]."""
        torch.cat([piece.flatten(1) for piece in pieces], 1, out=out)

    def _plan(self, params: torch.Tensor | list[torch.Tensor], b: int) -> _DensePlan:
        """Buffers for a [C, B] minibatch and every view a step takes of them and of the
        parameters (`params` [C, P], or `split`'s pieces), made once and kept while the same
        tensors come back (the trainer's, updated in place): the views hold their storage, so
        no other tensor can show the same address, shape and strides meanwhile. A step then
        only calls its kernels."""
        tensors = [params] if isinstance(params, torch.Tensor) else params
        first = tensors[0]
        key = (
            *((t.data_ptr(), t.shape, t.stride()) for t in tensors),
            first.device,
            first.dtype,
            b,
        )
        plan = self._plans.pop(key, None) or self._make_plan(params, b)
        self._plans[key] = plan  # the most recent last
        while len(self._plans) > 2:  # a cohort's slices and its remainder
            del self._plans[next(iter(self._plans))]
        return plan

    def _make_plan(self, params: torch.Tensor | list[torch.Tensor], b: int) -> _DensePlan:
        if isinstance(params, torch.Tensor):
            c = params.shape[0]
            views = [params[:, slice(*span)] for span in self.spans]
        else:
            c, views = params[0].shape[0], params
        *hidden, last = self.layers
        buf = self._buffers_for(c, b, views[0])
        acts, dacts, logp, dws = buf["act"], buf["dact"], buf["logp"], buf["dweight"]
        weights, biases, dbs = [], [], []
        pieces: list[tuple[torch.Tensor, torch.Tensor]] = []  # in the flat vector's order
        views_left = iter(views)
        for layer, dw, db in zip(self.layers, dws, buf["dbias"]):
            flat = next(views_left).view(c, -1)
            weights.append(flat.view(c, *layer.shape))
            pieces.append((flat, dw.view(c, -1)))
            bias = None if layer.bias is None else next(views_left).view(c, -1)
            if bias is not None:
                pieces.append((bias, db))
            biases.append(bias)
            dbs.append(None if bias is None else db)
        forward = [
            (a, w.transpose(1, 2), None if bias is None else bias.unsqueeze(1), layer.relu)
            for layer, w, bias, a in zip(hidden, weights, biases, acts)
        ]
        bias = biases[-1]
        logits = (
            buf["logits"],
            weights[-1],
            None if bias is None else bias.unsqueeze(2),
            acts[-1].transpose(1, 2) if acts else None,
        )
        backward = []
        for i in range(len(self.layers) - 1, -1, -1):
            top = i == len(hidden)
            grad = logp if top else dacts[i]  # dz [C, K, B], else [C, B, out]
            grad_in = grad.transpose(1, 2) if top else grad  # [C, B, out]
            backward.append(
                _DenseBackward(
                    grad if top else grad.transpose(1, 2),
                    acts[i - 1] if i else None,
                    dws[i],
                    dbs[i],
                    grad,
                    2 if top else 1,
                    grad_in,
                    weights[i],
                    biases[i],
                    dacts[i - 1] if i else None,
                    i > 0 and self.layers[i - 1].relu,
                )
            )
        return _DensePlan(forward, logits, logp, buf["minus_1_over_b"], backward, pieces)

    def _buffers_for(self, c: int, b: int, like: torch.Tensor) -> dict[str, Any]:
        """Activations and gradients for [C, B] minibatches, shared by the plans of every
        parameter tensor of that shape (the trainer's new one each round); the two most
        recent shapes are kept."""
        key = (c, b, like.dtype, like.device)
        buf = self._buffers.pop(key, None)
        if buf is None:
            new = lambda *shape: like.new_empty(shape)  # noqa: E731
            *hidden, last = self.layers
            buf = {
                "act": [new(c, b, layer.shape[0]) for layer in hidden],  # [C, B, out]
                "dact": [new(c, b, layer.shape[0]) for layer in hidden],
                "logits": new(c, last.shape[0], b),  # [C, K, B]
                "logp": new(c, last.shape[0], b),  # the log-softmax, then the logits' gradient
                "minus_1_over_b": torch.full(
                    (c, 1, b), -1.0 / b, dtype=like.dtype, device=like.device
                ),
                "dweight": [new(c, *layer.shape) for layer in self.layers],
                "dbias": [new(c, layer.shape[0]) for layer in self.layers],
            }
        self._buffers[key] = buf
        while len(self._buffers) > 2:
            del self._buffers[next(iter(self._buffers))]
        return buf

    def __call__(
        self,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        out: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """params [C, P], x [C, B, *input], y [C, B] -> loss [C], grads [C, P] (into `out`);
        the cross-entropy reads no aux."""
        loss, pieces = self._pieces(params, x, y)
        grads = [g for _, g in pieces]
        return loss, torch.cat(grads, 1, out=out) if out is not None else torch.cat(grads, 1)

    def descend(
        self, pieces: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, lr: float
    ) -> torch.Tensor:
        """One plain SGD step on `split`'s pieces, ``w -= lr * grad`` in place, returning the
        losses [C]: each weight by one GEMM (see the class docstring), each bias by its
        gradient's sum."""
        return self._pieces(pieces, x, y, lr)[0]

    def _pieces(
        self,
        params: torch.Tensor | list[torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        lr: float | None = None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Losses [C] and, in the flat vector's order, (view of the parameter [C, n], its
        gradient [C, n]) for every parameter; the gradients live in reused buffers. With `lr`
        (`split`'s pieces), the step is taken instead and the gradients are not kept."""
        c, b = y.shape
        plan = self._plan(params, b)
        x = x.reshape(c, b, -1)
        a_in = x
        for a, w_t, bias, relu in plan.forward:
            batched_affine(a, a_in, w_t, bias)
            if relu:
                a.clamp_min_(0)
            a_in = a
        z, w, bias, a_t = plan.logits  # z [C, K, B]
        a_t = x.transpose(1, 2) if a_t is None else a_t
        batched_affine(z, w, a_t, bias)
        label = y.unsqueeze(1)  # [C, 1, B]
        logp = torch._log_softmax(z, 1, False, out=plan.logp)  # [C, K, B]
        loss = logp.gather(1, label).mean((1, 2)).neg_()  # [C]
        logp.exp_().div_(b).scatter_add_(1, label, plan.minus_1_over_b)  # dz [C, K, B]
        # backward, last layer first; each layer's input gradient is taken before its own
        # weights change
        for step in plan.backward:
            a_in = x if step.a_in is None else step.a_in
            if step.d_in is not None:
                torch.bmm(step.grad_in, step.w, out=step.d_in)
            if lr is None:
                torch.bmm(step.grad_t, a_in, out=step.dw)
            else:
                step.w.baddbmm_(step.grad_t, a_in, alpha=-lr)
            if step.db is not None and step.bias is not None:  # the one with the other
                torch.sum(step.grad, step.sum_dim, out=step.db)
                if lr is not None:
                    step.bias.add_(step.db, alpha=-lr)
            if step.relu_below:
                torch.ops.aten.threshold_backward.grad_input(
                    step.d_in, a_in, 0, grad_input=step.d_in
                )
        return loss, plan.pieces


class _DenseBackward(NamedTuple):
    """One layer's backward pass: dW = grad_t @ a_in, db = grad summed over the batch,
    d_in = grad_in @ W (then through the ReLU below), all into the plan's buffers; or, in a
    step (`DenseStack.descend`), W and b updated in place instead of dW and db kept."""

    grad_t: torch.Tensor  # [C, out, B] the output gradient, as dW's left factor
    a_in: torch.Tensor | None  # [C, B, in] the layer's input (None: the minibatch x)
    dw: torch.Tensor  # [C, out, in]
    db: torch.Tensor | None  # [C, out]
    grad: torch.Tensor  # the output gradient as stored ([C, K, B] last, else [C, B, out])
    sum_dim: int  # its batch dimension
    grad_in: torch.Tensor  # [C, B, out] the output gradient, as d_in's left factor
    w: torch.Tensor  # [C, out, in]
    bias: torch.Tensor | None  # [C, out]
    d_in: torch.Tensor | None  # [C, B, in] the input gradient (None: the first layer)
    relu_below: bool  # the input came through a ReLU


class _DensePlan(NamedTuple):
    forward: list  # hidden layers: (activation [C, B, out], W^T, bias [C, 1, out] | None, relu)
    logits: tuple  # (z [C, K, B], W [C, K, in], bias [C, K, 1] | None, input^T | None: x's)
    logp: torch.Tensor  # [C, K, B] the log-softmax, then the logits' gradient dz
    minus_1_over_b: torch.Tensor  # [C, 1, B]
    backward: list[_DenseBackward]  # last layer first
    pieces: list[tuple[torch.Tensor, torch.Tensor]]  # (params view [C, n], gradient [C, n])


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
        self._buffers: tuple[tuple, tuple] = ((), ())  # a step's buffers, by shape

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
        outgrow the caches (benchmarks/bench.py's rows (b) and (c) print one client a call,
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
        return min(fit, CPU_CONV_CLIENTS_PER_CALL) if on_cpu_conv else fit

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
        over them): steps with a short batch take the generic engine. `aux` is per-client data,
        a pytree of ``[C, ...]`` tensors handed (sliced with the cohort) to `loss_fn` and to
        the optimizer's ``update(..., aux=)``; `snapshot_at` (an int or [C]) asks for each
        client's iterate after that many of its steps (its last, where it takes fewer).
        """
        engine: ValueAndGrad  # the one clients_per_call sizes the cohort by
        if loss_fn is None:
            value_and_grad = engine = self.default_value_and_grad
        elif self.hand is not None and isinstance(loss_fn, ProximalLoss):
            value_and_grad, engine = loss_fn.over(self.hand), self.hand
        else:
            value_and_grad = engine = autograd_value_and_grad(self.model, loss_fn)
        engines = (value_and_grad, autograd_value_and_grad(self.model, loss_fn or cross_entropy))
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
        rows = lambda tree, i: None if tree is None else _rows(tree, i, i + per_call)  # noqa
        parts = [
            self._train(
                params[i : i + per_call],
                batches[i : i + per_call],
                steps[i : i + per_call],
                optimizer,
                rows(opt_state, i),
                engines,
                None if sizes is None else sizes[i : i + per_call],
                rows(aux, i),
                rows(snapshot_at, i),
            )
            for i in range(0, c, per_call)
        ]
        cat = lambda *rows: torch.cat(rows) if _per_client(rows[0]) else rows[0]  # noqa: E731
        return CohortResult(*(tree_map(cat, *field) for field in zip(*parts)))

    def _step_buffers(
        self, params: torch.Tensor, b: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A step's gradient [C, P] and minibatch (x [C, B, ...], y [C, B]) buffers, kept for
        the next call of the same shape (the next round) instead of allocated again. Nothing
        returned from `train` holds them."""
        x, y = self.x_data, self.y_data
        key = (
            params.shape,
            params.dtype,
            params.device,
            b,
            x.shape[1:],
            x.dtype,
            x.device,
            y.dtype,
        )
        if self._buffers[0] != key:
            c = params.shape[0]
            self._buffers = (
                key,
                (
                    torch.empty_like(params),
                    x.new_empty((c, b, *x.shape[1:])),
                    y.new_empty((c, b)),
                ),
            )
        return self._buffers[1]

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
    ) -> CohortResult:
        c, t_max, b = batches.shape
        short = [False] * t_max if sizes is None else np.asarray((sizes < b).any(0)).tolist()
        sample_grads = torch.zeros(c, dtype=torch.int64, device=params.device)
        if opt_state is None:
            opt_state = optimizer.init(params)
        start = params  # [C, P], or [P] expanded: copied into the steps' own tensors below
        params = torch.empty_like(params, memory_format=torch.contiguous_format)
        grads_buf, xb, yb = self._step_buffers(params, b)
        xb_rows, yb_rows = xb.view(c * b, *xb.shape[2:]), yb.view(-1)  # gathered into
        rows_by_step = batches.transpose(0, 1).reshape(t_max, c * b)  # a step's rows, contiguous
        # an engine that takes a plain SGD step itself, without a [C, P] gradient (DenseStack),
        # on its own layout of the parameters where it has one (`DenseStack.split`, a contiguous
        # tensor each): `work` is then what the steps update; it is joined into params where
        # [C, P] is read (a step through the optimizer, a snapshot, the end) and split again
        # after such a step
        descend = getattr(engines[0], "descend", None) if optimizer.plain_lr is not None else None
        split = getattr(engines[0], "split", None) if descend is not None else None
        join = getattr(engines[0], "join", None)
        work = split(start) if split is not None else params.copy_(start)

        def joined() -> torch.Tensor:
            """params [C, P] as the steps left them."""
            if join is not None and work is not params:
                join(work, params)
            return params

        loss_sum = torch.zeros(c, dtype=params.dtype, device=params.device)
        grad_evals = torch.zeros(c, dtype=torch.int64, device=params.device)
        uniform = bool((steps == t_max).all())
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
                assert sizes is not None  # a step is short only where sizes say so
                size = torch.as_tensor(sizes[:, s], device=yb.device)  # [C]
                yb.masked_fill_(torch.arange(b, device=yb.device) >= size[:, None], PAD)
            else:
                size = b
            calls = 0

            def grad_fn(p: torch.Tensor) -> torch.Tensor:
                nonlocal calls
                calls += 1
                return value_and_grad(p, xb, yb, aux=aux)[1]  # noqa: B023 (called within this step)

            before = None if uniform else tree_map(torch.clone, work)
            if descend is not None and not short[s]:  # plain SGD, stepped by the engine
                loss, new_state = descend(work, xb, yb, optimizer.plain_lr), opt_state
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
            joined(),
            opt_state,
            loss_sum / steps.clamp_min(1).to(loss_sum.dtype),
            grad_evals,
            sample_grads,
            snapshot,
        )
