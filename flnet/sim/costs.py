"""What a transfer's fading and a compute's seconds and joules come to: the one place the World
(its jobs, `flnet.sim.world`), the round plan (`flnet.sim.at_once`) and D2D transmissions
(`flnet.sim.d2d`) take them from, so every path charges and draws the same.

Compute follows the cycle model (`flnet.sim.device`) unless a capacity trace gives each
client's seconds per FLOP (`flnet.sim.traces`): then its joules are the trace's compute power
times those seconds. Rayleigh fading multiplies a transfer's SNR by an exponential draw: keyed
(a caller's own key), or by the step and how many draws the link has had in that step.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from flnet.rng import Stream, generator
from flnet.sim.device import compute_energy_j, compute_time_s
from flnet.sim.ledger import Tag
from flnet.sim.traces import TraceSpeeds


class Devices(NamedTuple):
    """Per-client compute profile, each [N]."""

    cpu_hz: np.ndarray
    flops_per_cycle: np.ndarray
    kappa: np.ndarray


FadingCounts = dict[int, dict[tuple, int]]  # step -> link -> draws so far


class Costs:
    """Compute seconds and joules per client, and fading draws, of one run."""

    def __init__(
        self,
        devices: Devices,
        speeds: TraceSpeeds | None,
        num_clients: int,
        seed: int,
        rayleigh_fading: bool,
    ) -> None:
        self.devices, self.speeds, self.num_clients = devices, speeds, num_clients
        self.seed, self.rayleigh_fading = seed, rayleigh_fading
        self._fading_draws: FadingCounts = {}
        # a round's CPU frequencies set by a resource policy (`flnet.sim.resources`), by client
        self.cpu_hz_now: dict[int, float] = {}

    # ------------------------------------------------------------------ fading

    def fading(self, src: int, dst: int, tag: Tag, key: tuple[int, ...] | None) -> float:
        """The factor on the SNR of a transfer from `src` to `dst` (1 without fading)."""
        if not self.rayleigh_fading:
            return 1.0
        if key is not None:
            rng = generator(self.seed, Stream.FADING_KEYED, *key, src + 2, dst + 2)
        else:
            step = tag.step
            draws = self._fading_draws.setdefault(step, {})
            if len(self._fading_draws) > 2:  # only the current and the previous step transfer
                del self._fading_draws[min(self._fading_draws)]
            count = draws.get((src, dst), 0)
            draws[(src, dst)] = count + 1
            rng = generator(self.seed, Stream.FADING, step, src + 2, dst + 2, count)
        return max(float(rng.exponential()), 1e-300)  # a draw of 0 would stall the transfer

    def fading_counts(self) -> FadingCounts:
        """A copy of the draws' counts so far, to put back (`restore_fading_counts`)."""
        return {step: dict(links) for step, links in self._fading_draws.items()}

    def restore_fading_counts(self, counts: FadingCounts) -> None:
        self._fading_draws = counts

    # ------------------------------------------------------------------ compute

    def compute_time_s(self, node: int, flops: float) -> float:
        """Seconds `flops` of local work take on `node`."""
        if self.speeds is not None:  # `compute_times_s`'s product, of one client's floats
            return float(flops * float(self.speeds.s_per_flop[self.speeds.mapping.one(node)]))
        dev = self.devices
        return compute_time_s(flops, self._cpu_hz(node), float(dev.flops_per_cycle[node]))

    def _cpu_hz(self, node: int) -> float:
        """`node`'s CPU frequency now: its own, or the round's policy's."""
        if self.cpu_hz_now:
            hz = self.cpu_hz_now.get(node)
            if hz is not None:
                return hz
        return float(self.devices.cpu_hz[node])

    def compute_times_s(
        self, flops: float | np.ndarray, clients: np.ndarray | None = None
    ) -> np.ndarray:
        """[C] seconds `flops` (one number, or [C]) of local work take on each client (every
        client if None)."""
        if self.speeds is not None:
            rows = self.speeds.mapping(np.arange(self.num_clients) if clients is None else clients)
            return flops * self.speeds.s_per_flop[rows]
        dev = self.devices
        pick = slice(None) if clients is None else clients
        return np.asarray(compute_time_s(flops, dev.cpu_hz[pick], dev.flops_per_cycle[pick]))

    def compute_energy_j(self, node: int, flops: float) -> float:
        """Joules `flops` of local work cost on `node`."""
        if self.speeds is not None:  # the work's own seconds: a slowdown costs no more joules
            return self.speeds.compute_power_w * self.compute_time_s(node, flops)
        dev = self.devices
        return float(
            compute_energy_j(
                flops,
                self._cpu_hz(node),
                float(dev.flops_per_cycle[node]),
                float(dev.kappa[node]),
            )
        )

    def compute_energies_j(self, clients: np.ndarray, flops: np.ndarray) -> np.ndarray:
        """[C] `compute_energy_j` of each client's `flops`, bit for bit, at once."""
        if self.speeds is not None:
            return self.speeds.compute_power_w * self.compute_times_s(flops, clients)
        dev = self.devices
        return np.asarray(
            compute_energy_j(
                flops, dev.cpu_hz[clients], dev.flops_per_cycle[clients], dev.kappa[clients]
            )
        )
