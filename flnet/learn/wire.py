"""Bits on the wire: counted from what a message really holds."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch


class ModelMessage(NamedTuple):
    """A full model, as FedAvg sends it both ways."""

    params: torch.Tensor  # [P]


def bits(message: Any) -> int:
    """Bits of one message: a tensor, or a (named) tuple of tensors; fp32 is 32 bits a value."""
    if isinstance(message, torch.Tensor):
        return message.numel() * message.element_size() * 8
    return sum(bits(part) for part in message)


class Wire(NamedTuple):
    """How a run charges its messages. A model-shaped tensor (last dimension P, the trained
    model's parameter count: a model, a delta, a control variate, rows of them) is charged as
    `charged_params` values of its own width, as if the reference model's parameters were sent
    (``model.costs_as``); any other tensor (a scalar loss) costs its own bits. Without a
    reference `charged_params` is P and this is `bits`."""

    num_params: int  # P of the model trained
    charged_params: int  # what each of its P-vectors is charged as

    def bits(self, message: Any) -> int:
        if isinstance(message, torch.Tensor):
            if message.dim() and message.shape[-1] == self.num_params:
                rows = message.numel() // self.num_params
                return rows * self.charged_params * message.element_size() * 8
            return bits(message)
        return sum(self.bits(part) for part in message)
