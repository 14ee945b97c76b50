"""The scenario's `resources` section: per-round resource policies, decided by the server at
each round's start from what it may know (its candidates' channel gains, compute speeds,
batteries and when each last delivered), never from what has not happened yet.

Three decisions, each off by default (the section absent is today's behaviour, bit for bit):
who is scheduled (`scheduling`), how the shared uplink is split among the cohort
(`bandwidth`), and each member's CPU frequency and transmit power (`compute_power`). See
docs/concepts/resource-policies.md for the formulas."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flnet.config import Strict

SCHEDULERS = ("uniform", "best_channel", "proportional_fair", "age_based", "energy_aware")


class SchedulingConfig(Strict):
    """Who takes part: `candidates` x m clients drawn uniformly (m = the cohort with
    over-selection; online ones only under an availability model), then the best m of them
    by `kind`'s score. The server looks at the candidates only, never at all N clients."""

    kind: Literal["uniform", "best_channel", "proportional_fair", "age_based", "energy_aware"] = (
        Field(
            "uniform",
            description="uniform: today's draw; best_channel: highest uplink SNR; "
            "proportional_fair: uplink rate over the client's own average served rate; "
            "age_based: longest since its last delivered update; energy_aware: highest "
            "battery state of charge (needs clients.battery)",
        )
    )
    candidates: float = Field(
        4.0,
        ge=1,
        description="the candidate pool is ceil(candidates * m) clients drawn uniformly "
        "(at most N): what a scheduler costs per round",
    )
    deadline_feasible: bool = Field(
        False,
        description="drop candidates whose download, compute (at full speed) and upload "
        "(on an equal share of the uplink) alone would not fit resources.deadline_s",
    )
    fairness_rounds: float = Field(
        10.0,
        ge=1,
        description="proportional_fair: the average served rate's time constant, in rounds",
    )


class ResourcesConfig(Strict):
    """Per-round resource policies for round-trip algorithms (FedAvg's family)."""

    scheduling: SchedulingConfig = SchedulingConfig()
    bandwidth: Literal["equal", "need_proportional", "min_max"] = Field(
        "equal",
        description="the shared uplink among the round's members: equal (today's processor "
        "sharing); need_proportional: fixed sub-bands with which every upload takes as long; "
        "min_max: fixed sub-bands with which every member finishes at once (the least "
        "round time)",
    )
    compute_power: Literal["fixed", "just_in_time", "min_energy"] = Field(
        "fixed",
        description="each member's CPU frequency and transmit power: fixed (clients.cpu_hz, "
        "radio.tx_power_dbm); just_in_time: the lowest frequency, then power, that meet "
        "deadline_s; min_energy: the pair of least energy that meets deadline_s",
    )
    cpu_min_fraction: float = Field(
        0.1,
        gt=0,
        le=1,
        description="a device's lowest DVFS frequency as a fraction of its clients.cpu_hz "
        "(its highest)",
    )
    tx_power_min_dbm: float = Field(
        -10.0,
        description="the lowest transmit power a policy may set (the highest: each "
        "client's radio.tx_power_dbm)",
    )
    deadline_s: float | None = Field(
        None,
        gt=0,
        description="the round time the policies plan for (from the round's start), needed "
        "by deadline_feasible, just_in_time and min_energy; default: algorithm.cohort."
        "deadline_s (the server's cut), which it may not exceed",
    )

    @property
    def named(self) -> str:
        """The policies set, in words (for errors): 'scheduling best_channel, bandwidth
        min_max'."""
        s = self.scheduling
        parts = [
            f"scheduling {s.kind}" if s.kind != "uniform" else "",
            "the deadline-feasible filter" if s.deadline_feasible else "",
            f"bandwidth {self.bandwidth}" if self.bandwidth != "equal" else "",
            f"compute_power {self.compute_power}" if self.compute_power != "fixed" else "",
        ]
        return ", ".join(p for p in parts if p) or "uniform scheduling, equal bandwidth, fixed"

    @property
    def active(self) -> bool:
        """Whether any policy departs from today's behaviour."""
        return self.schedules or self.allocates

    @property
    def schedules(self) -> bool:
        """Whether cohorts are chosen by the scheduler rather than drawn uniformly."""
        s = self.scheduling
        return s.kind != "uniform" or s.deadline_feasible

    @property
    def allocates(self) -> bool:
        """Whether a round's band, frequencies or powers are set by a policy."""
        return self.bandwidth != "equal" or self.compute_power != "fixed"

    @property
    def needs_deadline(self) -> str | None:
        """The policy that plans for a deadline, in words (None: none does)."""
        if self.compute_power != "fixed":
            return f"compute_power {self.compute_power}"
        return "scheduling.deadline_feasible" if self.scheduling.deadline_feasible else None
