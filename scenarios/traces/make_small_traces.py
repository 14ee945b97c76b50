"""Write the small traces `scenarios/trace_replay.yaml` replays (run from the repository root:
`.venv/bin/python scenarios/traces/make_small_traces.py`).

40 trace clients. Availability: each alternates online and offline sessions (exponential,
means 200 s and 100 s) over a 600 s period that repeats; clients 0..9 sit in another time zone
(tz_offset_s 300: half a period later), clients 38 and 39 are never online. Capacity: seconds
per training sample lognormal around 10 ms, link rates lognormal around 5 Mbit/s uplink and
20 Mbit/s downlink (phones' spread, FedScale's traces are wider).
"""

from pathlib import Path

import numpy as np

from flnet.sim.traces import CapacityTrace, write_capacity

HERE = Path(__file__).parent
PERIOD_S, CLIENTS, NEVER_ONLINE = 600.0, 40, (38, 39)


def availability(rng: np.random.Generator) -> str:
    rows = [f"# period_s: {PERIOD_S:g}", "client,online_from_s,online_until_s,tz_offset_s"]
    for c in range(CLIENTS):
        tz = 300.0 if c < 10 else 0.0
        if c in NEVER_ONLINE:
            rows.append(f"{c},,,{tz:g}")
            continue
        t = float(rng.uniform(0, 100))
        while t < PERIOD_S:
            end = min(t + rng.exponential(200.0) + 10.0, PERIOD_S)
            rows.append(f"{c},{t:.1f},{end:.1f},{tz:g}")
            t = end + rng.exponential(100.0) + 10.0
    return "\n".join(rows) + "\n"


def main() -> None:
    rng = np.random.default_rng(2026)
    (HERE / "small_availability.csv").write_text(
        "# written by make_small_traces.py\n" + availability(rng)
    )
    ids = np.arange(CLIENTS)
    write_capacity(
        HERE / "small_capacity.csv",
        CapacityTrace(
            ids,
            np.round(0.01 * rng.lognormal(0.0, 0.5, CLIENTS), 5),
            np.round(5e6 * rng.lognormal(0.0, 0.7, CLIENTS), -3),
            np.round(20e6 * rng.lognormal(0.0, 0.7, CLIENTS), -3),
        ),
        comment="written by make_small_traces.py",
    )


if __name__ == "__main__":
    main()
