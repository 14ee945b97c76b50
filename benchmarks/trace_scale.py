"""Device traces at FedScale's size: converting, reading and asking a trace of M clients.

    PYTHONPATH=. .venv/bin/python benchmarks/trace_scale.py [M] [INTERVALS]

Writes a synthetic availability pickle in FedScale's layout (M clients, INTERVALS on periods
each, a period of a week; FedScale's client_behave_trace holds about 1e5 clients), converts it
with `flnet traces fedscale`, reads the CSV back and asks 1,000 clients at 1,000 instants.
Prints one JSON line: seconds to convert and to read, the trace's bytes in memory, and the
microseconds per client question.
"""

from __future__ import annotations

import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from flnet.fedscale import convert
from flnet.sim.traces import read_availability

WEEK_S = 7 * 86_400.0


def main(m: int = 100_000, intervals: int = 10) -> None:
    rng = np.random.default_rng(0)
    bounds = np.sort(rng.uniform(0, WEEK_S, (m, 2 * intervals)), axis=1)
    data = {
        c: {
            "active": bounds[c, 0::2].tolist(),
            "inactive": bounds[c, 1::2].tolist(),
            "finish_time": WEEK_S,
            "duration": 0,
            "model": "x",
        }
        for c in range(m)
    }
    with tempfile.TemporaryDirectory() as tmp:
        pkl = Path(tmp) / "client_behave_trace"
        pkl.write_bytes(pickle.dumps(data))
        start = time.perf_counter()
        (csv,) = convert(pkl, None, Path(tmp))
        convert_s = time.perf_counter() - start
        start = time.perf_counter()
        trace = read_availability(csv)
        read_s = time.perf_counter() - start
    rows = rng.integers(m, size=1000)
    start = time.perf_counter()
    for t in rng.uniform(0, 4 * WEEK_S, 1000):
        trace.online_until(rows, float(t))
    ask_us = (time.perf_counter() - start) / (1000 * len(rows)) * 1e6
    print(
        json.dumps(
            {
                "clients": m,
                "intervals": int(trace.offsets[-1]),
                "convert_s": round(convert_s, 2),
                "read_s": round(read_s, 2),
                "trace_mib": round(sum(a.nbytes for a in trace) / 2**20, 1),
                "us_per_client_question": round(ask_us, 3),
            }
        )
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
