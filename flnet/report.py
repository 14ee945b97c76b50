"""One self-contained HTML report for a run, several runs or a sweep.

The plots are embedded as base64 PNG and the style sheet is inline, so the file opens without a
network and without any other file: it can be mailed, attached to an issue or archived with
the paper. Like flnet.plot it reads only the results folder format on disk.

    from flnet.report import write_report
    write_report("runs/quickstart")            # -> runs/quickstart/report.html
"""

from __future__ import annotations

import base64
import datetime
import html
import math
import os
import platform
import shutil
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from flnet.analysis import TAU, wasted_energy_j
from flnet.comparison import Comparison, compare, spread_text
from flnet.plot import (
    ENERGY_PARTS,
    Results,
    ResultsError,
    ResultsLike,
    _fmt_value,
    _sweep_records,
    aggregation,
    as_results,
    best_tau_applies,
    best_tau_table,
    check_target,
    figures,
    png_bytes,
    short_name,
    to_target_table,
)

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn
    from matplotlib.figure import Figure

LIBRARIES = (
    "flnet",
    "torch",
    "numpy",
    "pandas",
    "pyarrow",
    "simpy",
    "networkx",
    "scipy",
    "pydantic",
    "matplotlib",
)
CAPTIONS = {
    "accuracy_vs_time": "Accuracy against simulated time.",
    "accuracy_vs_energy": "Accuracy against cumulative energy.",
    "accuracy_vs_rounds": "Accuracy against rounds.",
    "energy_split": "Energy at the last record, split into compute, uplink, downlink and D2D.",
    "energy_by_device_class": "Energy per device class: the server, and the clients in thirds "
    "by their measured compute speed (FLOP/s of their completed "
    "compute events in the ledger).",
    "best_tau": "Best local steps tau per cell: median over seeds, [min-max] below it.",
    "consensus_distance": "Consensus distance between the nodes' models (gossip runs).",
}
CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1400px; padding: 0 1.5em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 2em;
     border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.meta { color: #666; } figure { margin: 1em 0; } figure img { max-width: 100%; }
figcaption { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 0.9em; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #eee; text-align: right; }
th { background: #f5f5f5; position: sticky; top: 0; } td.text, th.text { text-align: left; }
td.text { white-space: nowrap; }
.scroll { max-height: 32em; max-width: 100%; overflow: auto; display: inline-block;
          border: 1px solid #eee; }
pre { background: #f7f7f7; padding: 1em; overflow: auto; max-height: 40em; font-size: 0.85em; }
"""


def _fmt(value: Any) -> str:
    """Table cell text: four significant digits, integers as they are, '–' for missing."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (bool,)) or type(value).__name__ == "bool_":
        return "yes" if value else "no"
    if isinstance(value, int) or (hasattr(value, "dtype") and value.dtype.kind in "iu"):
        return str(int(value))
    if isinstance(value, float) or (hasattr(value, "dtype") and value.dtype.kind == "f"):
        return "∞" if math.isinf(value) else f"{float(value):.4g}"
    return str(value)


def html_table(df: pd.DataFrame, table_id: str, headers: dict[str, str]) -> str:
    """A table whose cells carry their column's name (`data-col`) so a reader, or a test,
    finds a figure without counting columns."""
    cols = [c for c in headers if c in df]
    text_cols = {
        c
        for c in cols
        if not pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c])
    }
    cls = {c: ' class="text"' if c in text_cols else "" for c in cols}
    head = "".join(f"<th{cls[c]}>{html.escape(headers[c])}</th>" for c in cols)
    rows = "\n".join(
        "<tr>"
        + "".join(
            f'<td{cls[c]} data-col="{html.escape(str(c))}">{html.escape(_fmt(v))}</td>'
            for c, v in zip(cols, row)
        )
        + "</tr>"
        for row in df[cols].itertuples(index=False)
    )
    return (
        f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>\n{rows}\n</tbody></table></div>"
    )


def final_table(res: Results) -> pd.DataFrame:
    """Per run: its status and its last record's accuracy, seconds, joules and bits."""
    last = res.records.groupby("run_id", sort=False).tail(1).set_index("run_id")
    best = res.records.groupby("run_id", sort=False).test_accuracy.max()
    runs = res.runs.set_index("run_id")
    out = runs[["label", "status"]].copy()
    out["rounds"] = last["round"]
    out["final_test_accuracy"] = last.test_accuracy
    out["best_test_accuracy"] = best
    for c in (
        "client_accuracy_mean",
        "client_accuracy_worst",
        "sim_time_s",
        "energy_j",
        *ENERGY_PARTS,
        "bits_up",
        "bits_down",
        "bits_d2d",
    ):
        if c in last:
            out[c] = last[c]
    out = out.reset_index()
    out["rounds"] = out.rounds.astype("Int64")
    return out


FINAL_HEADERS = {
    "label": "run",
    "status": "status",
    "rounds": "last round",
    "final_test_accuracy": "final test accuracy",
    "best_test_accuracy": "best test accuracy",
    "client_accuracy_mean": "mean client accuracy",
    "client_accuracy_worst": "worst client",
    "sim_time_s": "simulated time (s)",
    "energy_j": "energy (J)",
    "energy_compute_j": "compute (J)",
    "energy_uplink_j": "uplink (J)",
    "energy_downlink_j": "downlink (J)",
    "energy_d2d_j": "D2D (J)",
    "bits_up": "bits up",
    "bits_down": "bits down",
    "bits_d2d": "bits D2D",
}
TARGET_HEADERS = {
    "label": "run",
    "reached": "reached",
    "round": "round",
    "sim_time_s": "simulated time (s)",
    "energy_j": "energy (J)",
}


def target_table(res: Results, target: float) -> pd.DataFrame:
    """Per run: whether it reached the target, the round that did, and the simulated seconds
    and joules read between the evaluations around it (as `flnet analyze` reads them)."""
    table = to_target_table(res, target)
    table.insert(1, "label", table.run_id.map(res.runs.set_index("run_id").label))
    table["round"] = table["round"].astype("Int64")
    return table


def summary_table(res: Results, cmp: Comparison) -> pd.DataFrame:
    """Per series, what a reader asks first: seeds, how many reached the target, final
    accuracy and the worst client's, seconds, joules and bits to target (median [min-max] over
    the seeds that reached it), and joules wasted on work that came to nothing, by how it
    ended (median over seeds)."""
    series = cmp.series
    out = pd.DataFrame({"group": series.series, "seeds": series.seeds, "reached": series.reached})
    out["final"] = spread_text(series, f"final_{cmp.metric}")
    if "final_client_accuracy_worst_median" in series:
        out["worst"] = spread_text(series, "final_client_accuracy_worst")
    for c in ("seconds", "joules", "bits"):
        out[c] = spread_text(series, f"{c}_to_target")
    wasted = _wasted(res)
    if wasted is not None:
        out["wasted"] = out.group.map(wasted).fillna("–")
    return out


def _wasted(res: Results) -> pd.Series | None:
    """Per series: the median over its seeds of the joules wasted per outcome, as text; None
    when no run kept a ledger."""

    columns = ["round", "pattern", "node", "kind", "start_s", "energy_j", "outcome"]
    per_run = {}
    for rid in res.runs.run_id[res.runs.run_id.isin(res.records.run_id)]:
        ledger = res.ledger(rid, columns)
        if ledger is not None and {"pattern", "outcome"} <= set(ledger.columns):
            per_run[rid] = wasted_energy_j(ledger)
    if not per_run:
        return None
    group = res.runs.set_index("run_id").group
    text = {}
    for name, ids in pd.Series(list(per_run)).groupby(pd.Series(list(per_run)).map(group)):
        table = pd.DataFrame([per_run[i] for i in ids]).fillna(0.0)
        if table.empty or not table.to_numpy().any():
            text[name] = "none"
            continue
        med = table.median()
        text[name] = ", ".join(f"{k} {v:.3g}" for k, v in med.items() if v > 0) or "none"
    return pd.Series(text)


SUMMARY_HEADERS = {
    "group": "series",
    "seeds": "seeds",
    "reached": "reached target",
    "final": "final test accuracy",
    "worst": "worst client (final)",
    "seconds": "seconds to target",
    "joules": "joules to target",
    "bits": "bits to target",
    "wasted": "joules wasted, by outcome",
}
CHOICE_HEADERS = {
    "cell": "cell",
    "best": "best",
    "per_seed": "best per seed",
    "cost": "its cost to target, median [min-max]",
    "verdict": "verdict (seed by seed)",
}


def choice_table(cmp: Comparison) -> pd.DataFrame | None:
    """Where the local-work field varies: per cell, its best value seed by seed and the
    verdict (`flnet analyze`'s answer)."""
    cells = cmp.per_cell
    if cells is None or not len(cells):
        return None
    column = f"{cmp.cost}_to_target"
    return pd.DataFrame(
        {
            "cell": cells.cell,
            "best": cells.best_tau,
            "per_seed": cells.best_tau_per_seed,
            "cost": [
                "–" if not math.isfinite(m) else f"{m:.4g} [{lo:.4g}-{hi:.4g}]"
                for m, lo, hi in zip(
                    cells[f"{column}_median"], cells[f"{column}_min"], cells[f"{column}_max"]
                )
            ],
            "verdict": cells.verdict,
        }
    )


TAU_HEADERS = {
    "snr": "SNR",
    "bandwidth": "bandwidth",
    "seeds": "seeds",
    "seeds_reached": "seeds reaching target",
    "best_tau_median": "best tau (median)",
    "best_tau_min": "min",
    "best_tau_max": "max",
}


def versions() -> pd.DataFrame:
    """Python and the libraries a result depends on, as installed where the report was
    made."""
    rows = [("python", platform.python_version()), ("platform", platform.platform())]
    for name in LIBRARIES:
        try:
            rows.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            rows.append((name, "not installed"))
    return pd.DataFrame(rows, columns=["library", "version"])


def _image(name: str, fig: Figure, how: str = "") -> str:
    data = base64.b64encode(png_bytes(fig)).decode("ascii")
    caption = CAPTIONS.get(name, name) + (f" {how[0].upper()}{how[1:]}." if how else "")
    return (
        f'<figure id="fig-{name}"><img alt="{html.escape(caption)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}'
        "</figcaption></figure>"
    )


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>\n{body}\n"


def _scenario_section(res: Results) -> str:
    body = ""
    if res.grid:
        what = "swept" if res.kind == "sweep" else "differing between the runs"
        items = "".join(
            f"<li><code>{html.escape(k)}</code>: "
            f"{html.escape(', '.join(_fmt_value(v) for v in values))}</li>"
            for k, values in res.grid.items()
        )
        body += f"<p>Fields {what}:</p><ul>{items}</ul>"
    if res.scenario_text:
        note = (
            " (the first point's; each point overrides the swept fields)"
            if res.kind == "sweep"
            else " (the first run's)"
            if res.kind == "runs"
            else ""
        )
        body += (
            f"<p>Resolved scenario{note}, every default filled in:</p>"
            f'<pre id="scenario">{html.escape(res.scenario_text)}</pre>'
        )
    return _section("Scenario", body or "<p>No scenario.yaml in the results.</p>")


def render_report(results: ResultsLike, target: float | None = None) -> str:
    """The report as one HTML string."""
    res = as_results(results)
    checked = check_target(target)
    target = res.target() if checked is None else checked
    n_runs = res.records.run_id.nunique()
    sources = ", ".join(str(s) for s in res.sources) or "records in memory"
    title = f"flnet report: {', '.join(s.name for s in res.sources) or 'records'}"
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{html.escape(res.kind)} · {n_runs} run(s) with records · from '
        f"{html.escape(sources)} · made "
        f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')}</p>",
    ]
    failed = res.runs[~res.runs.run_id.isin(res.records.run_id)]
    if len(failed):
        parts.append(
            f"<p>{len(failed)} point(s) left no records: "
            f"{html.escape(', '.join(str(p) for p in failed.run_id))} "
            "(see points.csv).</p>"
        )
    cmp = compare(res, target=target)
    summary = html_table(summary_table(res, cmp), "groups", SUMMARY_HEADERS)
    parts.append(
        _section(
            f"Summary: to {target:.0%} test accuracy",
            summary + "<p>One row per series (runs that differ only in their seed); median "
            "[min-max] over its seeds, costs to target over the seeds that reached it, read "
            "between the two evaluations around the target.</p>",
        )
    )
    choice = choice_table(cmp)
    if choice is not None:
        name = "tau" if cmp.choose == TAU else cmp.choose
        parts.append(
            _section(
                f"Best {name}",
                html_table(choice, "best-choice", {**CHOICE_HEADERS, "best": f"best {name}"})
                + f"<p>Per cell, the {name} with the fewest {cmp.cost} to the target, chosen "
                "seed by seed (paired: the same seed's data and draws); a value that never "
                "reaches it costs infinitely much.</p>",
            )
        )
    if best_tau_applies(res):
        tau = best_tau_table(_sweep_records(res), target)
        headers = {
            **TAU_HEADERS,
            "snr": short_name(tau.attrs["snr"] or "SNR"),
            "bandwidth": short_name(tau.attrs["bandwidth"] or "bandwidth"),
        }
        parts.append(
            _section(
                "Best tau over the radio grid",
                html_table(tau, "best-tau", headers)
                + "<p>Per cell, the tau with the fewest joules to the target "
                "for each seed (a tau that never reaches it costs infinitely "
                "many); its median, min and max over the seeds where some tau "
                "reached it.</p>",
            )
        )
    how = aggregation(res)
    parts.append(
        _section(
            "Figures",
            "\n".join(_image(name, fig, how) for name, fig in figures(res, target).items()),
        )
    )
    parts.append(
        _section("Per run: final figures", html_table(final_table(res), "final", FINAL_HEADERS))
    )
    parts.append(
        _section(
            f"To {target:.0%} test accuracy",
            html_table(target_table(res, target), "to-target", TARGET_HEADERS)
            + "<p>The round of the first evaluation at or above the target; seconds and joules "
            "read between it and the evaluation before; – when never reached.</p>",
        )
    )
    parts.append(_scenario_section(res))
    parts.append(
        _section(
            "Versions",
            html_table(versions(), "versions", {"library": "library", "version": "version"}),
        )
    )
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_report(
    results: ResultsLike, out: str | Path | None = None, target: float | None = None
) -> Path:
    """Write the report to `out` (default: RESULTS/report.html for one results folder),
    atomically; returns its path."""
    res = as_results(results)
    if out is None:
        if len(res.sources) != 1:
            raise ResultsError(
                "several results folders or records in memory: choose where to write the report"
            )
        out = res.sources[0] / "report.html"
    out = Path(out)
    text = render_report(res, target)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out


CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"


def headless_chromium(width: int = 1280, height: int = 900) -> Any:
    """A Selenium driver for the system's Chromium (Debian's chromium and chromium-driver),
    headless. Selenium Manager is never asked to download a browser or a driver."""

    os.environ.setdefault("SE_OFFLINE", "true")
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise ResultsError("a screenshot needs selenium (pip install selenium)") from None
    browser = next((b for b in CHROMIUM if Path(b).exists()), shutil.which("chromium"))
    driver = CHROMEDRIVER if Path(CHROMEDRIVER).exists() else shutil.which("chromedriver")
    if not browser or not driver:
        raise ResultsError(
            "a screenshot needs Chromium and its driver (Debian: apt-get "
            "install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.binary_location = browser
    try:
        return webdriver.Chrome(service=Service(driver), options=options)
    except WebDriverException as e:
        raise ResultsError(f"could not start headless Chromium: {e.msg}") from None


def screenshot(report: str | Path, png: str | Path, width: int = 1280, height: int = 900) -> Path:
    """Open the report in headless Chromium and save what a reader first sees, as a PNG."""
    driver = headless_chromium(width, height)
    try:
        driver.get(Path(report).resolve().as_uri())
        driver.execute_script("return document.readyState")
        png = Path(png)
        png.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(png))
    finally:
        driver.quit()
    return png
