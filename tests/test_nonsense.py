"""Values with an obvious range are refused outside it, naming the field and what is allowed
(issue 41, class 5): a state of charge outside [0, 1], a charging window whose start is its end,
a trace's tz_offset_s of 1e308, a diurnal curve that is 0 at every hour, a slowdown of 1e308.
Each was accepted and gave a run that "completed" saying nothing true. One real `flnet
validate` process checks every file, as a user would."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flnet.errors import ScenarioError
from flnet.sim.traces import TraceError, read_availability

REPO = Path(__file__).resolve().parents[1]
BASE = {"name": "nonsense", "algorithm": {"name": "fedavg"}, "clients": {"count": 3}}


def battery(**fields):
    return {"clients": {"count": 5, "battery": fields}}


REFUSED = {  # file stem -> (clients section, words the one line must hold)
    "threshold": (battery(threshold_soc=1.5), ["clients.battery.threshold_soc", "[0, 1]"]),
    "initial": (battery(initial_soc=-0.1), ["clients.battery.initial_soc", "[0, 1]"]),
    "uniform": (
        battery(threshold_soc={"kind": "uniform", "low": 0.1, "high": 1.2}),
        ["clients.battery.threshold_soc", "uniform with high 1.2"],
    ),
    "normal": (
        battery(initial_soc={"kind": "normal", "mean": 2.0, "std": 0.1}),
        ["clients.battery.initial_soc", "normal with mean 2"],
    ),
    "per_client": (
        battery(threshold_soc={"kind": "per_client", "values": [0.2, 0.2, 0.2, 0.2, 7.0]}),
        ["clients.battery.threshold_soc", "per_client with a value 7"],
    ),
    "window": (
        battery(charging_start_hour=5, charging_end_hour=5.0),
        ["clients.battery.charging_end_hour", "charging_start_hour (5)", "charging_power_w: 0"],
    ),
    "hourly": (
        {"clients": {"count": 3, "availability": {"kind": "diurnal", "hourly_online": [0] * 24}}},
        ["clients.availability.hourly_online", "0 at every hour"],
    ),
    "slowdown": (
        {"clients": {"count": 3, "slowdown_probability": 1.0, "slowdown_factor": 1e308}},
        ["clients.slowdown_factor", "1000"],
    ),
}


def trace_scenario(tmp_path, stem, tz_s, period_s=None):
    trace = tmp_path / f"{stem}.csv"
    header = f"# period_s: {period_s}\n" if period_s else ""
    trace.write_text(f"{header}client,online_from_s,online_until_s,tz_offset_s\n0,0,60,{tz_s}\n")
    return {"clients": {"count": 3, "availability": {"kind": "trace", "path": str(trace)}}}


def test_each_nonsense_value_is_refused_by_a_real_validate_naming_its_field(tmp_path):
    files = {}
    for stem, (section, _) in REFUSED.items():
        files[stem] = tmp_path / f"{stem}.yaml"
        files[stem].write_text(yaml.safe_dump({**BASE, **section}))
    files["tz"] = tmp_path / "tz.yaml"
    files["tz"].write_text(yaml.safe_dump({**BASE, **trace_scenario(tmp_path, "tz", "1e308")}))
    fine = tmp_path / "fine.yaml"  # the edges are allowed
    fine.write_text(yaml.safe_dump({**BASE, **battery(threshold_soc=1.0, initial_soc=0.0)}))
    proc = subprocess.run(
        [sys.executable, "-m", "flnet.cli", "validate", fine, *files.values()],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000"},
        timeout=300,
    )
    assert proc.returncode == 2
    assert f"{fine}: ok" in proc.stdout
    assert "Traceback" not in proc.stderr
    said = {}
    for line in proc.stderr.splitlines():  # "error: <file> ...", the field on the next line
        if line.startswith("error: "):
            stem = Path(line.split()[1].rstrip(":,")).stem
            said[stem] = line
        else:
            said[stem] += " " + line.strip()
    assert sorted(said) == sorted(files)
    for stem, (_, words) in REFUSED.items():
        for word in words:
            assert word in said[stem], (stem, said[stem])
    assert "tz.csv, line 2: tz_offset_s 1e+308 is beyond +-86400 s" in said["tz"]


@pytest.mark.parametrize(
    "tz_s, period_s, ok",
    [
        (86_400, None, True),
        (-86_400, None, True),
        (86_401, None, False),
        (-1e308, None, False),
        (500_000, 604_800, True),  # a phase within a week's period
        (700_000, 604_800, False),
    ],
)
def test_tz_offset_is_bounded_by_a_day_or_the_period(tmp_path, tz_s, period_s, ok):
    section = trace_scenario(tmp_path, "t", tz_s, period_s)
    path = section["clients"]["availability"]["path"]
    if ok:
        assert read_availability(path).tz_offset_s.tolist() == [tz_s]
    else:
        with pytest.raises(TraceError, match=f"line {2 if period_s is None else 3}: tz_offset_s"):
            read_availability(path)


def test_a_normal_soc_centred_inside_is_still_drawn_and_clipped(scenario):
    """A normal's unbounded tail stays allowed (clipped when drawn, as documented) when its
    mean is a fraction."""
    sc = scenario(**battery(initial_soc={"kind": "normal", "mean": 0.9, "std": 0.5}))
    assert sc.clients.battery.initial_soc.mean == 0.9
    with pytest.raises(ScenarioError, match="slowdown_factor"):
        scenario(clients={"count": 5, "slowdown_factor": 1000.5})
