"""Short batches in the hand-derived engines: a minibatch with empty slots (PAD labels).

An epoch's last batch holds n_k mod B samples (`flnet.learn.data.epoch_batches`); its other
slots repeat a row and carry the label PAD. The readable path, `cohort.cross_entropy` by
autograd, takes the loss of such a batch as the mean over its real samples: each real slot
weighs 1 / n_c, an empty one 0. `cross_entropy_head` is that weighting for an engine's
log-softmax: the same loss and the logits' gradient, with the empty slots' gradient exactly 0,
so the rest of the backward pass (weight gradients summed over the batch) needs no mask. The
engines (`dense.DenseStack.padded`, `conv.ConvStack.padded`) must then equal autograd within
tests/tolerance.py, short batches included; tests/test_kernels_padded.py checks it.
"""

from __future__ import annotations

import torch

PAD = -100  # label of a minibatch slot with no sample (F.cross_entropy's ignore_index)


def cross_entropy_head(logp: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over each client's real slots ``[C]``, from the log-softmax `logp`
    ``[C, K, B]`` of the logits and labels `y` ``[C, B]`` (PAD in empty slots); `logp` becomes
    the logits' gradient in place: ``(softmax - onehot) / n_c`` in real slots, 0 in empty ones
    (n_c the client's real slots, at least one). Four small kernels more than the full
    batch's head (the weights 1 / n_c from the labels), and no device sync."""
    real = y != PAD  # [C, B]
    weight = torch.div(real, real.sum(1, keepdim=True)).to(logp.dtype).unsqueeze(1)  # [C, 1, B]
    label = y.clamp_min(0).unsqueeze(1)  # an empty slot reads class 0, with weight 0
    loss = torch.bmm(logp.gather(1, label), weight.transpose(1, 2)).view(-1).neg_()
    logp.exp_().scatter_(1, label, -1.0, reduce="add").mul_(weight)
    return loss
