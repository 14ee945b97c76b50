"""A hand-derived engine for MLPs: the cohort's losses and gradients without autograd.

Accelerates `cohort.autograd_value_and_grad(model)`, the readable path: autograd through
`Model.forward_stacked` (torch.func's vmap of the plain ``nn.Module``) and
`cohort.cross_entropy`. `DenseStack` must equal it within tests/tolerance.py's
`assert_tensors_close` (relative 1e-5, absolute 1e-6, float32): the same maths with the sums
taken in another order. Its fused plain SGD step (`DenseStack.descend`) must equal that
gradient stepped by the optimizer within the same tolerance. tests/test_kernels_dense.py
checks both.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_map

from flnet.learn.kernels.conv import batched_affine
from flnet.learn.kernels.padded import cross_entropy_head
from flnet.learn.models import Model

PLANS_KEPT = 16  # plans kept in all (`DenseStack._plan`): views, a few kilobytes each


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
        # by params and B, the most recent last: of the newest parameters' storages and of
        # one other's (`_keep_plans`), each with its buffers' key
        self._plans: dict[tuple, tuple[tuple, _DensePlan]] = {}
        # by B, dtype and device: each for its most clients yet (`_buffers_for`), two kept
        self._buffers: dict[tuple, dict[str, Any]] = {}
        # the last step's (parameter tensors, B, plan): the next step's, without a key
        self._last: list[Any] = [(), 0, None]
        self.pads = False  # labels may be PAD (`padded`)

    def padded(self) -> DenseStack:
        """This engine for minibatches with empty slots (PAD labels: an epoch's short last
        batch), the loss the mean over each client's real slots (`padded.cross_entropy_head`);
        it shares this one's plans and buffers."""
        twin = copy.copy(self)
        twin.pads = True
        return twin

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
        only calls its kernels; the steps of one call find theirs by the tensors' identity
        (the last plan holds them, so no other tensor can have their id meanwhile).

        Plans are kept for every shape of the newest parameters' storages (a stream's calls of
        varying sizes through the trainer's kept pieces, a cohort's slices of one tensor): a
        plan holds its parameters' memory, so those of only one other storage are kept."""
        tensors = (params,) if isinstance(params, torch.Tensor) else tuple(params)
        last_tensors, last_b, last_plan = self._last
        if (
            last_b == b
            and len(last_tensors) == len(tensors)
            and all(t is u for t, u in zip(tensors, last_tensors))
        ):
            return last_plan
        first = tensors[0]
        key = (
            *((t.data_ptr(), t.shape, t.stride()) for t in tensors),
            first.device,
            first.dtype,
            b,
        )
        kept = self._plans.pop(key, None)
        plan = kept[1] if kept is not None else self._make_plan(params, b)
        storages = tuple(t.untyped_storage().data_ptr() for t in tensors)
        self._plans[key] = (storages, plan)  # the most recent last
        self._keep_plans(storages)
        self._last[:] = [tensors, b, plan]
        return plan

    def _keep_plans(self, newest: tuple) -> None:
        """Drop the plans of parameter storages other than `newest` and the most recent other
        one, and beyond PLANS_KEPT in all."""
        other = None
        for key, (storages, _) in reversed(list(self._plans.items())):
            if storages != newest and other is None:
                other = storages
            if storages not in (newest, other):
                del self._plans[key]
        while len(self._plans) > PLANS_KEPT:
            del self._plans[next(iter(self._plans))]

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
        parameter tensor: each buffer's first C rows (a view at its start, laid out as a
        [C, ...] tensor of its own) of one made for the most clients yet with this B (a
        stream's calls vary in size); the two most recent B's are kept. Plans on buffers
        outgrown or dropped are dropped with them."""
        key = (b, like.dtype, like.device)
        full = self._buffers.pop(key, None)
        if full is None or full["logits"].shape[0] < c:
            new = lambda *shape: like.new_empty(shape)  # noqa: E731
            *hidden, last = self.layers
            full = {
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
            self._drop_plans_on(key)
        self._buffers[key] = full
        while len(self._buffers) > 2:
            self._drop_plans_on(next(iter(self._buffers)))
            del self._buffers[next(iter(self._buffers))]
        return tree_map(lambda t: t[:c], full)

    def _drop_plans_on(self, buffers_key: tuple) -> None:
        """Forget the plans that use the buffers of `buffers_key` (B, dtype, device)."""
        b, dtype, device = buffers_key
        for key in [k for k in self._plans if k[-3:] == (device, dtype, b)]:
            del self._plans[key]
        self._last[:] = [(), 0, None]

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
        logp = torch._log_softmax(z, 1, False, out=plan.logp)  # [C, K, B]
        if self.pads:  # dz [C, K, B], empty slots 0
            loss = cross_entropy_head(logp, y)
        else:
            label = y.unsqueeze(1)  # [C, 1, B]
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
