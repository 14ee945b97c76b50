"""The reports' figures: curves over rounds, median over seeds with the min-max band, one
panel per setting (`flnet.plot`'s style and seed band)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from flnet.plot import _figure, _style, _styled, seed_band

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@_styled
def curves(
    records: pd.DataFrame,
    y: str,
    series: str,
    panel: str | None = None,
    x: str = "round",
    ylabel: str | None = None,
    log: bool = False,
    logx: bool = False,
) -> Figure:
    """`y` against `x`, one line per value of `series` (median over the runs' seeds, band
    min-max), one panel per value of `panel`. `records` holds every run's records with the
    columns named and ``seed``."""
    panels = list(dict.fromkeys(records[panel])) if panel else [None]
    fig, axes = _figure(ncols=len(panels), width_in=4.6, height_in=3.4)
    for ax, value in zip(axes, panels):
        mine = records if panel is None else records[records[panel] == value]
        names = list(dict.fromkeys(mine[series]))
        for i, name in enumerate(names):
            runs = mine[mine[series] == name]
            per_seed = []
            for _, run in runs.groupby("seed", sort=True):
                run = run[[x, y]].dropna().sort_values(x)
                run = run[np.isfinite(run[y].to_numpy(dtype=float))]
                if len(run):
                    per_seed.append((run[x].to_numpy(float), run[y].to_numpy(float)))
            if not per_seed:
                continue
            gx, med, lo, hi = seed_band(per_seed)
            style = _style(i, len(names))
            ax.plot(gx, med, label=str(name), color=style["color"], ls=style["ls"], lw=1.5)
            ax.fill_between(gx, lo, hi, color=style["color"], alpha=0.15, lw=0)
        if log:
            ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel or y)
        if panel is not None:
            ax.set_title(f"{panel} {value}")
        ax.legend(fontsize="small")
    return fig
