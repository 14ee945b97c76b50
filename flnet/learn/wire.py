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
