"""Device-to-device transmissions: unicast or broadcast, scheduled on the air, lost or not.

A `D2DJob` is one transmission from a sender to one receiver (unicast) or several (broadcast):
it goes out once, at the rate of its weakest intended receiver (the smallest SNR after
fading), so every receiver can decode it. The sender pays its transmit power for the airtime
once; each receiver its receive power for the same airtime, on its own ledger row. A message
drawn lost (`lost`, per receiver) still takes its airtime and is charged: the receiver listened
and could not decode it (outcome `lost` on its row); the receiver learns it at the end of the
airtime, so nobody waits for it longer than that.

`AirScheduler` decides when a transmission may start. What a transmission needs:
- the medium, under TDMA (`radio.d2d.sharing: tdma`): one transmission on the band at a time,
  each with the whole band, so a set of transmissions takes the sum of their airtimes;
- its sender's and receivers' radios, when nodes are half-duplex (`radio.d2d.half_duplex`):
  a radio sends or receives, one transmission at a time.
The schedule is greedy in request order (first come, first served, with backfilling): a
transmission starts as soon as everything it needs is free; when one ends, the waiting ones are
scanned in request order and each whose needs are all free starts. Without either option
nothing is needed and every transmission starts at once (orthogonal links: an exchange takes as
long as its slowest link; `sharing: shared` splits one band among concurrent ones instead).
`exchange` requests in node order, each node's edges in order, so under TDMA the medium goes
round the nodes in turn. The scan costs O(waiting) per release (O(1) under TDMA, where the
first grant takes the medium).
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from flnet.sim.channel import Transmission
from flnet.sim.costs import Costs
from flnet.sim.ledger import BROADCAST, Ledger, Tag
from flnet.sim.network import Link

MEDIUM = -10  # the shared medium as a resource (node ids are >= 0)
NOTHING: frozenset[int] = frozenset()  # what a transmission needs on orthogonal full-duplex links


class AirScheduler:
    """Grants transmissions what they need (see the module docstring)."""

    def __init__(self, tdma: bool, half_duplex: bool) -> None:
        self.tdma, self.half_duplex = tdma, half_duplex
        self.busy: set[int] = set()
        self.waiting: list[D2DJob] = []

    def needs(self, src: int, receivers: list[int]) -> frozenset[int]:
        if not (self.tdma or self.half_duplex):
            return NOTHING
        need = {MEDIUM} if self.tdma else set()
        if self.half_duplex:
            need.update((src, *receivers))
        return frozenset(need)

    def request(self, job: D2DJob) -> None:
        if not job.needs:
            job.start()
        elif self.waiting and self.tdma or not job.needs.isdisjoint(self.busy):
            job.event, job.waited = job.env.event(), True  # fires when its airtime ends
            self.waiting.append(job)
        else:
            self._grant(job)

    def release(self, job: D2DJob) -> None:
        if not job.needs:
            return
        self.busy -= job.needs
        still: list[D2DJob] = []
        for i, w in enumerate(self.waiting):
            if self.tdma and MEDIUM in self.busy:
                still.extend(self.waiting[i:])
                break
            if w.needs.isdisjoint(self.busy):
                self._grant(w)
            else:
                still.append(w)
        self.waiting = still

    def withdraw(self, job: D2DJob) -> None:
        self.waiting.remove(job)

    def _grant(self, job: D2DJob) -> None:
        self.busy |= job.needs
        job.start()


class D2DJob:
    """One D2D transmission under way (a `flnet.sim.world.Job`): `event` fires when its airtime
    ends; `stop` ends it early (charged up to now; nothing if it had not started);
    `delivered[r]` says whether receiver r got it."""

    __slots__ = (
        "env",
        "ledger",
        "costs",
        "scheduler",
        "src",
        "receivers",
        "bits",
        "tag",
        "lost",
        "then",
        "links",
        "needs",
        "tx",
        "event",
        "waited",
        "outcome",
    )

    def __init__(
        self,
        env: simpy.Environment,
        ledger: Ledger,
        costs: Costs,
        scheduler: AirScheduler,
        src: int,
        receivers: list[int],
        links: list[Link],
        bits: float,
        tag: Tag,
        lost: list[bool] | None,
        then: Callable[[D2DJob], None] | None,
    ) -> None:
        """`links`: from `src` to each of `receivers`; `scheduler` schedules it on the air,
        `costs` draws each receiver's fading, `ledger` gets its rows."""
        self.env, self.ledger, self.costs, self.scheduler = env, ledger, costs, scheduler
        self.src, self.receivers, self.bits, self.tag = src, receivers, bits, tag
        self.lost = lost if lost is not None else [False] * len(receivers)
        self.then = then
        self.links = links
        self.tx: Transmission | None = None
        self.event: simpy.Event  # set when granted (the transmission's) or queued (its own)
        self.waited = False  # queued before it was granted
        self.outcome: str | None = None
        self.needs = scheduler.needs(src, receivers)
        scheduler.request(self)

    @property
    def delivered(self) -> list[bool]:
        ok = self.outcome == "ok"
        return [ok and not lost for lost in self.lost]

    def start(self) -> None:
        """Granted the air: send at the weakest receiver's rate (each receiver's fading drawn)."""
        fading, src, tag = self.costs.fading, self.src, self.tag
        if len(self.links) == 1:  # unicast
            weakest = self.receivers[0]
            snr_hz = self.links[0].snr_hz * fading(src, weakest, tag, None)
        else:
            snr_hz, weakest = min(
                (link.snr_hz * fading(src, r, tag, None), r)
                for r, link in zip(self.receivers, self.links)
            )
        self.tx = tx = self.links[0].channel.transmit(self.bits, snr_hz, src, weakest)
        tx.done.callbacks.append(self._done)
        if not self.waited:  # granted at once: its end is the transmission's
            self.event = tx.done

    def _done(self, _event: simpy.Event) -> None:
        if self.outcome is None:
            self._charge("ok")
            self.scheduler.release(self)
            if self.waited:
                self.event.succeed()
            if self.then is not None:
                self.then(self)

    def stop(self, cause: str) -> None:
        if self.outcome is not None:
            return
        if self.tx is None:
            self.scheduler.withdraw(self)
        else:
            self.tx.cancel()
            self.scheduler.release(self)
        self._charge(cause)

    def _charge(self, outcome: str) -> None:
        self.outcome = outcome
        ledger, now = self.ledger, self.env.now
        start = self.tx.start_s if self.tx is not None else now
        sent = self.tx.sent_bits if self.tx is not None else 0.0
        airtime = now - start
        peer = self.receivers[0] if len(self.receivers) == 1 else BROADCAST
        ledger.add(
            self.tag,
            self.src,
            peer,
            "d2d",
            start,
            now,
            self.links[0].power_w * airtime,
            sent,
            0.0,
            outcome,
        )
        for r, link, lost in zip(self.receivers, self.links, self.lost):
            got = "lost" if lost and outcome == "ok" else outcome
            ledger.add(
                self.tag,
                r,
                self.src,
                "d2d_rx",
                start,
                now,
                link.rx_power_w * airtime,
                0.0,
                0.0,
                got,
            )
