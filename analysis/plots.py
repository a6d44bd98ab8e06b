"""Slide-ready PNG plots against the offered load, one line per run, 95% intervals as error bars.

The x axis is the user count for closed-loop runs and the offered rate (requests/s) for open-loop
ones. A report that holds both kinds draws each kind in its own files (``<name>.png`` for the
user runs, ``<name>-by-rate.png`` for the rate runs): the two loads share no axis.
matplotlib runs on the Agg backend (no display on a rig or in CI). The $/Mtok plot has one
line per run and price (on-demand, spot, --price-as and hypothetical types, a --usd-per-hour price),
labelled as in the report, so a price of hardware that did not measure the run names the machine
that did ("g6e.xlarge on-demand (--price-as), measured on CPU (2 cores)", ``analysis.cost``): a run
keeps its colour and marker in every plot, a price has its own line style. When no
run is priced there is no $/Mtok plot (the overview's panel says "not priced"): an empty axis
would read as a price of zero or a failed draw.

Each plot's title says whether higher or lower is better, its axis the unit (TTFT in seconds, as
in the report's tables), and its legend names each run by model, machine and arm
(``analysis.run_name``).

``overview.png`` puts the four plots on one 2x2 sheet: the one picture a slide about a run needs.

Why these sizes and colours: 8 x 4.8 inches at 150 dpi is 1,200 x 720 px, sharp when projected,
while a palette PNG stays a few tens of kB (run folders are committed: every byte is kept forever).
The palette is Okabe-Ito, which readers with the common colour-vision deficiencies tell apart,
and every line has its own marker as well, so a grey print still separates the runs. The y axes
start at zero: a slide that cuts the axis makes a small difference look large.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from PIL import Image  # noqa: E402

from analysis.intervals import Estimate  # noqa: E402
from analysis.report_model import RunSection  # noqa: E402
from analysis.run_name import run_names  # noqa: E402
from core.whole_files import whole_file  # noqa: E402

Points = list[tuple[float, Estimate]]
X_LABELS = {False: "concurrent users", True: "offered load (requests/s)"}
DPI = 150
SINGLE_SIZE = (8.0, 4.8)  # inches: 1,200 x 720 px at DPI
OVERVIEW_SIZE = (12.0, 8.0)  # 1,800 x 1,200 px
# Okabe-Ito, black first and yellow last (yellow lines are faint on white).
PALETTE = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
PRICE_STYLES = ("-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
STYLE = {"font.size": 10, "axes.titlesize": 12, "axes.labelsize": 10, "legend.fontsize": 8}
OVERVIEW = "overview"


@dataclass(frozen=True)
class PlotSpec:
    """What one plot shows: its title and its y axis with the unit."""

    title: str
    ylabel: str


@dataclass(frozen=True)
class Line:
    """One line: its run sets colour and marker (the same in every plot), its price the line style."""

    run: int
    price: int
    points: Points


NO_DATA = "no data (see the report's warnings)"
PLOTS = {
    "aggregate_tok_s": PlotSpec("Aggregate output throughput (higher is better)", "aggregate output tokens (tok/s)"),
    "per_user_tok_s": PlotSpec("Per-user decode speed (higher is better)", "median per-user decode (tok/s)"),
    "ttft_p90": PlotSpec("Time to first token, 90th percentile (lower is better)", "TTFT p90 (s)"),
    "usd_per_mtok": PlotSpec("Cost per million output tokens (lower is better)",
                             "cost (USD per million output tokens)"),
}


def legend_labels(sections: list[RunSection]) -> list[str]:
    """Each run named by its model, machine and arm (``analysis.run_name``), not its id: a legend that
    says "local 703c" sends the reader to the manifest to learn what the line measured."""
    return run_names([section.figures.run.manifest for section in sections])


def price_labels(sections: list[RunSection]) -> list[str]:
    """Every price any of the runs is priced at, in order of first appearance (one line style each)."""
    return list(dict.fromkeys(label for section in sections for label in section.cost_labels))


def _empty_text(group: list[RunSection], name: str) -> str:
    if name == "usd_per_mtok" and not price_labels(group):
        return "not priced (see the report's Cost section)"
    return NO_DATA


def _per_user(section: RunSection) -> Points:
    return [(step.load, step.per_user_tok_s) for step in section.figures.steps]


def _lines(sections: list[RunSection], name: str) -> list[Line]:
    if name == "aggregate_tok_s":
        return [Line(i, 0, [(st.load, st.aggregate_tok_s) for st in s.figures.steps]) for i, s in enumerate(sections)]
    if name == "per_user_tok_s":
        return [Line(i, 0, _per_user(s)) for i, s in enumerate(sections)]
    if name == "ttft_p90":
        return [Line(i, 0, [(st.load, st.ttft_s["p90"]) for st in s.figures.steps]) for i, s in enumerate(sections)]
    prices = price_labels(sections)
    lines = []
    for run, section in enumerate(sections):
        for column, label in enumerate(section.cost_labels):
            points = [(st.load, row[column]) for st, row in zip(section.figures.steps, section.cost_rows, strict=True)]
            lines.append(Line(run, prices.index(label), points))
    return lines


def _colour(run: int) -> str:
    return PALETTE[run % len(PALETTE)]


def _marker(run: int) -> str:
    return MARKERS[run % len(MARKERS)]


def _price_style(price: int) -> str | tuple:
    return PRICE_STYLES[price % len(PRICE_STYLES)]


def _draw_on(axes, spec: PlotSpec, lines: list[Line], open_loop: bool, empty: str = NO_DATA) -> None:
    """One plot on ``axes`` (the legend is the figure's, shared by all its plots); ``empty`` is said on an
    axes without a line."""
    ticks: set[float] = set()
    for line in lines:
        kept = [(users, e) for users, e in line.points if e.value is not None]
        if not kept:
            continue
        xs = [users for users, _ in kept]
        ys = [e.value for _, e in kept]
        # A bootstrap interval can sit wholly on one side of a skewed estimate; matplotlib
        # wants non-negative arm lengths, so such an arm is drawn as zero.
        below = [max(0.0, e.value - (e.low if e.low is not None else e.value)) for _, e in kept]
        above = [max(0.0, (e.high if e.high is not None else e.value) - e.value) for _, e in kept]
        axes.errorbar(
            xs,
            ys,
            yerr=[below, above],
            color=_colour(line.run),
            marker=_marker(line.run),
            linestyle=_price_style(line.price),
            capsize=3,
            linewidth=1.6,
        )
        ticks.update(xs)
    if ticks:
        axes.set_xscale("log", base=2)
        axes.set_xticks(sorted(ticks), [f"{t:g}" for t in sorted(ticks)])
        axes.minorticks_off()
        axes.set_ylim(bottom=0)
    else:
        axes.text(0.5, 0.5, empty, ha="center", transform=axes.transAxes)
        axes.set_xticks([])  # an empty axis's 0..1 would read as figures
        axes.set_yticks([])
    axes.set_title(spec.title)
    axes.set_xlabel(X_LABELS[open_loop])
    axes.set_ylabel(spec.ylabel)
    axes.grid(True, alpha=0.3)


def _legend(figure, sections: list[RunSection], with_prices: bool) -> None:
    """Below the plots: one entry per run (colour, marker), then one per price (line style)."""
    handles = [
        Line2D([], [], color=_colour(run), marker=_marker(run), linewidth=1.6, label=label)
        for run, label in enumerate(legend_labels(sections))
    ]
    if with_prices:
        handles += [
            Line2D([], [], color="0.35", linestyle=_price_style(price), linewidth=1.6, label=label)
            for price, label in enumerate(price_labels(sections))
        ]
    if handles:
        figure.legend(handles=handles, loc="outside lower center", ncols=1 if len(handles) < 3 else 2, frameon=False)


def _save(figure, path: Path) -> None:
    """A palette PNG: a plot has few colours, and 256 of them keep every line's exact colour and
    its anti-aliased edges at about a third of the bytes of full colour (no dithering: flat areas
    stay flat and compress)."""
    figure.canvas.draw()  # the pixels as savefig would draw them, without encoding a PNG only to decode it
    image = Image.frombuffer("RGBA", figure.canvas.get_width_height(physical=True), figure.canvas.buffer_rgba(),
                             "raw", "RGBA", 0, 1).convert("RGB")
    plt.close(figure)
    palette = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    with whole_file(path, "wb") as handle:  # a full disk leaves no cut PNG (core.whole_files)
        palette.save(handle, format="PNG", optimize=True)


def _draw(path: Path, name: str, group: list[RunSection], open_loop: bool) -> None:
    with plt.rc_context(STYLE):
        figure, axes = plt.subplots(figsize=SINGLE_SIZE, dpi=DPI, layout="constrained")
        _draw_on(axes, PLOTS[name], _lines(group, name), open_loop)
        _legend(figure, group, with_prices=name == "usd_per_mtok")
        _save(figure, path)


def draw_lines(path: Path, spec: PlotSpec, lines: list[tuple[str, Points]], open_loop: bool = False) -> None:
    """One plot of labelled lines in the report's style (for figures that are not a run's own,
    such as a study's arms side by side): the same axes, palette, markers, intervals and PNG."""
    with plt.rc_context(STYLE):
        figure, axes = plt.subplots(figsize=SINGLE_SIZE, dpi=DPI, layout="constrained")
        _draw_on(axes, spec, [Line(run, 0, points) for run, (_, points) in enumerate(lines)], open_loop)
        handles = [Line2D([], [], color=_colour(run), marker=_marker(run), linewidth=1.6, label=label)
                   for run, (label, _) in enumerate(lines)]
        if handles:
            figure.legend(handles=handles, loc="outside lower center", ncols=1 if len(handles) < 3 else 2,
                          frameon=False)
        _save(figure, path)


def _sheet_title(group: list[RunSection]) -> str:
    return legend_labels(group)[0] if len(group) == 1 else f"{len(group)} runs"


def _draw_overview(path: Path, group: list[RunSection], open_loop: bool) -> None:
    with plt.rc_context(STYLE):
        figure, grid = plt.subplots(2, 2, figsize=OVERVIEW_SIZE, dpi=DPI, layout="constrained")
        for axes, (name, spec) in zip(grid.flat, PLOTS.items(), strict=True):
            _draw_on(axes, spec, _lines(group, name), open_loop, _empty_text(group, name))
        _legend(figure, group, with_prices=True)
        figure.suptitle(f"rigbench: {_sheet_title(group)}", fontsize=14)
        _save(figure, path)


def write_plots(sections: list[RunSection], folder: Path) -> list[Path]:
    """The overview sheet then every single plot; user runs and rate runs in separate files when both are given."""
    folder.mkdir(parents=True, exist_ok=True)
    closed = [s for s in sections if not s.figures.open_loop]
    opened = [s for s in sections if s.figures.open_loop]
    groups = [(closed, False, ""), (opened, True, "-by-rate" if closed else "")]
    written = []
    for group, open_loop, suffix in groups:
        if not group and (open_loop or opened):
            continue
        overview = folder / f"{OVERVIEW}{suffix}.png"
        _draw_overview(overview, group, open_loop)
        written.append(overview)
        for name in PLOTS:
            if name == "usd_per_mtok" and not price_labels(group):
                continue  # no run is priced: no $ plot (the report says why), rather than an empty one
            path = folder / f"{name}{suffix}.png"
            _draw(path, name, group, open_loop)
            written.append(path)
    return written
