"""A hand-derived engine for small CNNs: the cohort's losses and gradients without autograd.

`ConvStack` is to convolutional ``nn.Sequential`` models what `cohort.DenseStack` is to MLPs:
the mean cross-entropy ``[C]`` and its gradient ``[C, P]`` for every client of a cohort, the same
maths as `cohort.autograd_value_and_grad` (tests/test_conv.py checks each paper CNN), written
out without autograd or vmap. It takes stacks of Conv2d (stride 1, zero padding, groups 1,
with or without bias), ReLU, MaxPool2d (no padding or dilation), one Flatten and Linear layers.

Layout: batch last. An image activation is ``[C, channels, H, W, B]`` and a dense one
``[C, features, B]``, so that every layer is one bmm over the cohort with no transposes, the
weights are used in torch's own order, and Flatten is a view:

- the input ``[C, B, Cin, H, W]`` is copied once to ``[C, Cin, H, W, B]``;
- convolution forward, several clients a call: im2col copies the (zero-padded) input into
  ``cols [C, Cin*kh*kw, Ho*Wo*B]`` through an `as_strided` view (runs of B contiguous floats),
  then ``out [C, Cout, Ho*Wo*B] = W [C, Cout, Cin*kh*kw] @ cols`` (+ bias), already the next
  layer's layout;
- convolution forward, one client a call (what `path: auto` takes on the CPU): torch's own
  kernel (oneDNN) on the same layout, with no copy (`_Native`): ``[Cin, H, W, B]`` is the
  image ``[1, Cin, H, W*B]`` and a kernel step of one pixel is a step of B columns there, a
  convolution with dilation (1, B) and padding (ph, pw*B) whose output is ``[Cout, Ho, Wo,
  B]``. The first layer's weight and bias gradients come from torch's kernel too;
- convolution backward (past the first layer, and every layer of a cohort): im2col of the
  layer's input as above (kept from the forward pass where it was built there), ``dW = dOut @
  cols^T``, ``db = sum dOut``, ``dcols = W^T @ dOut``, and col2im adds dcols back into the
  padded input gradient, one shifted window per kernel offset in one `_foreach_add_`. The
  first layer's input gradient is never needed and never computed;
- max-pool: ``[C*ch, H, W, B]`` is a channels-last ``[N, B, H, W]`` image to torch, whose pool
  then vectorises over B (the NCHW pool is several times slower here); its argmax indices
  (the first maximum of a window, as autograd's) route the backward pass, through torch's
  ``max_pool2d_with_indices_backward``;
- ReLU runs in place and its backward masks by its output. A ReLU right before a max-pool
  runs after it instead, on a quarter of the elements for a 2x2 pool: the same numbers and
  gradients, ties included. relu(max x) = max relu(x); where the window's max is positive,
  its first maximum is the same in x and in relu(x) and the mask passes; where it is not,
  relu(x) is all zeros there, autograd routes the window's gradient to its first element,
  whose ReLU mask is 0, and the swapped order masks the pooled zero: 0 both ways
  (tests/test_conv.py checks ties in both orders);
- Linear: ``[C, out, B] = W @ a`` (+ bias); the logits ``[C, K, B]`` reduce their softmax over
  the middle dimension, as in `DenseStack`.

Measured choices (one-off experiments against benchmarks/bench.py's workloads b and c; the
alternatives are not kept, so only the kept paths' rows can be printed again): a
``[C, ch, B, H, W]`` layout spent over a quarter of its time in NCHW max-pooling; true
channels-last ``[C, B, H, W, ch]`` made the pool fast but the GEMMs (weights reordered each
step) and the col2im adds (runs of ch floats) slower, hence batch last. For one client a call
torch's convolution kernel was as fast as the im2col GEMMs on the MNIST CNN and faster on the
CIFAR tutorial CNN (its first layer, 3 -> 6 channels on 32x32, is a GEMM of 6 rows over 25,088
columns, which oneDNN runs without the columns); for the whole cohort in one call oneDNN's
grouped convolution was slower than im2col, hence im2col there. oneDNN costs tens of
microseconds a call whatever the size. The bench's (b) and (c) rows print the sequential (one
client a call) and batched paths as they are.

Measured later (benchmarks/bench.py's (b) and (c), one client a call; 2-vCPU AMD EPYC with
AVX-512, 1 MB L2 a core) and not kept, so that the next attempt starts from here:

- a (b) step costs about 400 us plus 32 us a sample (fitted over 1 to 32 samples); oneDNN's
  fixed cost is about 30 us a call (3 calls a step), the rest of the 400 is the other ~60
  kernels and the Python around them. The five big products (two forward convolutions, the
  first layer's weight gradient, the second's weight and input gradients) take ~80% of a
  step, each 7-60% slower inside the step (profiled) than alone (its buffers outgrow L2);
- oneDNN runs the 1 -> 10 first layer as a direct kernel on 16-channel blocks and reorders
  the output (forward, ~48 us) and dz (weight gradient, ~34 us) each call; torch's NCHW or
  NHWC images instead of the dilated view are no faster (168 us against 149 forward);
- the first layer as im2col GEMMs from columns built in the forward pass and kept, with a
  ones row (the bias gradient) and zero rows padding K to 32 (MKL's [10, 18432] x [18432,
  32] runs at 67 GFLOP/s, against 47 at 25 columns): within 2% of oneDNN on (b), 30% slower
  on (c) (K = 75 over 25,088 columns);
- the first layer's weight gradient from the pooled positions only (dz is zero off each
  window's argmax), as one [4 x 10, 4,608] x [4,608, 36] GEMM over stride-2 6x6 windows:
  ~245 us with its inputs built, against ~185 us for torch's kernel;
- the im2col layers' bias gradient from a ones row of columns padded to a multiple of 16
  (250 -> 256; MKL runs that product 5% faster): within noise, not kept;
- two or five clients a call, torch's kernel per client (its outputs copied into the
  cohort's buffers) and everything else batched: 5% and 14% slower than one;
- oneDNN's grouped convolution for 2 or 5 clients: 1.5 to 5.6 times slower per client,
  except the second layer's weight gradient (the same);
- the pool as `torch.max(dim)` with indices over the four offsets of a window: ten times
  slower than torch's pool (``amax`` alone is fast, but finding the first maximum then takes more
  time than torch's pool backward).

Every intermediate lives in buffers reused across calls of the same cohort and batch size
(`_Arena`, for the two most recent shapes), since allocating megabytes a step costs page
faults. Only float maths and ops that exist on every device are used, so the engine runs on
CUDA as on the CPU (untested there: no GPU was lent; torch's kernel is taken on the CPU only).
Short batches (PAD labels) are not handled here: `cohort.Trainer` routes those steps to
autograd.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from flnet.learn.models import Model


def batched_affine(out: torch.Tensor, left: torch.Tensor, right: torch.Tensor, bias: Any) -> None:
    """``out = left @ right (+ bias)`` batched over the cohort, into `out` (one kernel either
    way): a layer's forward pass in `ConvStack` and `cohort.DenseStack`."""
    if bias is None:
        torch.bmm(left, right, out=out)
    else:
        torch.baddbmm(bias, left, right, out=out)


Span = tuple[int, int]  # [start, end) of a parameter tensor in the flat vector


class _Conv(NamedTuple):
    weight: Span
    bias: Span | None
    c_in: int
    c_out: int
    kernel: tuple[int, int]
    padding: tuple[int, int]
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]


class _Pool(NamedTuple):
    kernel: tuple[int, int]
    stride: tuple[int, int]
    channels: int
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]


class _ReLU(NamedTuple):
    pass


class _Flatten(NamedTuple):
    channels: int
    hw: tuple[int, int]


class _Linear(NamedTuple):
    weight: Span
    bias: Span | None
    shape: tuple[int, int]  # (out, in)


Layer = _Conv | _Pool | _ReLU | _Flatten | _Linear


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def conv_layers(model: Model) -> list[Layer] | None:
    """The layers of an ``nn.Sequential`` that `ConvStack` computes, else None: Conv2d, ReLU
    and MaxPool2d on images, one Flatten, then Linear and ReLU, ending in a Linear layer; at
    least one Conv2d, and no ReLU first (it would run in place on the caller's inputs). A
    ReLU right before a MaxPool2d is put after it (see the module docstring), and a ReLU that
    then follows another is dropped: relu(relu(x)) = relu(x), with the same gradient."""
    module = model.module
    if not isinstance(module, nn.Sequential) or len(model.input_shape) != 3:
        return None
    offsets = dict(zip(model.names, np.cumsum([0, *model.sizes]).tolist()))

    def span(name: str) -> Span:
        return offsets[name], offsets[name] + model.sizes[model.names.index(name)]

    channels, h, w = model.input_shape
    flat: int | None = None  # features after the Flatten
    layers: list[Layer] = []
    for name, child in module.named_children():
        if isinstance(child, nn.Conv2d) and flat is None:
            kh, kw = _pair(child.kernel_size)
            if (
                isinstance(child.padding, str)
                or _pair(child.stride) != (1, 1)
                or _pair(child.dilation) != (1, 1)
                or child.groups != 1
                or child.padding_mode != "zeros"
                or child.in_channels != channels
            ):
                return None
            ph, pw = _pair(child.padding)
            out_hw = (h + 2 * ph - kh + 1, w + 2 * pw - kw + 1)
            bias = span(f"{name}.bias") if child.bias is not None else None
            layers.append(
                _Conv(
                    span(f"{name}.weight"),
                    bias,
                    channels,
                    child.out_channels,
                    (kh, kw),
                    (ph, pw),
                    (h, w),
                    out_hw,
                )
            )
            channels, (h, w) = child.out_channels, out_hw
        elif isinstance(child, nn.MaxPool2d) and flat is None and layers:
            k, s = _pair(child.kernel_size), _pair(child.stride or child.kernel_size)
            if (
                _pair(child.padding) != (0, 0)
                or _pair(child.dilation) != (1, 1)
                or child.ceil_mode
                or child.return_indices
            ):
                return None
            out_hw = ((h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1)
            pool = _Pool(k, s, channels, (h, w), out_hw)
            if isinstance(layers[-1], _ReLU):  # ReLU then max-pool: the pool first (below)
                layers.insert(len(layers) - 1, pool)
            else:
                layers.append(pool)
            h, w = out_hw
        elif isinstance(child, nn.ReLU) and layers:
            if not isinstance(layers[-1], _ReLU):  # a ReLU after a ReLU changes nothing
                layers.append(_ReLU())
        elif isinstance(child, nn.Flatten) and flat is None and layers:
            if (child.start_dim, child.end_dim) != (1, -1):
                return None
            layers.append(_Flatten(channels, (h, w)))
            flat = channels * h * w
        elif isinstance(child, nn.Linear) and flat == child.in_features:
            bias = span(f"{name}.bias") if child.bias is not None else None
            layers.append(
                _Linear(span(f"{name}.weight"), bias, (child.out_features, child.in_features))
            )
            flat = child.out_features
        else:
            return None
    if not layers or not isinstance(layers[-1], _Linear):
        return None
    if not any(isinstance(layer, _Conv) for layer in layers):
        return None
    return layers


class _Arena:
    """Buffers handed out in call order: the n-th request of every call gets the same tensor
    (the engine asks for the same shapes in the same order each call). `zeros` buffers are
    zeroed once; callers write only their interior (a convolution's padded input). `memo`
    keeps what is derived from those buffers alone (col2im's views), for the same reason."""

    def __init__(self, like: torch.Tensor) -> None:
        self.dtype, self.device = like.dtype, like.device
        self.buffers: list[torch.Tensor] = []
        self.next = 0
        self.memo: dict[int, Any] = {}

    def __call__(
        self, *shape: int, zeros: bool = False, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        if self.next == len(self.buffers):
            make = torch.zeros if zeros else torch.empty
            self.buffers.append(make(shape, dtype=dtype or self.dtype, device=self.device))
        buf = self.buffers[self.next]
        self.next += 1
        return buf


class _Native(NamedTuple):
    """A convolution of one client through torch's own kernel (oneDNN on the CPU), on the
    batch-last layout as it is: ``[1, Cin, H, W, B]`` is the image ``[1, Cin, H, W*B]``, a
    kernel column step of one pixel is a step of B there (dilation (1, B)), a padding of pw
    pixels is pw*B zero columns, and the output is ``[1, Cout, Ho, Wo, B]``."""

    layer: _Conv
    b: int

    def _args(self) -> tuple:
        (ph, pw), b = self.layer.padding, self.b
        return [1, 1], [ph, pw * b], [1, b], False, [0, 0], 1

    def _image(self, a: torch.Tensor) -> torch.Tensor:
        h, w = self.layer.in_hw
        return a.view(1, self.layer.c_in, h, w * self.b)

    def _kernels(self, w: torch.Tensor) -> torch.Tensor:
        return w.view(self.layer.c_out, self.layer.c_in, *self.layer.kernel)

    def forward(self, a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """a [1, Cin, H, W, B], w [1, Cout, Cin*kh*kw], bias [1, Cout, 1] -> [1, Cout, Ho,
        Wo, B]."""
        layer = self.layer
        flat_bias = None if bias is None else bias.view(layer.c_out)
        z = torch.ops.aten.convolution(self._image(a), self._kernels(w), flat_bias, *self._args())
        return z.view(1, layer.c_out, *layer.out_hw, self.b)

    def weight_grads(self, a: torch.Tensor, dz: torch.Tensor, w: torch.Tensor) -> list:
        """The weight's (and bias's) gradient [1, *] from the output's dz [1, Cout, Ho, Wo, B]."""
        layer = self.layer
        has_bias = layer.bias is not None
        _, dw, db = torch.ops.aten.convolution_backward(
            dz.view(1, layer.c_out, layer.out_hw[0], -1),
            self._image(a),
            self._kernels(w),
            [layer.c_out] if has_bias else None,
            *self._args(),
            [False, True, has_bias],
        )
        return [dw.view(1, -1)] + ([db.view(1, -1)] if has_bias else [])


class ConvStack:
    """Mean cross-entropy and its gradient for a conv/pool/ReLU/Flatten/Linear stack, by hand
    (see the module docstring for the layout and the maths)."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers
        self._arenas: dict[tuple, _Arena] = {}
        self._views: tuple[tuple, dict[int, Any]] = ((), {})  # the last params' layer views

    def floats_per_sample(self) -> int:
        """Elements this engine keeps per sample (activations, im2col columns, their
        gradients): `cohort.Trainer.clients_per_call` sizes `path: auto` cohorts by it."""
        total = 0
        for layer in self.layers:
            if isinstance(layer, _Conv):
                ho, wo = layer.out_hw
                h, w = layer.in_hw
                cols = layer.c_in * math.prod(layer.kernel) * ho * wo
                padded = layer.c_in * (h + 2 * layer.padding[0]) * (w + 2 * layer.padding[1])
                total += 2 * cols + 2 * padded + 2 * layer.c_out * ho * wo
            elif isinstance(layer, _Pool):
                total += 3 * layer.channels * math.prod(layer.out_hw)
            elif isinstance(layer, _Flatten):
                total += 2 * layer.channels * math.prod(layer.hw)
            elif isinstance(layer, _Linear):
                total += 3 * layer.shape[0]
        return total

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
        c, b = y.shape
        key = (c, b, params.dtype, params.device)
        # the two most recent shapes (a cohort's slices and its remainder), not one arena per
        # cohort size a run ever sees
        arena = self._arenas.pop(key, None) or _Arena(params)
        self._arenas[key] = arena
        while len(self._arenas) > 2:
            del self._arenas[next(iter(self._arenas))]
        arena.next = 0
        views = self._param_views(params)
        # one client a call (path auto on the CPU): convolutions through torch's kernel;
        # several: im2col GEMMs over the cohort (oneDNN's grouped convolution is slower)
        native = c == 1 and params.device.type == "cpu"

        # ---- forward, batch last; saved[i] is what layer i's backward needs
        # [C, Cin, H, W, B]: one transposing copy, so that im2col reads runs of B floats
        a = arena(c, *x.shape[2:], b).copy_(x.view(c, b, *x.shape[2:]).permute(0, 2, 3, 4, 1))
        saved: list[Any] = []
        for i, layer in enumerate(self.layers):
            if isinstance(layer, _Conv):
                if native:  # its columns are built in the backward pass, where needed
                    saved.append(a)
                    a = _Native(layer, b).forward(a, *views[i])
                    continue
                cols = self._im2col(arena, layer, a, c, b)  # [C, Cin*kh*kw, Ho*Wo*B]
                z = arena(c, layer.c_out, cols.shape[2])
                w, bias = views[i]
                batched_affine(z, w, cols, bias)
                saved.append(cols)
                a = z.view(c, layer.c_out, *layer.out_hw, b)
            elif isinstance(layer, _Pool):
                # [C*ch, H, W, B] is channels-last [N, B, H, W] to torch: B is the vector lane
                # (into reused buffers: fresh ones of this size cost page faults each step)
                planes = a.reshape(c * layer.channels, *layer.in_hw, b).permute(0, 3, 1, 2)
                pooled = arena(c, layer.channels, *layer.out_hw, b)
                idx = arena(c * layer.channels, *layer.out_hw, b, dtype=torch.int64)
                torch.ops.aten.max_pool2d_with_indices.out(
                    planes,
                    layer.kernel,
                    layer.stride,
                    (0, 0),
                    (1, 1),
                    False,
                    out=pooled.view(c * layer.channels, *layer.out_hw, b).permute(0, 3, 1, 2),
                    indices=idx.permute(0, 3, 1, 2),
                )
                saved.append((planes, idx.permute(0, 3, 1, 2)))
                a = pooled
            elif isinstance(layer, _ReLU):
                a = a.clamp_min_(0)
                saved.append(a)
            elif isinstance(layer, _Flatten):  # torch's (channel, row, column) order
                a = a.reshape(c, -1, b)
                saved.append(None)
            else:  # Linear: [C, in, B] -> [C, out, B]
                z = arena(c, layer.shape[0], b)
                w, bias = views[i]
                batched_affine(z, w, a, bias)
                saved.append(a)
                a = z

        # ---- the loss and its gradient (log-softmax over the middle dimension, as DenseStack)
        label = y.unsqueeze(1)  # [C, 1, B]
        logp = torch.ops.aten._log_softmax.out(a, 1, False, out=arena(*a.shape))  # [C, K, B]
        loss = logp.gather(1, label).mean((1, 2)).neg_()  # [C]
        minus = arena(c, 1, b)
        if id(minus) not in arena.memo:
            arena.memo[id(minus)] = minus.fill_(-1.0 / b)
        d = logp.exp_().div_(b).scatter_add_(1, label, minus)  # [C, K, B]

        # ---- backward
        parts: list[torch.Tensor] = []
        for i in range(len(self.layers) - 1, -1, -1):
            layer, s = self.layers[i], saved[i]
            if isinstance(layer, _Linear):
                w = views[i][0]
                dw = torch.bmm(d, s.transpose(1, 2), out=arena(c, *layer.shape))
                parts[:0] = [dw.view(c, -1)] + ([d.sum(2)] if layer.bias is not None else [])
                d = torch.bmm(w.transpose(1, 2), d, out=arena(c, layer.shape[1], b))
            elif isinstance(layer, _ReLU):
                d = torch.ops.aten.threshold_backward.grad_input(d, s, 0, grad_input=d)
            elif isinstance(layer, _Flatten):
                d = d.view(c, layer.channels, *layer.hw, b)
            elif isinstance(layer, _Pool):
                planes, idx = s
                grad_out = d.reshape(c * layer.channels, *layer.out_hw, b).permute(0, 3, 1, 2)
                d = arena(c, layer.channels, *layer.in_hw, b)
                torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
                    grad_out,
                    planes,
                    layer.kernel,
                    layer.stride,
                    (0, 0),
                    (1, 1),
                    False,
                    idx,
                    grad_input=d.view(c * layer.channels, *layer.in_hw, b).permute(0, 3, 1, 2),
                )
            else:  # _Conv
                if not i and native:  # the first layer's input gradient: never needed
                    parts[:0] = _Native(layer, b).weight_grads(s, d, views[i][0])
                    continue
                dz = d.reshape(c, layer.c_out, -1)
                cols = self._im2col(arena, layer, s, c, b) if native else s
                k = cols.shape[1]
                dw = torch.bmm(dz, cols.transpose(1, 2), out=arena(c, layer.c_out, k))
                parts[:0] = [dw.view(c, -1)] + ([dz.sum(2)] if layer.bias is not None else [])
                if i:  # the first layer's input gradient is never needed
                    w = views[i][0]
                    dcols = torch.bmm(w.transpose(1, 2), dz, out=arena(c, k, dz.shape[2]))
                    d = self._col2im(arena, layer, dcols, c, b)
        grads = torch.cat(parts, 1, out=out) if out is not None else torch.cat(parts, 1)
        return loss, grads

    def _param_views(self, params: torch.Tensor) -> dict[int, Any]:
        """Per layer with parameters, (W [C, out, in], bias [C, out, 1] or None) viewing
        `params`, kept while the same tensor comes back (the trainer's, updated in place;
        the views hold its storage, so no other tensor can show the same address meanwhile)."""
        key = (params.data_ptr(), params.device, params.dtype, params.shape, params.stride())
        if self._views[0] != key:
            c = params.shape[0]
            views: dict[int, Any] = {}
            for i, layer in enumerate(self.layers):
                if isinstance(layer, _Conv | _Linear):
                    shape = (
                        (layer.c_out, layer.c_in * math.prod(layer.kernel))
                        if isinstance(layer, _Conv)
                        else layer.shape
                    )
                    w = params[:, slice(*layer.weight)].view(c, *shape)
                    bias = None if layer.bias is None else params[:, slice(*layer.bias)]
                    views[i] = (w, None if bias is None else bias.unsqueeze(2))
            self._views = (key, views)
        return self._views[1]

    @staticmethod
    def _im2col(arena: _Arena, layer: _Conv, a: torch.Tensor, c: int, b: int) -> torch.Tensor:
        """a [C, Cin, H, W, B] (any strides) -> cols [C, Cin*kh*kw, Ho*Wo*B]."""
        (kh, kw), (ph, pw), (h, w), (ho, wo) = (
            layer.kernel,
            layer.padding,
            layer.in_hw,
            layer.out_hw,
        )
        if ph or pw:
            padded = arena(c, layer.c_in, h + 2 * ph, w + 2 * pw, b, zeros=True)
            padded[:, :, ph : ph + h, pw : pw + w].copy_(a)
            a = padded
        sc, si, sh, sw, sb = a.stride()
        windows = a.as_strided(
            (c, layer.c_in, kh, kw, ho, wo, b), (sc, si, sh, sw, sh, sw, sb), a.storage_offset()
        )
        cols = arena(c, layer.c_in * kh * kw, ho * wo * b)
        cols.view(c, layer.c_in, kh, kw, ho, wo, b).copy_(windows)
        return cols

    @staticmethod
    def _col2im(arena: _Arena, layer: _Conv, dcols: torch.Tensor, c: int, b: int) -> torch.Tensor:
        """dcols [C, Cin*kh*kw, Ho*Wo*B] -> the input's gradient [C, Cin, H, W, B]: each kernel
        offset's columns add into the window they were copied from."""
        (kh, kw), (ph, pw), (h, w), (ho, wo) = (
            layer.kernel,
            layer.padding,
            layer.in_hw,
            layer.out_hw,
        )
        dpad = arena(c, layer.c_in, h + 2 * ph, w + 2 * pw, b)
        key = id(dpad)  # the same buffers every call of this arena: their views too
        if key not in arena.memo:
            dv = dcols.view(c, layer.c_in, kh, kw, ho, wo, b)
            arena.memo[key] = (
                [dpad[:, :, i : i + ho, j : j + wo] for i in range(kh) for j in range(kw)],
                [dv[:, :, i, j] for i in range(kh) for j in range(kw)],
            )
        windows, offsets = arena.memo[key]
        dpad.zero_()
        torch._foreach_add_(windows, offsets)  # one call; applied in order, so overlaps add
        if ph or pw:
            d = arena(c, layer.c_in, h, w, b)
            return d.copy_(dpad[:, :, ph : ph + h, pw : pw + w])
        return dpad
