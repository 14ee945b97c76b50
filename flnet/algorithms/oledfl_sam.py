"""OledFL-SAM: OledFL's Algorithm 1 with lambda > 0, the opposite lookahead start on top of
DFedSAM's local SAM steps (radius `local.sam_rho`; the paper uses 0.1). See `oledfl`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flnet.algorithms.configs import OledflSamConfig as Config
from flnet.algorithms.oledfl import State, check, init, progress, protocol

__all__ = ["Config", "State", "init", "progress", "protocol", "check"]


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import oledfl_sam as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
