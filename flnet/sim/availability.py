"""Which clients are online, on the simulated clock: the interface and the built-in models.

The interface (`Availability`) is two vectorised questions about a few clients at one instant:

- ``online(clients, t_s, draw)`` -> [k] bool: is each client online at `t_s`;
- ``online_until(clients, t_s, draw)`` -> [k] float: when the online session holding `t_s` ends
  (``inf``: it never ends; `t_s` itself when the client is offline at `t_s`).

`draw` keys models that are drawn per selection rather than on the clock (`Bernoulli`): the
round (round_trip), or the stream's launch count (stream). Clock models ignore it. A model must
answer the same for the same arguments on every call and after a resume (a deterministic
function of the seed, the client and the time), and must cost nothing per registered client:
the World asks only about clients it is about to select or start, never about all N.

Models: `Always` (today's behaviour), `Bernoulli` (online with probability p, drawn per
selection; a selected client then stays online for its work), `Diurnal` (sessions that follow a
local hour-of-day curve, clients spread over time zones). Trace replay is another implementation
of the same interface (the `trace` kind).
"""

from __future__ import annotations

import itertools
import math
from typing import Protocol

import numpy as np

from flnet import draws
from flnet.rng import Stream, key_rows, stream_key, stream_keys
from flnet.schema import AvailabilityConfig, DiurnalAvailability
from flnet.sim.traces import replay_from

DAY_S = 86_400.0
HOUR_S = 3_600.0
MAX_SESSION_S = DAY_S - 1.0  # sessions are cut below a day, so only yesterday's reach today
SESSIONS_KEPT = 4096  # (client, day) session draws kept (a few hundred bytes each), and zones
CLIENTS_PER_BLOCK = 32  # clients whose zones and sessions are drawn as one block
THIN_TOLERANCE = 1e-9  # of the rate's bound: a coin this near its rate is thinned pair by pair


class Availability(Protocol):
    """Who is online when (see the module docstring)."""

    def online(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        """[k] bool: each of `clients` ([k] ids) is online at `t_s`."""
        ...

    def online_until(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        """[k] float: end of the online session holding `t_s` (inf: never; `t_s` if offline)."""
        ...


class Always:
    """Every client is online at every instant (no availability model)."""

    def online(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        return np.ones(len(clients), dtype=bool)

    def online_until(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        return np.full(len(clients), math.inf)


class Bernoulli:
    """Online with probability `p`, drawn independently per (selection, client) from the
    AVAILABILITY stream keyed (seed, draw, client); an online client stays online for the work
    it is given (the draw stands for the whole round, or the whole piece of work)."""

    def __init__(self, p: float, seed: int) -> None:
        self.p, self.seed = p, seed

    def online(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        """Each client's ``generator(seed, AVAILABILITY, draw, c).random() < p``, the clients'
        generators run as one block (`flnet.draws.uniforms`)."""
        keys = stream_keys(self.seed, Stream.AVAILABILITY, draw, clients)
        return draws.uniforms(keys, 1)[:, 0] < self.p

    def online_until(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        return np.where(self.online(clients, t_s, draw), math.inf, t_s)


class Diurnal:
    """Online sessions whose rate follows a local hour-of-day curve.

    The configured curve pi(h) is the probability of being online at local hour h: a cosine
    ``mean * (1 + amplitude * cos(2 pi (h - peak_hour) / 24))`` or 24 hourly values (linear in
    between). Each client has a time zone (its offset drawn once from `time_zones_h`, ZONES
    stream keyed (seed, client)). Sessions start as a Poisson process of rate lambda(t) and
    last Exp(mean `session_mean_s`); a client is online while any of its sessions is on
    (overlapping sessions merge). With g = -ln(1 - pi), the chance of being online at t is
    exactly ``1 - exp(-G(t))`` where G' = lambda - G / L; choosing ``lambda = g / L + g'``
    makes G = g, so the online fraction at local hour h is pi(h) itself, not a lagged and
    flattened copy (where a curve falls faster than sessions can end, lambda is clipped at 0
    and the fraction lags the curve there).

    Timelines are made on demand: the sessions starting in UTC day d of client c are drawn
    from the SESSIONS stream keyed (seed, c, d + 1) by thinning (candidate starts at the
    curve's upper bound, each kept with probability lambda / bound); a session is cut below
    24 h, so the instant t needs only days d - 1 and d. Nothing is stored per client.
    """

    def __init__(self, cfg: DiurnalAvailability, seed: int) -> None:
        self.seed = seed
        self.session_s = cfg.session_mean_s
        self.zones_h = np.asarray(cfg.time_zones_h, dtype=float)
        weights = np.asarray(cfg.time_zone_weights or [1.0] * len(self.zones_h), dtype=float)
        self.zone_p = weights / weights.sum()
        if cfg.hourly_online is not None:
            self.hourly: np.ndarray | None = np.asarray(cfg.hourly_online, dtype=float)
        else:
            self.hourly = None
            self.mean, self.amplitude, self.peak_h = cfg.mean_online, cfg.amplitude, cfg.peak_hour
        self.rate_bound_hz = self._rate_bound_hz()
        # numpy's choice with p: a uniform placed in p's cumulative sum over its last entry
        self._zone_cdf = self.zone_p.cumsum()
        self._zone_cdf /= self._zone_cdf[-1]
        # (session end, zone) of the clients found online at one instant: selection asks,
        # then each started client's fate asks again and a battery asks its zone. Kept until
        # the clock moves, so never more than the online clients asked at one instant. A
        # cache of pure functions: a resume needs nothing.
        self._memo_s = math.nan
        self._memo: dict[int, tuple[float, float]] = {}
        # each (client, UTC day)'s sessions as drawn, for the clients asked lately: selection
        # asks many candidates, and the same ones again while the day lasts; emptied when it
        # holds SESSIONS_KEPT (a pure function: dropping it loses nothing)
        self._days: dict[tuple[int, int], np.ndarray] = {}
        self._zones: dict[int, float] = {}  # likewise, the time zones of the clients asked

    # the curve, in local hours ------------------------------------------------------------

    def fraction(self, hour: np.ndarray) -> np.ndarray:
        """pi(h): the configured probability of being online at local hour h."""
        h = np.mod(hour, 24.0)
        if self.hourly is not None:
            return np.interp(h, np.arange(25.0), np.append(self.hourly, self.hourly[0]))
        return self.mean * (1.0 + self.amplitude * np.cos(2 * np.pi * (h - self.peak_h) / 24))

    def _slope_per_h(self, hour: np.ndarray) -> np.ndarray:
        """pi'(h) per hour (right derivative at the hourly knots)."""
        h = np.mod(hour, 24.0)
        if self.hourly is not None:
            return np.diff(np.append(self.hourly, self.hourly[0]))[np.floor(h).astype(int) % 24]
        w = 2 * np.pi / 24
        return -self.mean * self.amplitude * w * np.sin(w * (h - self.peak_h))

    def start_rate_hz(self, hour: np.ndarray) -> np.ndarray:
        """lambda at local hour h: session starts per second, g / L + g' (clipped at 0)."""
        pi = self.fraction(hour)
        g = -np.log1p(-pi)
        g_dot = self._slope_per_h(hour) / (1.0 - pi) / HOUR_S
        return np.maximum(g / self.session_s + g_dot, 0.0)

    def _rate_bound_hz(self) -> float:
        if self.hourly is not None:  # g and g' are extreme at a segment's ends
            v, nxt = self.hourly, np.roll(self.hourly, -1)
            g_max = float((-np.log1p(-v)).max())
            slope = nxt - v
            g_dot = np.maximum(slope / (1 - v), slope / (1 - nxt)).max() / HOUR_S
        else:
            grid = np.linspace(0.0, 24.0, 24 * 60 * 4, endpoint=False)
            pi = self.fraction(grid)
            g_max = float((-np.log1p(-pi)).max())
            g_dot = float((self._slope_per_h(grid) / (1.0 - pi)).max()) / HOUR_S * 1.001
        return g_max / self.session_s + max(float(g_dot), 0.0) + 1e-12

    # the clients' timelines -----------------------------------------------------------------

    def zone_h(self, client: int) -> float:
        return self.zones_h_of([client])[0]

    def zones_h_of(self, clients: list[int]) -> list[float]:
        """Each client's time zone: ``generator(seed, ZONES, c).choice(zones, p=weights)``,
        the clients not asked lately drawn as one block (numpy's choice with p: one uniform
        double, placed in the weights' normalised cumulative sum by searchsorted)."""
        known = {c: hit[1] for c in clients if (hit := self._memo.get(c)) is not None}
        known.update((c, self._zones[c]) for c in clients if c in self._zones)
        new = [c for c in dict.fromkeys(clients) if c not in known]
        if new:
            u = draws.uniforms(key_rows(stream_key(self.seed, Stream.ZONES), new), 1)[:, 0]
            zones = self.zones_h[self._zone_cdf.searchsorted(u, side="right")].tolist()
            if len(self._zones) + len(new) > SESSIONS_KEPT:
                self._zones.clear()
            self._zones.update(itertools.islice(zip(new, zones), SESSIONS_KEPT))
            known.update(zip(new, zones))
        return [known[c] for c in clients]

    def sessions(self, client: int, day: int, zone_h: float | None = None) -> np.ndarray:
        """[S, 2] (start_s, end_s) of the sessions starting in UTC day `day`, by start
        (read-only: kept for the next question about that day)."""
        zone = self.zone_h(client) if zone_h is None else zone_h
        return self.sessions_of([(client, day)], [zone])[0]

    def sessions_of(self, pairs: list[tuple[int, int]], zones_h: list[float]) -> list[np.ndarray]:
        """`sessions` of each (client, day) in `pairs` (its client's zone listed alike). Those
        not asked lately are drawn together: their generators hashed as one block, each
        generator's own draws (a Poisson count of candidate starts at the curve's bound, their
        times, uniforms, lengths), then one thinning of all the candidates by the curve's rate.
        The rate is elementwise, so a start's rate is the same whatever else is drawn with it
        (tests/test_availability.py checks it against one pair at a time)."""
        if any(day < -1 for _, day in pairs):
            raise ValueError(f"day {min(d for _, d in pairs)}: simulated time starts at 0")
        found = {p: hit for p in pairs if (hit := self._days.get(p)) is not None}
        new = [p for p in dict.fromkeys(pairs) if p not in found]
        if new:
            zone_of = dict(zip(pairs, zones_h))
            found.update(zip(new, self._draw_days(new, [zone_of[p] for p in new])))
        return [found[p] for p in pairs]

    def _draw_days(self, pairs: list[tuple[int, int]], zones_h: list[float]) -> list[np.ndarray]:
        """`sessions` of each (client, day) in `pairs`, drawn as one block: each pair's
        generator draws, in its own order, its number of candidate starts (Poisson at the
        curve's bound), their times in the day, a uniform each and a length each; then the
        block's starts are sorted within each pair and thinned by the curve's rate at once."""
        clients, days = (np.array(col, dtype=np.int64) for col in zip(*pairs))
        keys = key_rows(stream_key(self.seed, Stream.SESSIONS), clients, days + 1)
        counts, offsets, uniforms, lengths = [], [], [], []
        for rng in draws.generators(keys):
            n = int(rng.poisson(self.rate_bound_hz * DAY_S))
            counts.append(n)
            offsets.append(rng.uniform(0.0, DAY_S, n))
            uniforms.append(rng.random(n))
            lengths.append(rng.exponential(self.session_s, n))
        pair = np.repeat(np.arange(len(pairs)), counts)
        offset = np.concatenate(offsets)
        starts = np.repeat(days * DAY_S, counts) + offset[np.lexsort((offset, pair))]
        hours = starts / HOUR_S + np.repeat(zones_h, counts)
        coin = np.concatenate(uniforms) * self.rate_bound_hz
        rate = self.start_rate_hz(hours)
        keep = coin < rate
        # the definition thins a pair by the rates of its own starts, as one array; a CPU's
        # elementwise cos or log1p may round an element by where it sits in an array (a SIMD
        # body or tail), so a pair with a coin within THIN_TOLERANCE of its rate is thinned so
        first = np.cumsum([0, *counts])
        for p in np.unique(pair[np.abs(coin - rate) <= THIN_TOLERANCE * self.rate_bound_hz]):
            own = slice(first[p], first[p + 1])
            keep[own] = coin[own] < self.start_rate_hz(hours[own].copy())
        ends = starts + np.minimum(np.concatenate(lengths), MAX_SESSION_S)
        kept = np.stack([starts, ends], axis=1)[keep]
        kept.setflags(write=False)
        bounds = np.cumsum(np.bincount(pair[keep], minlength=len(pairs))).tolist()
        drawn = [kept[a:b] for a, b in zip([0, *bounds], bounds)]
        if len(self._days) + len(pairs) > SESSIONS_KEPT:
            self._days.clear()
        self._days.update(itertools.islice(zip(pairs, drawn), SESSIONS_KEPT))
        return drawn

    def _until(self, client: int, t_s: float, zone: float, seen: np.ndarray) -> float:
        """The end of `client`'s online session holding `t_s` (`t_s`: offline), from `seen`,
        its sessions of the day before `t_s`'s and of that day."""
        holding = seen[(seen[:, 0] <= t_s) & (t_s < seen[:, 1])]
        if not len(holding):
            return t_s
        end, last_day = float(holding[:, 1].max()), math.floor(t_s / DAY_S)
        while True:  # merge sessions that start before the current end and last beyond it
            while last_day < math.floor(end / DAY_S):
                last_day += 1
                seen = np.concatenate([seen, self.sessions(client, last_day, zone)])
            later = seen[(seen[:, 0] <= end) & (seen[:, 1] > end)]
            if not len(later):
                return end
            end = float(later[:, 1].max())

    def online(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        return self.online_until(clients, t_s, draw) > t_s

    def online_until(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        """The clients not found online at `t_s` already have their zones and their sessions
        of the day before and of the day drawn in blocks (`zones_h_of`, `sessions_of`) of
        CLIENTS_PER_BLOCK: memory holds one block's draws at a time, whatever the number asked."""
        if t_s != self._memo_s:
            self._memo_s, self._memo = t_s, {}
        memo = self._memo
        asked = np.asarray(clients).tolist()
        new = [c for c in dict.fromkeys(asked) if c not in memo]
        until = {c: hit[0] for c in asked if (hit := memo.get(c)) is not None}
        day = math.floor(t_s / DAY_S)
        for i in range(0, len(new), CLIENTS_PER_BLOCK):
            block = new[i : i + CLIENTS_PER_BLOCK]
            zones = self.zones_h_of(block)
            days = self.sessions_of(
                [(c, d) for c in block for d in (day - 1, day)],
                [z for z in zones for _ in range(2)],
            )
            for j, (c, zone) in enumerate(zip(block, zones)):
                until[c] = end = self._until(c, t_s, zone, np.concatenate(days[2 * j : 2 * j + 2]))
                if end > t_s:
                    memo[c] = (end, zone)
        return np.array([until[c] for c in asked], dtype=float)


def build(cfg: AvailabilityConfig, seed: int) -> Availability:
    """The model a scenario's `clients.availability` names."""
    if cfg.kind == "always":
        return Always()
    if cfg.kind == "bernoulli":
        return Bernoulli(cfg.p, seed)
    if cfg.kind == "trace":  # replayed from a file (flnet.sim.traces)
        return replay_from(cfg, seed, "clients.availability")
    return Diurnal(cfg, seed)
