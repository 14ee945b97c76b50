"""Compression operators' settings for compressed gossip (C-DFL's `algorithm.compression`;
flnet.learn.compress applies them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from flnet.config import Strict


class IdentityCompression(Strict):
    kind: Literal["identity"] = "identity"


class TopKCompression(Strict):
    kind: Literal["top_k"]
    fraction: float = Field(
        gt=0, le=1, description="delta = k / d: the share of coordinates kept (largest |x|)"
    )


class RandKCompression(Strict):
    kind: Literal["rand_k"]
    fraction: float = Field(
        gt=0, le=1, description="delta = k / d: the share of coordinates kept (uniform draw)"
    )


class QsgdCompression(Strict):
    kind: Literal["qsgd"]
    levels: int = Field(ge=1, le=2**20, description="s: quantisation levels")


class RandomGossipCompression(Strict):
    kind: Literal["random_gossip"]
    p: float = Field(gt=0, le=1, description="a node sends its message with probability p")


CompressionConfig = Annotated[
    IdentityCompression
    | TopKCompression
    | RandKCompression
    | QsgdCompression
    | RandomGossipCompression,
    Field(discriminator="kind"),
]
