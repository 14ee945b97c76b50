"""Block-specific predictors (Ding et al., MM-PSGD line 8 and MC-PSGD line 12): predictor m is a
weighted average of the models folded into it in block m's rounds, over all cycles.

Round j of block m (j = 1, 2, ... counted over all cycles) gets weight base^(r - j) after r
rounds: base 1 is the paper's uniform average (eq. 7-8, x_m <- r/(r+1) x_m + 1/(r+1) x); base
0.5 is its experiments' "exponentially weighted average ... where the base is 0.5, and the round
number works as the exponent" (Sec. 6.1), read as weights 0.5^(r - j) normalised to sum to 1 (the
paper gives no normalisation; unnormalised weights would not average). The running form keeps
each block's total weight s_m (in units of its latest round's weight):
    s_m <- base * s_m + 1,    x_m <- x_m + (x - x_m) / s_m.
A block not visited yet keeps the initial model.
"""

from __future__ import annotations

from typing import Literal

import torch

Averaging = Literal["uniform", "exponential"]


def base_of(averaging: Averaging, base: float) -> float:
    """The weight ratio of consecutive rounds: 1 for uniform, `base` for exponential."""
    return 1.0 if averaging == "uniform" else base


def init(x: torch.Tensor, num_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, P] predictors (each the initial model x) and [M] total weights (0: none folded)."""
    return x.expand(num_blocks, -1).clone(), torch.zeros(num_blocks, dtype=torch.float64)


def fold(
    predictors: torch.Tensor, weights: torch.Tensor, block: int, x: torch.Tensor, base: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Predictor `block` with the model x ([P]) folded in; new tensors, the inputs unchanged."""
    weights = weights.clone()
    weights[block] = base * weights[block] + 1.0
    predictors = predictors.clone()
    step = float(1.0 / weights[block])
    predictors[block] = predictors[block] + (x - predictors[block]) * step
    return predictors, weights
