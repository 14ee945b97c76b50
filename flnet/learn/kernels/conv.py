"""A hand-derived engine for small CNNs: the cohort's losses and gradients without autograd.

`ConvStack` is to convolutional ``nn.Sequential`` models what `dense.DenseStack` is to MLPs:
the mean cross-entropy ``[C]`` and its gradient ``[C, P]`` for every client of a cohort, written
out without autograd or vmap. It takes stacks of Conv2d (stride 1, zero padding, groups 1,
with or without bias), ReLU, MaxPool2d (no padding or dilation), one Flatten and Linear layers.

Accelerates `cohort.autograd_value_and_grad(model)`, the readable path: autograd through
`Model.forward_stacked` (torch.func's vmap of the plain ``nn.Module``) and
`cohort.cross_entropy`. `ConvStack` must equal it within tests/tolerance.py's
`assert_tensors_close` (relative 1e-5, absolute 1e-6): in float64 for every paper CNN (their
float32 gradients sum thousands of products in another order, and a few entries near zero
miss the absolute bound), in float32 for the benchmark's CNN; tests/test_kernels_conv.py
checks each, max-pool ties included.

Layout: batch last. An image activation is ``[C, channels, H, W, B]`` and a dense one
``[C, features, B]``, so that every layer is one bmm over the cohort with no transposes, the
weights are used in torch's own order, and Flatten is a view:

- the input ``[C, B, Cin, H, W]`` is copied once to ``[C, Cin, H, W, B]``;
- the first convolution: im2col copies the (zero-padded) input into ``cols [C, Cin*kh*kw,
  Ho*Wo*B]`` through an `as_strided` view (runs of B contiguous floats), then ``out [C, Cout,
  Ho*Wo*B] = W [C, Cout, Cin*kh*kw] @ cols``, already the next layer's layout, and backward
  ``dW = dOut @ cols^T`` over runs of columns (`accumulate`); its input gradient is never
  needed and never computed. Where a max-pool whose windows tile its output follows it, the
  output positions go window-major and the pool is maxima of contiguous blocks
  (`_Plan._window_pool`; torch's pool and its backward with the zeroing cost more);
- later convolutions (`_Plan._conv_rows`): row-shifted columns, each (zero-padded) input row
  shifted by each kernel column, of which kernel row p's columns are one contiguous slice:
  ``out = sum_p W_p @ cols_p``, ``dW_p^T = cols_p @ dOut^T``, ``dcols_p += W_p^T @ dOut`` and
  col2im is kw adds of shifted rows in one `_foreach_add_`; kh times less copied than im2col,
  whose kh*kw col2im adds of a dcols that outgrew L2 cost more than these products' extra
  passes (their forward is kh products instead of one). The input gradient's products
  cover only the output rows that land inside the padding and col2im adds straight into
  the input's rows and columns (no padded buffer zeroed, then copied out of);
- later 5x5 convolutions of 16 input channels or more whose output width is a multiple of 4
  (C1's second: 32 -> 64 on 16x16) take 1D Winograd F(4, 5) along the width instead
  (`_Plan._conv_winograd`): each input row's 8-column tiles (4 apart) transformed, ``V =
  B^T d`` ``[C, 8, Cin, Hp, T*B]``, the weights ``U = G g`` ``[C, 8, kh, Cout, Cin]``, per
  kernel row p ``M_t += U_tp @ V_t`` (batched over the 8 points t, the row shift a column
  offset as above) and ``out = A^T M``: 8 products for a kernel row's 20 (4 outputs x 5
  taps), K = Cin. The gradients come from the same transforms (the trilinear form's
  derivatives): ``E = A dOut``, ``dW_p = G^T (E_t @ V_tp^T)``, ``d_in = B sum_p U_tp^T @
  E_t`` with the tiles' overlapping columns added. The bias joins the point 1's products
  (its column of A^T is all ones), so db is that point's E summed. Every product writes a
  contiguous buffer (MKL's batched GEMM; into a strided one torch loops over the batch:
  C1's weight gradient took 0.44 against 0.27 ms a product, profiled), hence E with zero
  rows around it. Points 0, +-1, +-2, +-1/2 and
  infinity (`toom_cook`, exact in fractions); float32 errors against float64 are of the
  order of autograd's own (C1's cohort: at most 1.2e-6 of a layer's largest gradient
  entry, autograd 1.5e-6; tests/test_kernels_conv.py's float32 winograd_cnn within a
  fifth of its bound, as paper_cnn's 10 channels would be);
- a bias is a row of ones under the columns and a column beside W (copied there each call):
  the forward product adds it and the weight gradient's product gives db. The columns' rows
  lie a little more than a multiple of 4 KiB apart where they would be one (`_row_stride`);
- max-pool otherwise: ``[C*ch, H, W, B]`` is a channels-last ``[N, B, H, W]`` image to torch,
  whose pool then vectorises over B (the NCHW pool is several times slower here); its argmax
  indices (the first maximum of a window, as autograd's) route the backward pass, through
  torch's ``max_pool2d_with_indices_backward``;
- ReLU runs in place and its backward masks by its output. A ReLU right before a max-pool
  runs after it instead, on a quarter of the elements for a 2x2 pool: the same numbers and
  gradients, ties included. relu(max x) = max relu(x); where the window's max is positive,
  its first maximum is the same in x and in relu(x) and the mask passes; where it is not,
  relu(x) is all zeros there, autograd routes the window's gradient to its first element,
  whose ReLU mask is 0, and the swapped order masks the pooled zero: 0 both ways
  (tests/test_kernels_conv.py checks ties in both orders);
- Linear: ``[C, out, B] = W @ a`` (+ bias); its input gradient is ``d_in^T [C, B, in] =
  dOut^T @ W`` copied into ``[C, in, B]`` (MKL streams W's rows); the logits ``[C, K, B]``
  reduce their softmax over the middle dimension, as in `DenseStack`;
- the gradient pieces are copied into ``[C, P]`` in one `_foreach_copy_`.

Measured choices (one-off experiments against benchmarks/bench.py's workloads b and c; the
alternatives are not kept, so only the kept paths' rows can be printed again): a
``[C, ch, B, H, W]`` layout spent over a quarter of its time in NCHW max-pooling; true
channels-last ``[C, B, H, W, ch]`` made the pool fast but the GEMMs (weights reordered each
step) and the col2im adds (runs of ch floats) slower, hence batch last. For the whole cohort
in one call oneDNN's grouped convolution was slower than im2col.

One client a call (what `path: auto` then took on the CPU) once took torch's own kernel (oneDNN)
for its forward convolutions and the first layer's weight gradient, chosen on a 2-vCPU AMD
EPYC, where it was as fast as im2col on (b) and faster on (c). On a 2-vCPU Intel Xeon
(Sapphire Rapids) it was slower than im2col on (b) and no faster on (c): benchmarks/bench.py's
(b) and (c) rows "path auto" print the change when run at a commit before and after it. So
every cohort size takes the im2col path (one path, less code). What was measured of oneDNN
on the AMD EPYC (one-off timings), for the next attempt:

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
  (250 -> 256; MKL runs that product 5% faster): within noise there. On the Intel Xeon the
  ones row (forward bias and bias gradient), the rows' stride and the weight gradient's runs
  together made (b) faster, so they are kept (bench.py's (b) row "path auto" at commits
  d831f72 and cc4163a prints the change);
- two or five clients a call, torch's kernel per client (its outputs copied into the
  cohort's buffers) and everything else batched: 5% and 14% slower than one;
- oneDNN's grouped convolution for 2 or 5 clients: 1.5 to 5.6 times slower per client,
  except the second layer's weight gradient (the same);
- the pool as `torch.max(dim)` with indices over the four offsets of a window: ten times
  slower than torch's pool (``amax`` alone is fast, but finding the first maximum then takes more
  time than torch's pool backward).

Measured on C1's cohort (cnn_mcmahan, 2.16M parameters, 3x32x32, batch 10; 2-vCPU Intel
Xeon, thread CPU time of interleaved repeats, one-off, while other work loaded the machine;
every kept change gives the same numbers bit for bit). A step of one client took ~12 ms:
the second convolution about half (its GEMMs alone run near the matmul peak, ~140-150
GFLOP/s), fc1 (512 x 4096) a fifth (memory-bound: its 8 MiB of weights read twice and
written once a step), the first convolution an eighth (its K = 76 GEMMs at ~50 GFLOP/s in
the step, twice their speed alone). Kept:

- fc1's input gradient as dOut^T @ W instead of W^T @ dOut: 1.08 against 1.78 ms alone for
  two clients (a transposed d_in handed on changed the bias gradient's sums over B
  upstream, hence the copy back to ``[C, in, B]``);
- the window-major im2col through columns grouped by residue (`_Plan._split_im2col`): 0.35
  against 0.82 ms for two clients (runs of 160 floats against 10);
- the padding's rows skipped in the later convolutions' input gradient (above): 6 of 80
  row products and the zeroing and copying of a padded buffer;
- altogether 4% off a two-client step (27.7 against 28.9 ms, median of 40 interleaved),
  before `cohort.CPU_CONV_CALL_BYTES` made C1's calls one client each (8% less CPU).

- Winograd F(4, 5) for the second convolution (above): 2.62 against 3.37 CPU-s a cohort
  (one thread, median of 4 interleaved processes x 2 against the row-shifted path, load
  average 1.7-2.9), 22% less; its products at K = 32 ran ~80-90 GFLOP/s in the step (140
  alone), for 2.5 times fewer multiplications than the row-shifted path's K = 160. C1 end
  to end (bench.py --c1 --reps 1, load ~3): 31.2 s against pfl-research's 45.0 (1.44x),
  test accuracy 0.952 against pfl's 0.947 after round 10.

Rejected (no faster, so not kept): fc1's input gradient and SGD step fused block by block
of W's columns (~1 MiB, each block stepped while in L2): 4.2 against 5.2 ms alone with a
cold cache, but within noise in the step (12.0 against 12.3 ms for one client, 30.1 against
30.1 for two); the second convolution's weight gradient from dOut's transposed view instead
of the ``dz_t`` copy (26.3 against 26.0 ms); K padded from 76 to 80 or 96 for the first
convolution's GEMMs (0.94 and 1.14 against 0.84 ms alone); the bias row dropped from the
second convolution (K 160 against 161: within noise); oneDNN's convolution for the second
layer's forward (83 against ~75 GFLOP/s alone, a one-off reading under load, and its
layout would need copies). A client's first step now reads its starting parameters and
writes the stepped ones into the trainer's rows (`descend`'s `start`), the copy before it
gone: the same bits, 3.39 against 3.42 CPU-s a C1 cohort (2 threads, median of 3 interleaved
processes x 3, load average ~1.9: noise level).

Rejected for the Winograd path (C1's second convolution): F(8, 5) (12 points, adding +-4
and +-1/4; 12 products for 40) gave float32 gradients 4e-2 off float64's (of a layer's
largest entry), so no speed was measured; the products in groups of 1, 2 or 4 of the 8
points (a group's buffers within L2) rather than all 8 per call: 1 slower (2.9 against 2.7
CPU-s a cohort), 2 and 4 within noise of 8 (interleaved, load ~2.5); the threshold of 16
input channels kept paper_cnn (10) on the row-shifted path: bench.py's (b) with it on
Winograd, 0.99 against 1.05 CPU-s (medians of 3 x 3, load ~2.8), within noise.

Rejected too: the Linear weights' steps deferred over a client's steps (plain SGD:
``W_t = W_0 - lr * sum_s dOut_s a_s^T``, so the forward ``W_t a = W_0 a - lr * dOut_acc
(a_acc^T a)`` and the input gradient likewise, with [kB, B] products, W never written until
one K = steps * B GEMM after the last step, from the start into the trainer's rows): fc1's
traffic a client from ~5 x 32 to ~5 x 16 + 32 MB, but no faster. C1 cohort, CPU-s, median
of interleaved repeats in one process: 1.44 against 1.44 (20 clients, 1 thread, load 3.3),
1.32 against 1.29 ([kB, in] rows recorded, load 3.7), 3.37 against 3.42 and 3.41 against
3.38 (50 clients, 2 threads, load 4.5). Profiled (10 clients x 5 steps, 1 thread): fc1's
forward and input-gradient products took 1.66 and 1.76 ms deferred against 1.44 and 1.38
stepped (reading the start's W_0 rather than the W just written), and the final GEMM (210
MFLOP, compute-bound, ~124 GFLOP/s warm) 5.5 ms with its copy from the start, against
5 x 1.64 ms for the steps' own: a wash. This Xeon's 260 MiB L3 holds W, so fc1 runs at L3,
not DRAM, bandwidth and less traffic buys little.

The smaller pieces of a C1 step (one client, one thread, each piece alone and warm, min of
5-15 repeats of 200-300 calls, interleaved processes where two versions ran, load ~2.7).
Kept: a padding first layer's copy of the minibatch (any strides) straight into the inside
of its im2col source (`_split_im2col`'s buffer, the padding's zeros written once; or the
padded buffer), without the batch-last copy first (`_Plan.copy_input`), and for C1 without
the padded copy either: two 120 KB copies fewer a step, the minibatch to the first layer's
output 0.51-0.53 against 0.55-0.57 ms (a whole cohort: 3.27 against 3.26 CPU-s, median of 18
interleaved, within noise). Rejected: fc1's step as an in-place ``baddbmm_`` where it writes
into the weights it reads: ``baddbmm(out=)``'s copy of W onto itself is already skipped (the
profile's 250 ``copy_`` calls of ``[1, 512, 4096]`` are a client's first step, from `start`,
~2 ms each, and 200 no-ops of ~1 us; alone 459 against 457 us a step); the first pool's
backward with fewer kernels: as pairs (blocks 0-1 against 2-3, then within the pair; 6
kernels over twice the elements) 270 against 186 us, bool masks 465, the three comparisons
as one broadcast kernel 229; the second pool (``[C, 64, 16, 16, B]``, not window-major) as
the maxima and masks of its four strided offsets (runs of B = 10 floats): forward 123
against torch's 282 us but backward 341 against 76 (138 with its zeroing). Not tried, for
the next attempt: with the second convolution on Winograd's path, fc1's three products are a
third of a C1 cohort's kernel time (profiled: forward 1.0, input gradient 0.98, step 0.81 ms
a call), yet alone and warm they take 0.56-0.67, 0.51 and 0.45 ms, and a sum over W reads
its 8 MiB in 0.31 ms: the step deferred to the next forward and both taken block by block of
64 rows (1 MiB, the forward then reading W from L2) saves one read of W a step, and row
blocks give the same bits as the whole products here (checked for both, MKL on this Xeon),
but the trainer would have to flush a pending step before it reads the parameters.

Every intermediate lives in buffers reused across calls of the same cohort and batch size
(a `_Plan`, for the two most recent shapes), since allocating megabytes a step costs page
faults; the plan also makes every view of them once, and its per-layer steps only call
kernels (2-3% off a (b) step against making the views each call). Only float maths and ops
that exist on every device are used, so the engine runs on CUDA as on the CPU (untested
there: no GPU was lent). Short batches (PAD labels) take `ConvStack.padded`, whose loss head
is `padded.cross_entropy_head`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from flnet.learn.kernels.padded import cross_entropy_head
from flnet.learn.models import Model


def batched_affine(out: torch.Tensor, left: torch.Tensor, right: torch.Tensor, bias: Any) -> None:
    """``out = left @ right (+ bias)`` batched over the cohort, into `out` (one kernel either
    way): a layer's forward pass in `ConvStack` and `dense.DenseStack`."""
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


Step = Callable[[torch.Tensor, Any], torch.Tensor]  # (activation or gradient, layer's views)


COLUMNS_PER_PRODUCT = 2048  # the most columns a weight gradient's product reduces over


def accumulate(out: torch.Tensor, products: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """``out = sum of left @ right`` over `products`, batched over the cohort. A weight
    gradient reduces over runs of at most `COLUMNS_PER_PRODUCT` columns: MKL's product over
    one long run (a small CNN's first layer) ran slower, its operands outgrowing L2."""
    for j, (left, right) in enumerate(products):
        if j:
            out.baddbmm_(left, right)
        else:
            torch.bmm(left, right, out=out)


def _row_stride(n: int) -> int:
    """The floats between rows of a ``[C, K, n]`` im2col matrix: n, and 16 more where n is
    a multiple of 256 (1 KiB). Rows a multiple of 4 KiB apart share cache sets, and MKL's
    products over them (the weight gradient's transposed columns above all) ran slower."""
    return n + 16 if n % 256 == 0 else n


def _padder(
    layer: _Conv, c: int, b: int, new: Callable[..., torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """What a convolution reads of its input ``a [C, Cin, H, W, B]``: `a` itself, or with
    padding a copy of it inside a buffer whose zero border is written once."""
    (ph, pw), (h, w) = layer.padding, layer.in_hw
    if not (ph or pw):
        return lambda a: a
    padded = new(c, layer.c_in, h + 2 * ph, w + 2 * pw, b, zeros=True)
    inner = padded[:, :, ph : ph + h, pw : pw + w]

    def pad(a: torch.Tensor) -> torch.Tensor:
        inner.copy_(a)
        return padded

    return pad


def _tiles(layer: Layer) -> tuple[int, int] | None:
    """A max-pool's window where its windows tile its input (stride = kernel, dividing H and
    W, more than one element), else None."""
    if not isinstance(layer, _Pool) or layer.stride != layer.kernel or layer.kernel == (1, 1):
        return None
    if any(size % k for size, k in zip(layer.in_hw, layer.kernel)):
        return None
    return layer.kernel


WINOGRAD_POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))  # and infinity
WINOGRAD_OUTPUTS = 4  # output columns a tile: F(4, 5), 8 points
WINOGRAD_MIN_CHANNELS = 16  # input channels below which the row-shifted path is kept


def _winograd_tiles(layer: _Conv) -> int:
    """Width tiles of F(4, kw) for a later convolution that takes Winograd's path, else 0:
    a 5-wide kernel, an output width that is a multiple of 4, enough input channels."""
    wo, kw = layer.out_hw[1], layer.kernel[1]
    if kw != 5 or wo % WINOGRAD_OUTPUTS or layer.c_in < WINOGRAD_MIN_CHANNELS:
        return 0
    return wo // WINOGRAD_OUTPUTS


def toom_cook(m: int, r: int) -> tuple[list[list[float]], ...]:
    """Winograd's F(m, r) as (A^T [m, n], G [n, r], B^T [n, n]), n = m + r - 1 points
    (`WINOGRAD_POINTS`' first n - 1 and infinity): the correlation ``y_j = sum_q g_q d_(j+q)``
    of n inputs is ``A^T [(G g) * (B^T d)]``. From Toom-Cook's product of polynomials
    ``c = V^-1 [(V_r g) * (V_m h)]`` (V_k: the points' powers below k, infinity's row the
    leading coefficient) and ``sum_j h_j y_j = sum_n d_n c_n``, so A^T = V_m^T, G = V_r,
    B^T = V^-T; each row of B^T is scaled to a largest entry of 1 and G's row by the same
    (float32 rounding a little smaller). Exact in fractions, rounded once."""
    n = m + r - 1
    points = [Fraction(x) for x in WINOGRAD_POINTS[: n - 1]]

    def powers(k: int) -> list[list[Fraction]]:
        infinity = [Fraction(j == k - 1) for j in range(k)]
        return [[x**j for j in range(k)] for x in points] + [infinity]

    # V^-1 by Gauss-Jordan elimination on [V | I]
    rows = [row + [Fraction(i == j) for j in range(n)] for i, row in enumerate(powers(n))]
    for col in range(n):
        pivot = next(i for i in range(col, n) if rows[i][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        rows[col] = [x / rows[col][col] for x in rows[col]]
        for i in range(n):
            if i != col and rows[i][col] != 0:
                rows[i] = [x - rows[i][col] * y for x, y in zip(rows[i], rows[col])]
    inverse = [row[n:] for row in rows]
    b_t = [[inverse[j][i] for j in range(n)] for i in range(n)]  # V^-T
    g = powers(r)
    for i in range(n):
        scale = max(abs(x) for x in b_t[i])
        b_t[i] = [x / scale for x in b_t[i]]
        g[i] = [x * scale for x in g[i]]
    a_t = [list(col) for col in zip(*powers(m))]
    return tuple([[float(x) for x in row] for row in matrix] for matrix in (a_t, g, b_t))


class _Views(NamedTuple):
    """A layer's parameters viewing the flat ``[C, P]`` vector, in the shapes its kernels
    take them."""

    w: torch.Tensor  # [C, out, in] (a convolution's in: Cin*kh*kw)
    bias: torch.Tensor | None  # [C, out, 1]

    def beside(self, weights: torch.Tensor) -> list[torch.Tensor]:
        """`weights` (W in some order) and the bias if any: what a convolution copies into
        its weights-and-bias-column buffer each call."""
        return [weights] if self.bias is None else [weights, self.bias]


class _Plan:
    """Everything the calls for one cohort shape reuse: buffers, every view of them, and per
    layer a forward and a backward step that take the activation (or its gradient) and the
    layer's parameter views and only call kernels. A small CNN's step runs some 60 kernels,
    so the Python around each counts (a (b) step with every view made once, written out by
    hand, ran 7% faster than one making them each call; this general form takes 2-3%)."""

    def __init__(self, layers: list[Layer], c: int, b: int, like: torch.Tensor) -> None:
        dtype, device = like.dtype, like.device

        def new(*shape: int, dtype: torch.dtype = dtype, zeros: bool = False) -> torch.Tensor:
            return (torch.zeros if zeros else torch.empty)(shape, dtype=dtype, device=device)

        first = layers[0]
        assert isinstance(first, _Conv)  # conv_layers starts every stack with one
        self.input = new(c, first.c_in, *first.in_hw, b)  # [C, Cin, H, W, B]
        # the minibatch is copied into `input` (batch last, so that im2col reads runs of B
        # floats) unless the first layer pads: its copy into the padding's inside reads it
        self.copy_input = first.padding == (0, 0)
        self.saved: list[Any] = [None] * len(layers)  # what layer i's backward needs
        self.grads: list[torch.Tensor] = []  # gradient pieces, in the flat vector's order
        self.unstepped: list[int] = []  # the pieces of grads `descend` adds (convolutions')
        self.spans: list[Span] = []  # what each fills of the flat vector
        self._slices: tuple[tuple, list[torch.Tensor]] = ((), [])  # the last out's
        self.forward: list[tuple[int, Step]] = []
        self.backward: list[tuple[int, Step]] = []  # last layer first
        # `ConvStack.descend`: the Linear layers' backward steps that take the SGD step at
        # `lr` themselves
        self.descending: dict[int, Step] = {}
        self.lr = 0.0
        self.into: dict[int, _Views] = {}  # where they write the stepped weights, if elsewhere
        # the first layer's output in window-major order where a tiling max-pool follows it
        tiles = _tiles(layers[1]) if len(layers) > 1 else None
        for i, layer in enumerate(layers):
            if isinstance(layer, _Conv) and i == 0:
                steps = self._conv(layer, c, b, new, tiles)
            elif isinstance(layer, _Conv) and _winograd_tiles(layer):
                steps = self._conv_winograd(layer, c, b, new)
            elif isinstance(layer, _Conv):
                steps = self._conv_rows(layer, c, b, new)
            elif isinstance(layer, _Pool) and i == 1 and tiles:
                steps = self._window_pool(i, layer, c, b, new)
            elif isinstance(layer, _Pool):
                steps = self._pool(i, layer, c, b, new)
            elif isinstance(layer, _ReLU):
                steps = self._relu(i)
            elif isinstance(layer, _Flatten):
                steps = self._flatten(layer, c, b)
            else:
                steps = self._linear(i, layer, c, b, new)
            self.forward.append((i, steps[0]))
            self.backward.insert(0, (i, steps[1]))
        self.descent = [(i, self.descending.get(i, step)) for i, step in self.backward]
        last = layers[-1]
        assert isinstance(last, _Linear)  # conv_layers ends every stack with one
        self.logp = new(c, last.shape[0], b)  # [C, K, B]
        self.minus = torch.full((c, 1, b), -1.0 / b, dtype=dtype, device=device)

    def _slot(self, layer: _Conv | _Linear, dw: torch.Tensor, db: torch.Tensor | None) -> None:
        """A layer's gradient pieces in `grads`, and the spans they fill in `spans`."""
        if isinstance(layer, _Conv):
            self.unstepped.extend(range(len(self.grads), len(self.grads) + 1 + (db is not None)))
        self.grads.append(dw)
        self.spans.append(layer.weight)
        if layer.bias is not None:
            assert db is not None  # a layer with a bias has its gradient
            self.grads.append(db)
            self.spans.append(layer.bias)

    def slices(self, out: torch.Tensor) -> list[torch.Tensor]:
        """Views of the gradient `out` [C, P] in the shapes of `grads`, made once per tensor
        (the trainer's is the same each step)."""
        key = (out.data_ptr(), out.device, out.dtype, out.shape, out.stride())
        if self._slices[0] != key:
            views = [out[:, slice(*span)].view(g.shape) for span, g in zip(self.spans, self.grads)]
            self._slices = (key, views)
        return self._slices[1]

    def _conv(
        self,
        layer: _Conv,
        c: int,
        b: int,
        new: Callable[..., torch.Tensor],
        tiles: tuple[int, int] | None,
    ) -> tuple[Step, Step]:
        """The first layer, through im2col; its input gradient is never needed. With `tiles`
        (the window of a max-pool that tiles the output), the output positions, and so the
        columns, go in window-major order: (row, column) in the window, then the window's
        (row, column), then the sample."""
        (kh, kw), (ho, wo) = layer.kernel, layer.out_hw
        k, n = layer.c_in * kh * kw, ho * wo * b
        # the output positions' dimensions: sizes, and steps in rows or columns of the input
        positions: tuple[int, ...] = (ho, wo)
        steps: tuple[int, ...] = (1, 1)
        if tiles is not None:
            (th, tw), positions = tiles, (*tiles, ho // tiles[0], wo // tiles[1])
            steps = (1, 1, th, tw)
        window = (c, layer.c_in, kh, kw, *positions, b)
        # [C, Cin*kh*kw (+ 1), Ho*Wo*B]: with a bias, a row of ones under the columns and the
        # bias beside the weights make the forward product add the bias and the weight
        # gradient's product give the bias gradient too (no bias pass, no sum)
        biased = layer.bias is not None
        cols_all = new(c, k + biased, _row_stride(n))[:, :, :n]
        cols_all[:, k:].fill_(1)
        cols_7 = cols_all[:, :k].view(window)
        w_all = new(c, layer.c_out, k + biased)
        w_parts = [w_all[:, :, :k], w_all[:, :, k:]][: 1 + biased]
        im2col: Callable[[torch.Tensor], None]
        if tiles is not None and (layer.in_hw[1] + 2 * layer.padding[1]) % tiles[1] == 0:
            im2col = self._split_im2col(cols_7, layer, c, b, new, tiles)
        else:
            pad = _padder(layer, c, b, new)

            def strided_im2col(a: torch.Tensor) -> None:
                """a [C, Cin, H, W, B] (any strides) -> cols: the windows copied, runs of B."""
                a = pad(a)
                sc, si, sh, sw, sb = a.stride()
                at = [step * (sh, sw)[j % 2] for j, step in enumerate(steps)]
                strides = (sc, si, sh, sw, *at, sb)
                cols_7.copy_(a.as_strided(window, strides, a.storage_offset()))

            im2col = strided_im2col

        z = new(c, layer.c_out, n)
        z_5 = (
            z.view(c, layer.c_out, ho, wo, b)
            if tiles is None
            else z.view(c, layer.c_out, tiles[0] * tiles[1], -1)  # [C, Cout, window, rest]
        )

        def forward(a: torch.Tensor, views: _Views) -> torch.Tensor:
            im2col(a)
            torch._foreach_copy_(w_parts, views.beside(views.w))
            torch.bmm(w_all, cols_all, out=z)
            return z_5

        dw_all = new(c, layer.c_out, k + biased)
        self._slot(layer, dw_all[:, :, :k], dw_all[:, :, k] if biased else None)
        cols_runs = [run.transpose(1, 2) for run in cols_all.split(COLUMNS_PER_PRODUCT, 2)]

        def backward(d: torch.Tensor, views: _Views) -> torch.Tensor:
            # dW (and db) from the columns the forward pass built
            dz_runs = d.reshape(c, layer.c_out, n).split(COLUMNS_PER_PRODUCT, 2)
            accumulate(dw_all, zip(dz_runs, cols_runs))
            return d

        return forward, backward

    @staticmethod
    def _split_im2col(
        cols_7: torch.Tensor,
        layer: _Conv,
        c: int,
        b: int,
        new: Callable[..., torch.Tensor],
        tiles: tuple[int, int],
    ) -> Callable[[torch.Tensor], None]:
        """Window-major im2col in long runs: window-major columns read the input at every
        tw-th column, so copied straight from it they are runs of B floats. The (padded)
        input is first copied once into ``split [C, Cin, Hp, tw, Wp / tw, B]``, its columns
        grouped by their residue mod tw; column tw*j + dj + kj of it is then the (dj + kj)
        mod tw group's column j + (dj + kj) // tw, so for each kernel column kj and window
        column dj the columns are one strided view of `split` in runs of Wo / tw * B floats
        (C1's first layer: 160 against 10; that copy 0.35 ms against 0.82 for two clients).
        Where the padding is a whole number of groups wide (C1's: 2), the input (any strides:
        the minibatch's own layout) is copied straight into the inside of `split`, whose
        zero border is written once, instead of into a padded copy first."""
        (kh, kw), (ho, wo), (th, tw) = layer.kernel, layer.out_hw, tiles
        (ph, pw), (h, w) = layer.padding, layer.in_hw
        hp, wp = h + 2 * ph, w + 2 * pw
        aligned = pw % tw == 0
        split = new(c, layer.c_in, hp, tw, wp // tw, b, zeros=aligned)
        grouped = split.permute(0, 1, 2, 4, 3, 5)  # [C, Cin, Hp, Wp / tw, tw, B]
        sc, si, sh, sr, sq, sb = split.stride()
        dims = (c, layer.c_in, kh, th, ho // th, wo // tw, b)  # (ki, di, i, j) of the window
        sources, targets = [], []
        for kj in range(kw):
            for dj in range(tw):
                residue, q0 = (dj + kj) % tw, (dj + kj) // tw
                at = split.storage_offset() + residue * sr + q0 * sq
                sources.append(split.as_strided(dims, (sc, si, sh, sh, th * sh, sq, sb), at))
                targets.append(cols_7[:, :, :, kj, :, dj])

        if aligned:  # the input's columns pw .. pw + w - 1: groups pw / tw on, whole
            inside = grouped[:, :, ph : ph + h, pw // tw : (pw + w) // tw]
            shape = (c, layer.c_in, h, w // tw, tw, b)

            def im2col(a: torch.Tensor) -> None:
                inside.copy_(a.view(shape))
                torch._foreach_copy_(targets, sources)

            return im2col
        pad = _padder(layer, c, b, new)

        def padded_im2col(a: torch.Tensor) -> None:
            grouped.copy_(pad(a).reshape(c, layer.c_in, hp, wp // tw, tw, b))
            torch._foreach_copy_(targets, sources)

        return padded_im2col

    def _conv_rows(
        self, layer: _Conv, c: int, b: int, new: Callable[..., torch.Tensor]
    ) -> tuple[Step, Step]:
        """A layer past the first, through row-shifted columns: ``shifted [C, Cin*kw (+ 1),
        Hp*Wo*B]`` holds each (zero-padded) input row shifted by each kernel column (runs of
        Wo*B floats), and kernel row p's columns are the contiguous slice of it that starts
        p input rows in, ``[C, Cin*kw, Ho*Wo*B]``; so ``out = sum_p W_p @ shifted_p``, ``dW_p^T
        = shifted_p @ dOut^T``, ``dshifted_p += W_p^T @ dOut`` and col2im is kw adds of whole
        shifted rows. kh times less copied than im2col and kw adds instead of kh*kw; the
        weights are reordered by kernel row each call (``[C, kh, Cout, Cin*kw]``). The bias:
        the ones row, against kernel row 0's bias column (the other rows' stay 0)."""
        (kh, kw), (ph, pw), (h, w), (ho, wo) = (
            layer.kernel,
            layer.padding,
            layer.in_hw,
            layer.out_hw,
        )
        c_in, c_out, hp = layer.c_in, layer.c_out, h + 2 * ph
        k, n, length = c_in * kw, ho * wo * b, hp * wo * b
        biased = layer.bias is not None
        shifted_all = new(c, k + biased, _row_stride(length))[:, :, :length]
        shifted_all[:, k:].fill_(1)
        shifted = shifted_all[:, :k].view(c, c_in, kw, hp, wo, b)
        row = wo * b  # floats from one input row to the next in `shifted`
        cols = [shifted_all[:, :, p * row : p * row + n] for p in range(kh)]  # [C, k (+1), n]
        pad = _padder(layer, c, b, new)
        w_rows = new(c, kh, c_out, k + biased, zeros=True)
        w_parts = [w_rows[:, :, :, :k].view(c, kh, c_out, c_in, kw)]
        if biased:
            w_parts.append(w_rows[:, 0, :, k:])
        z = new(c, c_out, n)
        z_5 = z.view(c, c_out, ho, wo, b)

        def forward(a: torch.Tensor, views: _Views) -> torch.Tensor:
            a = pad(a)
            sc, si, sh, sw, sb = a.stride()
            window = a.as_strided(shifted.shape, (sc, si, sw, sh, sw, sb), a.storage_offset())
            shifted.copy_(window)
            weights = views.w.view(c, c_out, c_in, kh, kw).permute(0, 3, 1, 2, 4)
            torch._foreach_copy_(w_parts, views.beside(weights))
            accumulate(z, ((w_rows[:, p], cols[p]) for p in range(kh)))
            return z_5

        dz_t = new(c, n, c_out)
        dw_rows = new(c, kh, k + biased, c_out)  # [C, p, (cin, q) (+ 1), cout]
        dw = dw_rows[:, :, :k].view(c, kh, c_in, kw, c_out).permute(0, 4, 2, 1, 3)
        self._slot(layer, dw, dw_rows[:, 0, k] if biased else None)
        dz_runs = dz_t.split(COLUMNS_PER_PRODUCT, 1)
        col_runs = [col.split(COLUMNS_PER_PRODUCT, 2) for col in cols]
        d_shifted = new(c, k, _row_stride(length))[:, :, :length]
        w_t = [w_rows[:, p, :, :k].transpose(1, 2) for p in range(kh)]
        # kernel row p's input gradient, only its output rows i that land on input rows
        # p + i inside the padding (the others' products are never made): column spans of
        # dOut and of d_shifted; kernel row 0 writes its rows (a product, no accumulation)
        # and the input rows below them are zeroed for the rest to add into
        spans = [(max(0, ph - p) * row, min(ho, ph + h - p) * row) for p in range(kh)]
        products = [(p, first, end, p * row) for p, (first, end) in enumerate(spans) if first < end]
        written = min(ho, ph + h) if spans[0][0] < spans[0][1] else ph  # input rows below
        unwritten = d_shifted[:, :, written * row : (ph + h) * row]  # (padding's: never read)
        d_in = new(c, c_in, h, w, b)
        # col2im into the input's rows and columns only: kernel column q's shifted rows add,
        # in q order, where they were copied from (columns j + q - pw of the input)
        offsets = d_shifted.view(c, c_in, kw, hp, wo, b)[:, :, :, ph : ph + h]
        col2im = [
            (d_in[..., j0 + q - pw : j1 + q - pw, :], offsets[:, :, q, :, j0:j1])
            for q in range(kw)
            for j0, j1 in [(max(0, pw - q), min(wo, w + pw - q))]
            if j0 < j1
        ]
        windows, sources = [list(side) for side in zip(*col2im)]

        def backward(d: torch.Tensor, views: _Views) -> torch.Tensor:
            dz = d.reshape(c, c_out, n)
            dz_t.copy_(dz.transpose(1, 2))
            for p in range(kh):  # dW_p^T (and db) from the shifted rows the forward pass built
                accumulate(dw_rows[:, p], zip(col_runs[p], dz_runs))
            unwritten.zero_()
            for p, first, end, at in products:
                target = d_shifted[:, :, at + first : at + end]
                if p:
                    target.baddbmm_(w_t[p], dz[:, :, first:end])
                else:
                    torch.bmm(w_t[p], dz[:, :, first:end], out=target)
            d_in.zero_()
            torch._foreach_add_(windows, sources)  # one call; applied in order, so overlaps add
            return d_in

        return forward, backward

    def _conv_winograd(
        self, layer: _Conv, c: int, b: int, new: Callable[..., torch.Tensor]
    ) -> tuple[Step, Step]:
        """A layer past the first through 1D Winograd F(m, kw) along the width (m =
        `WINOGRAD_OUTPUTS`, n = m + kw - 1 points) inside row shifts along the height: each
        input row's tiles of n columns are transformed, ``V = B^T d`` (``[C, n, Cin, Hp,
        T*B]``: per point, channels by rows by tiles), the weights ``U = G g`` (``[C, n, kh,
        Cout, Cin]``), and per kernel row p ``M_t += U_tp @ V_t`` over the rows p on, then
        ``out = A^T M``: a kernel row's kw taps take n products for m outputs (C1: 8 for
        20). From the trilinear form ``sum dOut * out``, the gradients reuse them: ``E = A
        dOut``, ``dW_p = G^T (E_t @ V_tp^T)`` and ``d_in = B (sum_p U_tp^T @ E_t)``, the
        tiles' overlapping columns added (col2im of n-column tiles). Every product writes a
        contiguous buffer (MKL's batched GEMM; a strided one loops over the batch)."""
        (kh, kw), (ph, pw), (h, w), (ho, wo) = (
            layer.kernel,
            layer.padding,
            layer.in_hw,
            layer.out_hw,
        )
        c_in, c_out, hp = layer.c_in, layer.c_out, h + 2 * ph
        m, tiles = WINOGRAD_OUTPUTS, _winograd_tiles(layer)
        points = m + kw - 1
        a_t, g, b_t = (
            torch.tensor(matrix, dtype=self.input.dtype, device=self.input.device)
            for matrix in toom_cook(m, kw)
        )
        # the transforms as products batched over the clients (over kernel rows too for G^T)
        to_v, to_u, to_out = (matrix.expand(c, *matrix.shape) for matrix in (b_t, g, a_t))
        to_e, to_d = (matrix.T.expand(c, *matrix.T.shape) for matrix in (a_t, b_t))
        to_dw = g.T.expand(kh * c, *g.T.shape)
        row, n = tiles * b, ho * tiles * b  # floats from one row to the next, a point's outputs

        # the input's tiles: d [C, n, Cin, Hp, T, B], point s of tile k is padded column
        # m*k + s, input column m*k + s - pw; the padding's entries are written (0) once
        d = new(c, points, c_in, hp, tiles, b, zeros=True)
        gathers = []  # (point s, its tiles inside the input, the input column of the first)
        for s in range(points):
            k0 = max(0, -((s - pw) // m))
            k1 = min(tiles, (w - 1 - s + pw) // m + 1)
            if k0 < k1:
                gathers.append((s, k0, k1, m * k0 + s - pw))
        d_targets = [d[:, s, :, ph : ph + h, k0:k1] for s, k0, k1, _ in gathers]
        v = new(c, points, c_in, hp, row)
        v_rows = [v[:, :, :, p : p + ho].flatten(0, 1).flatten(2) for p in range(kh)]
        w_q = new(c, kw, kh, c_out, c_in)  # the weights by kernel column
        u = new(c, points, kh, c_out, c_in)
        u_rows = [u[:, :, p].flatten(0, 1) for p in range(kh)]  # [C*n, Cout, Cin]
        # the bias: added to the point 1's products, whose column of A^T is all ones
        biased = layer.bias is not None
        bias_at = new(c, points, c_out, 1, zeros=True)
        bias_1 = bias_at[:, WINOGRAD_POINTS.index(1)]
        bias_3 = bias_at.flatten(0, 1)
        prod = new(c, points, c_out, n)
        prod_3 = prod.flatten(0, 1)
        y = new(c, m, c_out, ho, tiles, b)
        y_in_place = y.permute(0, 2, 3, 4, 1, 5)  # [C, Cout, Ho, T, m, B]
        z = new(c, c_out, ho, wo, b)
        z_6 = z.view(c, c_out, ho, tiles, m, b)

        def forward(a: torch.Tensor, views: _Views) -> torch.Tensor:
            sc, si, sh, sw, sb = a.stride()
            sources = [
                a.as_strided(
                    (c, c_in, h, k1 - k0, b), (sc, si, sh, m * sw, sb), a.storage_offset() + j * sw
                )
                for _, k0, k1, j in gathers
            ]
            torch._foreach_copy_(d_targets, sources)
            torch.bmm(to_v, d.view(c, points, -1), out=v.view(c, points, -1))
            w_q.copy_(views.w.view(c, c_out, c_in, kh, kw).permute(0, 4, 3, 1, 2))
            torch.bmm(to_u, w_q.view(c, kw, -1), out=u.view(c, points, -1))
            if biased:
                assert views.bias is not None  # a layer with a bias has its view
                bias_1.copy_(views.bias)
                torch.baddbmm(bias_3, u_rows[0], v_rows[0], out=prod_3)
            else:
                torch.bmm(u_rows[0], v_rows[0], out=prod_3)
            for p in range(1, kh):
                prod_3.baddbmm_(u_rows[p], v_rows[p])
            torch.bmm(to_out, prod.view(c, points, -1), out=y.view(c, m, -1))
            z_6.copy_(y_in_place)
            return z

        # dOut and E = A dOut with zero rows around (written once), so that every kernel
        # row's input-gradient product covers all the input's rows (its output contiguous)
        below, above = max(0, kh - 1 - ph), max(0, h + ph - ho)
        rows_e = below + ho + above
        dy = new(c, m, c_out, rows_e, tiles, b, zeros=True)
        dy_in_place = dy[:, :, :, below : below + ho].permute(0, 2, 3, 4, 1, 5)
        e = new(c, points, c_out, rows_e, row)
        e_rows = e.flatten(0, 1)[:, :, below : below + ho].flatten(2)  # [C*n, Cout, Ho*T*B]
        e_1 = e[:, WINOGRAD_POINTS.index(1), :, below : below + ho]
        grads = new(kh, c, points, c_out, c_in)  # E_t @ V_tp^T, by kernel row
        grad_rows = [grads[p].flatten(0, 1) for p in range(kh)]
        dw_q = new(kh, c, kw, c_out, c_in)
        db = new(c, c_out) if biased else None
        self._slot(layer, dw_q.permute(1, 3, 4, 0, 2), db)
        v_t = [rows.transpose(1, 2) for rows in v_rows]
        # the input gradient's tiles, P_t = sum_p U_tp^T @ E_t over the input's rows (input
        # row i takes output row i + ph - p)
        d_tiles = new(c, points, c_in, h, row)
        d_tiles_3 = d_tiles.view(c * points, c_in, h * row)
        e_shifted = [
            e.flatten(0, 1)[:, :, below + ph - p : below + ph - p + h].flatten(2) for p in range(kh)
        ]
        u_t = [rows.transpose(1, 2) for rows in u_rows]
        columns = new(c, points, c_in, h, tiles, b)  # B P: each tile's columns
        d_in = new(c, c_in, h, w, b)
        sc, si, sh, sw, sb = d_in.stride()
        col2im = [
            (
                d_in.as_strided((c, c_in, h, k1 - k0, b), (sc, si, sh, m * sw, sb), j * sw),
                columns[:, s, :, :, k0:k1],
            )
            for s, k0, k1, j in gathers
        ]
        # where the points pw .. pw + m - 1 cover the input's columns once, they are copied
        # (no zeroing), the others added
        copied = [w == tiles * m and pw <= s < pw + m for s, *_ in gathers]
        if sum(copied) < m:
            copied = [False] * len(gathers)
        first_targets = [into for (into, _), first in zip(col2im, copied) if first]
        first_sources = [source for (_, source), first in zip(col2im, copied) if first]
        rest_targets = [into for (into, _), first in zip(col2im, copied) if not first]
        rest_sources = [source for (_, source), first in zip(col2im, copied) if not first]

        def backward(d_out: torch.Tensor, views: _Views) -> torch.Tensor:
            dy_in_place.copy_(d_out.reshape(c, c_out, ho, tiles, m, b))
            torch.bmm(to_e, dy.view(c, m, -1), out=e.view(c, points, -1))
            for p in range(kh):
                torch.bmm(e_rows, v_t[p], out=grad_rows[p])
            torch.bmm(to_dw, grads.view(kh * c, points, -1), out=dw_q.view(kh * c, kw, -1))
            if db is not None:  # the point 1's E: dOut summed over each tile's columns
                torch.sum(e_1, (2, 3), out=db)
            torch.bmm(u_t[0], e_shifted[0], out=d_tiles_3)
            for p in range(1, kh):
                d_tiles_3.baddbmm_(u_t[p], e_shifted[p])
            torch.bmm(to_d, d_tiles.view(c, points, -1), out=columns.view(c, points, -1))
            if first_targets:
                torch._foreach_copy_(first_targets, first_sources)
            else:
                d_in.zero_()
            if rest_targets:
                torch._foreach_add_(rest_targets, rest_sources)
            return d_in

        return forward, backward

    def _pool(
        self, i: int, layer: _Pool, c: int, b: int, new: Callable[..., torch.Tensor]
    ) -> tuple[Step, Step]:
        # [C*ch, H, W, B] is channels-last [N, B, H, W] to torch: B is the vector lane (into
        # reused buffers: fresh ones of this size cost page faults each step)
        n, in_hw, out_hw = c * layer.channels, layer.in_hw, layer.out_hw
        pooled = new(c, layer.channels, *out_hw, b)
        pooled_4 = pooled.view(n, *out_hw, b).permute(0, 3, 1, 2)
        idx = new(n, *out_hw, b, dtype=torch.int64).permute(0, 3, 1, 2)
        d_in = new(c, layer.channels, *in_hw, b)
        d_in_4 = d_in.view(n, *in_hw, b).permute(0, 3, 1, 2)
        args = (layer.kernel, layer.stride, (0, 0), (1, 1), False)

        def forward(a: torch.Tensor, views: Any) -> torch.Tensor:
            planes = a.reshape(n, *in_hw, b).permute(0, 3, 1, 2)
            torch.ops.aten.max_pool2d_with_indices.out(planes, *args, out=pooled_4, indices=idx)
            self.saved[i] = planes
            return pooled

        def backward(d: torch.Tensor, views: Any) -> torch.Tensor:
            # the argmax indices (the first maximum of a window, as autograd's) route it
            grad_out = d.reshape(n, *out_hw, b).permute(0, 3, 1, 2)
            torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
                grad_out, self.saved[i], *args, idx, grad_input=d_in_4
            )
            return d_in

        return forward, backward

    def _window_pool(
        self, i: int, layer: _Pool, c: int, b: int, new: Callable[..., torch.Tensor]
    ) -> tuple[Step, Step]:
        """The max-pool of a window-major convolution output ``[C, ch, window, oh*ow*B]``:
        each offset of the windows is a contiguous block, so the pool is elementwise maxima
        of blocks, and its backward routes each window's gradient to its first maximum (as
        autograd's) with masks, block by block. The `pooled` it compares with may since have
        been clamped in place by a ReLU after it; where it was, that ReLU's backward has
        zeroed the gradient, so the routing there changes nothing."""
        (th, tw), rest = layer.kernel, layer.out_hw[0] * layer.out_hw[1] * b
        pooled = new(c, layer.channels, *layer.out_hw, b)
        flat = pooled.view(c, layer.channels, rest)
        d_in = new(c, layer.channels, th * tw, rest)
        d_blocks = d_in.unbind(2)
        hit, left = new(c, layer.channels, rest), new(c, layer.channels, rest)

        def forward(a: torch.Tensor, views: Any) -> torch.Tensor:
            blocks = a.unbind(2)
            torch.maximum(blocks[0], blocks[1], out=flat)
            for block in blocks[2:]:
                torch.maximum(flat, block, out=flat)
            self.saved[i] = blocks
            return pooled

        def backward(d: torch.Tensor, views: Any) -> torch.Tensor:
            src = d.reshape(c, layer.channels, rest)  # the gradient not yet routed
            last = len(d_blocks) - 1
            for j, (block, d_block) in enumerate(zip(self.saved[i][:last], d_blocks)):
                torch.ge(block, flat, out=hit)  # where block j holds the maximum
                torch.mul(src, hit, out=d_block)
                src = torch.sub(src, d_block, out=d_blocks[last] if j == last - 1 else left)
            return d_in

        return forward, backward

    def _relu(self, i: int) -> tuple[Step, Step]:
        def forward(a: torch.Tensor, views: Any) -> torch.Tensor:
            self.saved[i] = a.clamp_min_(0)  # in place; its backward masks by its output
            return a

        def backward(d: torch.Tensor, views: Any) -> torch.Tensor:
            return torch.ops.aten.threshold_backward.grad_input(d, self.saved[i], 0, grad_input=d)

        return forward, backward

    @staticmethod
    def _flatten(layer: _Flatten, c: int, b: int) -> tuple[Step, Step]:
        shape = (c, layer.channels, *layer.hw, b)
        # torch's (channel, row, column) order
        return (lambda a, views: a.reshape(c, -1, b)), (lambda d, views: d.view(shape))

    def _linear(
        self, i: int, layer: _Linear, c: int, b: int, new: Callable[..., torch.Tensor]
    ) -> tuple[Step, Step]:
        z = new(c, layer.shape[0], b)  # [C, out, B]
        dw = new(c, *layer.shape)
        db = new(c, layer.shape[0]) if layer.bias is not None else None
        self._slot(layer, dw, db)
        # the input gradient as d_in^T [C, B, in] = dOut^T @ W, then transposed into d_in:
        # MKL streams W's rows (W^T @ dOut into d_in ran 40% slower on C1's fc1 with the same
        # numbers; a transposed d_in would change the bias gradient's sums over B upstream)
        d_in_t, d_in = new(c, b, layer.shape[1]), new(c, layer.shape[1], b)

        def forward(a: torch.Tensor, views: _Views) -> torch.Tensor:
            self.saved[i] = a.transpose(1, 2)
            batched_affine(z, views.w, a, views.bias)
            return z

        def backward(d: torch.Tensor, views: _Views) -> torch.Tensor:
            torch.bmm(d, self.saved[i], out=dw)
            if db is not None:
                torch.sum(d, 2, out=db)
            torch.bmm(d.transpose(1, 2), views.w, out=d_in_t)
            return d_in.copy_(d_in_t.transpose(1, 2))

        def descend(d: torch.Tensor, views: _Views) -> torch.Tensor:
            """`backward` with the plain SGD step taken in place: the input gradient from the
            weights before it, then ``W -= lr * dOut @ a^T`` as one GEMM into the parameters
            (no dW written, copied or read back) and ``b -= lr * sum(dOut)``."""
            torch.bmm(d.transpose(1, 2), views.w, out=d_in_t)
            d_in.copy_(d_in_t.transpose(1, 2))
            # into the parameters' own views, or from the start's into them (`descend`'s start)
            into = self.into.get(i, views)
            torch.baddbmm(views.w, d, self.saved[i], alpha=-self.lr, out=into.w)
            if db is not None:
                assert views.bias is not None and into.bias is not None  # it has its views
                torch.sum(d, 2, out=db)
                torch.add(views.bias.squeeze(2), db, alpha=-self.lr, out=into.bias.squeeze(2))
            return d_in

        self.descending[i] = descend
        return forward, backward


class ConvStack:
    """Mean cross-entropy and its gradient for a conv/pool/ReLU/Flatten/Linear stack, by hand
    (see the module docstring for the layout and the maths)."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers
        self._plans: dict[tuple, _Plan] = {}  # the two most recent cohort shapes'
        self._views: tuple[tuple, dict[int, _Views]] = ((), {})  # the last params' views
        self.pads = False  # labels may be PAD (`padded`)

    def padded(self) -> ConvStack:
        """This engine for minibatches with empty slots (PAD labels: an epoch's short last
        batch), the loss the mean over each client's real slots (`padded.cross_entropy_head`);
        it shares this one's plans (buffers)."""
        twin = copy.copy(self)
        twin.pads = True
        return twin

    def release(self) -> None:
        """Let go of the views of the last parameters (and of the last `descend`'s steps)
        kept for the next call: `cohort.Trainer` reuses a tensor of trained parameters once
        nothing holds its storage."""
        self._views = ((), {})
        for plan in self._plans.values():
            plan._slices = ((), [])

    def floats_per_sample(self) -> int:
        """Elements this engine keeps per sample (activations, columns, their gradients):
        `cohort.Trainer.clients_per_call` sizes `path: auto` cohorts by it."""
        total = 0
        for i, layer in enumerate(self.layers):
            if isinstance(layer, _Conv):
                (ho, wo), (h, w), (kh, kw) = layer.out_hw, layer.in_hw, layer.kernel
                hp, wp = h + 2 * layer.padding[0], w + 2 * layer.padding[1]
                tiles = _winograd_tiles(layer) if i else 0
                if tiles:  # Winograd's tiles of the input and of dOut, transformed
                    points, rows_e = WINOGRAD_OUTPUTS + kw - 1, ho + 2 * (kh - 1)
                    total += points * tiles * (2 * layer.c_in * (hp + h) + layer.c_out * ho)
                    total += (points + WINOGRAD_OUTPUTS) * tiles * layer.c_out * rows_e
                    total += 2 * layer.c_out * ho * wo
                elif i:  # row-shifted columns and their gradient, dOut^T
                    total += 2 * layer.c_in * kw * hp * wo + 3 * layer.c_out * ho * wo
                else:  # im2col columns
                    total += layer.c_in * kh * kw * ho * wo + 2 * layer.c_out * ho * wo
                total += 2 * layer.c_in * hp * wp
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
        plan, views, loss, d = self._forward(params, x, y)
        for i, backward in plan.backward:
            d = backward(d, views.get(i))
        grads = params.new_empty(params.shape) if out is None else out
        torch._foreach_copy_(plan.slices(grads), plan.grads)
        return loss, grads

    def descend(
        self,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        lr: float,
        start: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One plain SGD step on `params` [C, P] in place, ``w -= lr * grad``, returning the
        losses [C] (`cohort.Trainer` takes it for `optim.sgd` without momentum): each Linear
        weight's step fused into the GEMM of its gradient (its largest tensors, written and
        read once less), the convolutions' added from their gradient buffers. Equal to
        `__call__` and the step within float rounding. With `start` ([C, P], or [P]
        expanded), the step is taken from `start` and written into `params` (whose values are
        not read): a client's first step, without copying its starting parameters first; the
        same numbers bit for bit."""
        plan, views, loss, d = self._forward(params if start is None else start, x, y)
        plan.lr = lr
        if start is not None:
            plan.into = self._param_views(params)
        try:
            for i, backward in plan.descent:
                d = backward(d, views.get(i))
        finally:
            plan.into = {}
        steps = plan.slices(params)
        stepped = [steps[j] for j in plan.unstepped]
        grads = [plan.grads[j] for j in plan.unstepped]
        if start is None:
            torch._foreach_add_(stepped, grads, alpha=-lr)
        else:
            spans = [plan.spans[j] for j in plan.unstepped]
            for into, grad, span in zip(stepped, grads, spans):
                torch.add(start[:, slice(*span)].view(grad.shape), grad, alpha=-lr, out=into)
        return loss

    def _forward(
        self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[_Plan, dict[int, _Views], torch.Tensor, torch.Tensor]:
        """The plan of this shape, the parameters' views, the losses [C] and the logits'
        gradient [C, K, B]."""
        c, b = y.shape
        key = (c, b, params.dtype, params.device)
        # the two most recent shapes (a cohort's slices and its remainder), not one plan per
        # cohort size a run ever sees
        plan = self._plans.pop(key, None) or _Plan(self.layers, c, b, params)
        self._plans[key] = plan
        while len(self._plans) > 2:
            del self._plans[next(iter(self._plans))]
        views = self._param_views(params)

        # ---- forward, batch last
        # [C, Cin, H, W, B]: batch last, a view or one transposing copy (`_Plan.copy_input`)
        a = x.view(c, b, *x.shape[2:]).permute(0, 2, 3, 4, 1)
        if plan.copy_input:
            a = plan.input.copy_(a)
        for i, forward in plan.forward:
            a = forward(a, views.get(i))

        # ---- the loss and its gradient (log-softmax over the middle dimension, as DenseStack)
        logp = torch.ops.aten._log_softmax.out(a, 1, False, out=plan.logp)  # [C, K, B]
        if self.pads:  # empty slots' gradient 0
            loss, d = cross_entropy_head(logp, y), logp
        else:
            label = y.unsqueeze(1)  # [C, 1, B]
            loss = logp.gather(1, label).mean((1, 2)).neg_()  # [C]
            d = logp.exp_().div_(b).scatter_add_(1, label, plan.minus)  # [C, K, B]
        return plan, views, loss, d

    def _param_views(self, params: torch.Tensor) -> dict[int, _Views]:
        """Per layer with parameters, its `_Views` of `params`, kept while the same tensor
        comes back (the trainer's, updated in place; the views hold its storage, so no other
        tensor can show the same address meanwhile)."""
        key = (params.data_ptr(), params.device, params.dtype, params.shape, params.stride())
        if self._views[0] != key:
            c = params.shape[0]
            views: dict[int, _Views] = {}
            for i, layer in enumerate(self.layers):
                if isinstance(layer, _Conv | _Linear):
                    shape = (
                        (layer.c_out, layer.c_in * math.prod(layer.kernel))
                        if isinstance(layer, _Conv)
                        else layer.shape
                    )
                    w = params[:, slice(*layer.weight)].view(c, *shape)
                    bias = None if layer.bias is None else params[:, slice(*layer.bias)]
                    views[i] = _Views(w, None if bias is None else bias.unsqueeze(2))
            self._views = (key, views)
        return self._views[1]
