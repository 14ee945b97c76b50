"""A paper's reproduction report: one row per claim of the paper, the paper's figure beside
ours, written as markdown (for the documentation) and as one self-contained HTML file.

Every row names what produced it (the scenario, the seeds and the command), says whether the
paper's qualitative claim holds seed by seed (`flnet.analysis.per_seed`), and, where it does
not, why we think so.
"""

from __future__ import annotations

import base64
import datetime
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from flnet.analysis import per_seed
from flnet.plot import png_bytes, save_figure
from flnet.report import CSS, html_table, versions

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Claim:
    """One claim of a paper, checked."""

    id: str  # the digest's name for it: C1, A, D2, ...
    claim: str  # what the paper says, qualitatively
    paper: str  # the paper's own figure, with where it is (table, figure)
    ours: str  # median [min-max] over seeds (`flnet.analysis.median_range`)
    holds: str  # "holds", "does not hold", "holds in k of n seeds" (`flnet.analysis.per_seed`)
    seeds_detail: str  # per_seed's detail: undecided seeds named
    scenario: str  # the scenario file and the overrides of this row
    seeds: list[int]
    why: str = ""  # where it does not hold: why we think so (scale, missing detail, erratum)
    figure: str = ""  # the name of the figure that shows it, if any
    command: str = ""  # what produces it, when not the report's command (a row not run here)


@dataclass
class PaperReport:
    """Everything a paper's report shows."""

    paper: str  # the key: oledfl, block_cyclic, ...
    title: str
    reference: str  # authors, venue
    command: str  # the command that produced it
    setup: str  # markdown: the paper's setup, ours, and the scenario files
    claims: list[Claim]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # supporting tables
    data: dict[str, pd.DataFrame] = field(default_factory=dict)  # written as CSV, not shown
    figures: dict[str, tuple[Figure, str]] = field(default_factory=dict)  # name: (fig, caption)
    notes: list[str] = field(default_factory=list)
    smoke: bool = False


CLAIM_HEADERS = {
    "id": "claim",
    "claim": "what the paper says",
    "paper": "paper's figure",
    "ours": "ours: median [min-max] over seeds",
    "holds": "holds?",
    "why": "where it fails: why we think so",
    "scenario": "scenario",
    "seeds": "seeds",
    "command": "command",
}


def claims_table(report: PaperReport) -> pd.DataFrame:
    rows = [
        {
            "id": c.id,
            "claim": c.claim,
            "paper": c.paper,
            "ours": c.ours,
            "holds": c.seeds_detail if "undecided" in c.seeds_detail else c.holds,
            "why": c.why or "–",
            "scenario": c.scenario,
            "seeds": ", ".join(str(s) for s in c.seeds),
            "figure": c.figure,
            "command": c.command or report.command,
        }
        for c in report.claims
    ]
    return pd.DataFrame(rows, columns=[*CLAIM_HEADERS, "figure"])


def _md_cell(value: object) -> str:
    text = "–" if value is None or (isinstance(value, float) and value != value) else str(value)
    if isinstance(value, float):
        text = f"{value:.4g}"
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def markdown_table(df: pd.DataFrame, headers: dict[str, str] | None = None) -> str:
    headers = headers or {c: str(c) for c in df.columns}
    cols = [c for c in headers if c in df]
    lines = [
        "| " + " | ".join(headers[c] for c in cols) + " |",
        "|" + "---|" * len(cols),
    ]
    lines += [
        "| " + " | ".join(_md_cell(v) for v in row) + " |"
        for row in df[cols].itertuples(index=False)
    ]
    return "\n".join(lines)


def _headline(report: PaperReport) -> str:
    checked_here = [c for c in report.claims if c.holds != "not run here"]
    n = len(checked_here)
    held = sum(c.holds == "holds" for c in checked_here)
    partly = sum(c.holds.startswith("holds in") for c in checked_here)
    text = (
        f"{held} of {n} claims hold in every seed, {partly} in some seeds, "
        f"{n - held - partly} in none."
    )
    elsewhere = len(report.claims) - n
    return text + (f" {elsewhere} more not run by this command." if elsewhere else "")


def render_markdown(report: PaperReport) -> str:
    parts = [
        f"# {report.title}",
        "",
        f"*{report.reference}*",
        "",
        f"Produced by `{report.command}`"
        + (" (**smoke run**: the tiniest version, not a result)" if report.smoke else "")
        + f". {_headline(report)}",
        "",
        "## Setup",
        "",
        report.setup.strip(),
        "",
        "## Claims",
        "",
        "Each row: the paper's figure, ours (median [min-max] over the seeds listed; runs without"
        " a figure are counted by how they ended), and whether the paper's qualitative claim "
        "holds seed by seed. Each row names the command that produced it.",
        "",
        markdown_table(claims_table(report), CLAIM_HEADERS),
        "",
    ]
    for name, (_, caption) in report.figures.items():
        parts += [f"![{caption}]({name}.png)", "", f"*{caption}*", ""]
    for name, df in report.tables.items():
        parts += [f"## Table: {name}", "", markdown_table(df), "", f"(`{name}.csv`)", ""]
    if report.notes:
        parts += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
    if report.data:
        parts += [
            "Per-run tables (CSV beside this report): "
            + ", ".join(f"`{name}.csv`" for name in report.data)
            + ".",
            "",
        ]
    return "\n".join(parts)


def render_html(report: PaperReport) -> str:
    made = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    claims = claims_table(report)
    body = [
        f"<h1>{html.escape(report.title)}</h1>",
        f'<p class="meta">{html.escape(report.reference)} · produced by '
        f"<code>{html.escape(report.command)}</code>"
        + (" · <b>smoke run</b>" if report.smoke else "")
        + f" · made {made}</p>",
        f"<p>{html.escape(_headline(report))}</p>",
        "<h2>Setup</h2>",
        f"<pre>{html.escape(report.setup.strip())}</pre>",
        "<h2>Claims</h2>",
        html_table(claims, "claims", CLAIM_HEADERS),
    ]
    if report.figures:
        body.append("<h2>Figures</h2>")
        for name, (fig, caption) in report.figures.items():
            data = base64.b64encode(png_bytes(fig)).decode("ascii")
            body.append(
                f'<figure id="fig-{name}"><img alt="{html.escape(caption)}" '
                f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}'
                "</figcaption></figure>"
            )
    for name, df in report.tables.items():
        body += [
            f"<h2>Table: {html.escape(name)}</h2>",
            html_table(df, name, {str(c): str(c) for c in df.columns}),
        ]
    if report.notes:
        body.append("<h2>Notes</h2><ul>")
        body += [f"<li>{html.escape(n)}</li>" for n in report.notes]
        body.append("</ul>")
    body += [
        "<h2>Versions</h2>",
        html_table(versions(), "versions", {"library": "library", "version": "version"}),
    ]
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(report.title)}</title><style>{CSS}</style></head>"
        f"<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write(report: PaperReport, out: str | Path) -> dict[str, Path]:
    """Write the report under `out`: report.md, report.html, claims.csv, each supporting
    table as CSV and each figure as PNG. Returns the written paths by name."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (fig, _) in report.figures.items():
        written[name] = save_figure(fig, out / f"{name}.png")
    for name, df in {**report.tables, **report.data}.items():
        df.to_csv(out / f"{name}.csv", index=False)
        written[name + ".csv"] = out / f"{name}.csv"
    claims_table(report).to_csv(out / "claims.csv", index=False)
    written["claims.csv"] = out / "claims.csv"
    for name, text in (
        ("report.md", render_markdown(report)),
        ("report.html", render_html(report)),
    ):
        tmp = out / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out / name)
        written[name] = out / name
    return written


def checked(
    id: str,
    claim: str,
    paper: str,
    ours: str,
    holds: pd.Series,
    scenario: str,
    seeds: list[int],
    why_not: str = "",
    figure: str = "",
    undecided: str = "a run it needs did not complete",
) -> Claim:
    """A claim decided seed by seed: `holds` is True, False or None (undecided) per seed; the
    row's `why` is `why_not` unless the claim holds in every seed, or, where it holds in every
    seed it decides, why the others are undecided (`undecided`)."""
    seedwise = pd.Series(list(holds), dtype=object)
    verdict, detail = per_seed(seedwise)
    if verdict != "holds" and seedwise.dropna().astype(bool).all() and seedwise.isna().any():
        n = int(seedwise.isna().sum())
        why_not = f"holds in every seed it decides; {n} undecided: {undecided}"
    return Claim(
        id=id,
        claim=claim,
        paper=paper,
        ours=ours,
        holds=verdict,
        seeds_detail=detail,
        scenario=scenario,
        seeds=list(seeds),
        why="" if verdict == "holds" else why_not,
        figure=figure,
    )


def publish(report_dir: str | Path, docs_dir: str | Path) -> Path:
    """Copy a written report (`write`'s folder, named after its paper) into the documentation:
    DOCS/<paper>.md with its figures under DOCS/<paper>/, the figure links rewritten to
    match. Returns the page."""
    src, docs = Path(report_dir), Path(docs_dir)
    paper = src.name
    figures = docs / paper
    figures.mkdir(parents=True, exist_ok=True)
    text = (src / "report.md").read_text(encoding="utf-8")
    for png in sorted(src.glob("*.png")):
        (figures / png.name).write_bytes(png.read_bytes())
        text = text.replace(f"]({png.name})", f"]({paper}/{png.name})")
    page = docs / f"{paper}.md"
    page.write_text(text, encoding="utf-8")
    return page
