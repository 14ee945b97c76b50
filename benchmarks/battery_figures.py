"""The records' battery columns at scale: 100,000 participants (one ledger row each over a
day), read 1 and 3 days later, one client at a time (`Battery.level` each, as the records did
before `Battery.levels_at`) against all at once (`levels_at`); CPU seconds, median of 3.

    .venv/bin/python benchmarks/battery_figures.py
"""

import statistics
import time

import numpy as np

from flnet.scenario import BatteryConfig
from flnet.sim.battery import Battery


def main() -> None:
    battery = Battery(
        BatteryConfig(idle_power_w=0.5), seed=0, zone_h=lambda c: (-5.0, 1.0, 8.0)[c % 3]
    )
    rng = np.random.default_rng(0)
    for client, t_s in enumerate(np.sort(rng.uniform(0, 86_400.0, 100_000)).tolist()):
        battery.spend(client, t_s, 1.0, "ok")

    def one_at_a_time(t_s: float) -> list[float]:
        return [battery.level(c, t_s).charge_j for c in battery._levels]

    for days in (1, 3):
        t_s = 86_400.0 * (1 + days)
        for name, fn in (("one at a time", one_at_a_time), ("levels_at", battery.levels_at)):
            runs = []
            for _ in range(3):
                start = time.process_time()
                fn(t_s)
                runs.append(time.process_time() - start)
            print(f"{days} day(s) later, {name:13s}: {statistics.median(runs):.3f} CPU-s")


if __name__ == "__main__":
    main()
