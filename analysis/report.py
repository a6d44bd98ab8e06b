"""``report.md``, ``summary.json`` and plots from one or several run directories.

The same report also as ``report.html`` (``analysis.report_html``, converted from the markdown) and
as ``steps.csv`` + ``requests.csv`` (``analysis.report_csv``), by the formats asked for.

The report opens with the answer at a glance (``analysis.headline``: a paragraph per run, and across
runs which serves the most), then per run a narrow per-step table that fits a 1,280 px page (load,
aggregate and per-user tok/s, TTFT p90, $/Mtok where priced) and the wide one with every figure
below it, then prices and cost (each price with its
source and date, and on what grounds it applies: the type the run ran on, ``--price-as``, or
hypothetical; a run on no known type and without ``--price-as`` gets one "not priced" line and no $
figure), then warnings (counted), the cross-run comparison when several runs are given, and the
definitions of every figure.

Units are one per quantity everywhere (tables, plots, the gate, the ``--ttft-p90`` flags): TTFT and
end-to-end latency in seconds, the per-token gaps (ITL, TPOT) and the start lag in milliseconds; each
header names its unit, and each figure's header says whether higher (↑) or lower (↓) is better.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from tabulate import tabulate

from analysis.budget_section import attach_budgets, budget_section
from analysis.card_limits import card_limits_section
from analysis.ceiling import ceiling_section, explicit_ceiling
from analysis.compare import StepComparison
from analysis.contention import contention_lines
from analysis.cost import gpu_description
from analysis.energy import EnergyPrices
from analysis.energy_plots import energy_plot_files
from analysis.energy_section import energy_section
from analysis.figures import __doc__ as FIGURE_DEFINITIONS
from analysis.goodput import __doc__ as GOODPUT_DEFINITIONS
from analysis.goodput_section import goodput_section
from analysis.headline import DEFINITIONS as GLANCE_DEFINITIONS
from analysis.headline import headline, headline_text
from analysis.intervals import BOOTSTRAP_MAX_N, N_RESAMPLES, Estimate, number
from analysis.plots import write_plots
from analysis.prices import PriceBook
from analysis.repeats_section import between_runs_lines
from analysis.replicas_section import replicas_section
from analysis.report_csv import write_csv
from analysis.report_html import write_html
from analysis.report_model import Report, RunComparison, RunSection, build_section, compare_sections
from analysis.roofline import roofline_section
from analysis.search_section import search_sections
from analysis.sessions_section import sessions_section
from analysis.step import StepFigures
from analysis.summary import SUMMARY_FILE, build_summary, summary_text
from core.errors import AnalysisError, UsageError
from core.instance_types import known_types
from core.lists import format_seconds, parse_choices
from core.rundir import DecodeBytes
from core.rundir.capacity_search import expand_searches
from core.whole_files import unwritten_said_as, write_whole
from core.wording import counted
from core.workload import describe_arrivals, describe_lengths

REPORT_FORMATS = ("md", "html", "csv")
HIGHER, LOWER = "↑", "↓"
LEGEND = (f"Per step, measured window only; 95% intervals in brackets; {HIGHER} higher is better, {LOWER} lower is "
          "better; TTFT and end-to-end latency in seconds (s), ITL, TPOT and start lag in milliseconds (ms).")
ONE_USER_MARK = "¹"


def _ms(estimate: Estimate) -> str:
    """A per-token gap in milliseconds: whole ones, more decimals where the figure needs them (0.245 ms)."""
    if estimate.value is None:
        return f"- (n={estimate.n})"
    scaled = Estimate(
        estimate.value * 1000,
        *(None if v is None else v * 1000 for v in (estimate.low, estimate.high)),
        estimate.n,
        estimate.method,
    )
    return scaled.format(0)


def _s(estimate: Estimate) -> str:
    """A latency in seconds to the millisecond, value [low, high] without n."""
    return _short(estimate, 3)


def _short(estimate: Estimate, digits: int = 1) -> str:
    """value [low, high] without n (n is in its own column)."""
    return estimate.short(digits)


def load_header(open_loop: bool) -> str:
    """The first column of per-step tables: a closed loop steps through users, an open one through rates."""
    return "rate (req/s)" if open_loop else "users"


def load_cell(step: StepFigures) -> int | str:
    return f"{step.rate:g}" if step.rate is not None else step.users


def _counts(counts: Mapping[str, int]) -> str:
    """``timeout 2, http_500 1``; ``0`` for none."""
    return ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "0"


def running_cell(step: StepFigures) -> str:
    """Requests running as the window opened (started in the warm-up or an earlier step), and how they ended."""
    total = sum(step.running_at_start.values())
    return f"{total} ({_counts(step.running_at_start)})" if total else "0"


def step_table(section: RunSection) -> str:
    rows = []
    for step in section.figures.steps:
        rows.append(
            [
                load_cell(step),
                step.requests,
                _counts(step.errors),
                step.interrupted,
                running_cell(step),
                _short(step.aggregate_tok_s),
                _short(step.client_tok_s),
                _short(step.server_tok_s),
                _s(step.ttft_s["p50"]),
                _s(step.ttft_s["p90"]),
                step.ok,
                f"{step.window_seconds:.1f}",
            ]
        )
    headers = [
        load_header(section.figures.open_loop),
        "requests",
        f"errors {LOWER}",
        "interrupted",
        "running as it opened (how they ended)",
        f"aggregate tok/s {HIGHER}",
        f"median per-user tok/s (client) {HIGHER}",
        f"median per-user tok/s (server) {HIGHER}",
        f"TTFT p50 s {LOWER}",
        f"TTFT p90 s {LOWER}",
        "n ok",
        "window s",
    ]
    return tabulate(rows, headers=headers, tablefmt="github")


def one_user_note(step: StepFigures) -> str:
    """Why one user's per-user figure can read above the aggregate, when it does: the two divide by different time."""
    per_user, aggregate = step.per_user_tok_s.value, step.aggregate_tok_s.value
    if step.open_loop or step.users != 1 or per_user is None or aggregate is None or per_user <= aggregate:
        return ""
    return (
        f"{ONE_USER_MARK} At 1 user the per-user figure ({per_user:.1f} tok/s) is above the aggregate "
        f"({aggregate:.1f} tok/s): per-user speed divides a request's tokens by its decode time alone (first token "
        "to last), while the aggregate divides every token by the whole window, which also holds each request's "
        "time to first token and the gap before the next request starts."
    )


def first_price(section: RunSection) -> int | None:
    """The column of the run's own price (the type it ran on, or --price-as), if it is priced."""
    return next((column for column, choice in enumerate(section.prices) if not choice.hypothetical), None)


def glance_table(section: RunSection) -> list[str]:
    """The narrow per-step table that opens a run's section (it fits a 1,280 px page): load, aggregate and
    per-user tok/s, TTFT p90, $/Mtok at the run's own price; a footnote where one user reads above the aggregate."""
    column = first_price(section)
    rows, notes = [], []
    for position, step in enumerate(section.figures.steps):
        note = one_user_note(step)
        notes += [note] if note else []
        per_user = _short(step.per_user_tok_s) + (ONE_USER_MARK if note else "")
        row = [load_cell(step), _short(step.aggregate_tok_s), per_user, _s(step.ttft_s["p90"])]
        if column is not None:
            row.append(_short(section.cost_rows[position][column], 3))
        rows.append(row)
    headers = [load_header(section.figures.open_loop), f"aggregate tok/s {HIGHER}",
               f"median per-user tok/s {HIGHER}", f"TTFT p90 s {LOWER}"]
    if column is not None:
        headers.append(f"$/Mtok {LOWER}")
        notes.append(f"$/Mtok at {section.prices[column].label}; every price applied is in the Cost section.")
    table = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True,
                     colalign=("right", "left", "left", "left", "left")[: len(headers)])
    return [table, *(line for note in notes for line in ("", note))]


def _ms_triple(figure: dict[str, Estimate]) -> str:
    return " / ".join(_ms(figure[p]).rsplit(" n=", 1)[0] for p in ("p50", "p90", "p99")) if figure else "-"


def _s_triple(figure: dict[str, Estimate]) -> str:
    return " / ".join(_s(figure[p]) for p in ("p50", "p90", "p99")) if figure else "-"


def _counter_cell(step: StepFigures) -> str:
    if step.server_counter_tok_s is None:
        return "-"
    if step.server_counter_granularity_tok_s is None:
        return number(step.server_counter_tok_s)
    return f"{number(step.server_counter_tok_s)} ±{number(step.server_counter_granularity_tok_s)}"


def detail_table(section: RunSection) -> str:
    rows = []
    for step in section.figures.steps:
        tokens_per_step = "-" if step.tokens_per_decode_step is None else f"{step.tokens_per_decode_step:.2f}"
        rows.append(
            [
                load_cell(step),
                _s(step.ttft_s["p99"]),
                _ms_triple(step.itl_s),
                _ms_triple(step.tpot_s),
                _s_triple(step.e2e_s),
                number(step.request_rate, 2),
                step.geomean_tok_s.format(1),
                step.server_tok_s_mean.format(1),
                step.draft_acceptance.format(3),
                tokens_per_step,
                _counter_cell(step),
                "-" if step.server_timings_tok_s is None else number(step.server_timings_tok_s),
            ]
        )
    headers = [
        load_header(section.figures.open_loop),
        f"TTFT p99 s {LOWER}",
        f"ITL per chunk p50/p90/p99 ms {LOWER}",
        f"TPOT per token p50/p90/p99 ms {LOWER}",
        f"end-to-end p50/p90/p99 s {LOWER}",
        f"completed requests/s {HIGHER}",
        f"geomean over categories tok/s {HIGHER}",
        f"mean server tok/s {HIGHER}",
        f"draft acceptance {HIGHER}",
        f"tokens/decode step {HIGHER}",
        f"server counter tok/s (± one finished request) {HIGHER}",
        f"server timings tok/s (per token) {HIGHER}",
    ]
    return tabulate(rows, headers=headers, tablefmt="github")


def _lag_ms(lags: dict[str, float | None]) -> str:
    if not lags:
        return "-"
    return " / ".join("-" if lags.get(key) is None else number(lags[key] * 1000) for key in ("p50", "p99", "max"))


def arrivals_table(section: RunSection) -> str:
    """Open loop only: did the load generator keep to its schedule, and did the server keep up."""
    rows = [
        [
            load_cell(step),
            "-" if step.sent_rate is None else number(step.sent_rate, 2),
            number(step.request_rate, 2),
            _lag_ms(step.start_lag_s),
        ]
        for step in section.figures.steps
    ]
    headers = ["offered rate (req/s)", "sent req/s", f"completed req/s {HIGHER}", f"start lag p50/p99/max ms {LOWER}"]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def token_methods_line(section: RunSection) -> str:
    """How the run's output tokens were counted, in requests per method (most exact first)."""
    counts = section.figures.token_methods
    named = {"usage": "usage", "per_chunk": "per-chunk counts", "tokenize": "/tokenize", "chunks": "content chunks"}
    return "Output tokens counted by (requests): " + ", ".join(
        f"{named[method]} {counts.get(method, 0)}" for method in named
    ) + "."


PRICE_FLAGS = {
    "recorded": "",
    "price-as": " (priced as this type because --price-as says so: the run did not run on it)",
    "hypothetical": " **HYPOTHETICAL: this run did not run on this instance type**",
    "given": " (the hourly price given with --usd-per-hour: no instance type or GPU is claimed)",
}


def cost_section(section: RunSection) -> list[str]:
    """The prices applied and what they give; a run that is not priced gets its one line saying why instead
    (above any hypothetical prices: they are not its own)."""
    said = [f"{section.not_priced[0].upper()}{section.not_priced[1:]}."] if section.not_priced else []
    if not section.prices:
        return said or ["No price is known for this run, so $/Mtok and run cost are left out (not zero)."]
    lines = [*said, *([""] if said else []), "Prices applied:", ""]
    for choice in section.prices:
        flag = PRICE_FLAGS[choice.basis]
        gpu = gpu_description(choice.quote.instance_type)
        gpu_text = f" [{gpu}]" if gpu else ""
        lines.append(f"- {choice.label}{gpu_text}: {choice.quote.describe()}{flag}")
    rows = []
    for step, costs in zip(section.figures.steps, section.cost_rows, strict=True):
        rows.append([load_cell(step), _short(step.aggregate_tok_s), *(_short(c, 3) for c in costs)])
    prices = [f"$/Mtok {label} {LOWER}" for label in section.cost_labels]
    headers = [load_header(section.figures.open_loop), f"aggregate tok/s {HIGHER}", *prices]
    lines += ["", tabulate(rows, headers=headers, tablefmt="github"), ""]
    for run_cost in section.run_costs:
        lines.append(
            f"- whole run at {run_cost.price.label}: {number(run_cost.seconds / 3600, 3)} h x "
            f"${number(run_cost.price.quote.usd_per_hour, 4)}/h = ${number(run_cost.usd, 4)} ({run_cost.basis})"
        )
    return lines


def _describe_run(section: RunSection) -> str:
    manifest = section.figures.run.manifest
    rig = manifest.rig
    machine = rig.machine
    described = ", ".join(
        p for p in (machine.cpu_model, counted(machine.cpu_cores, "core") if machine.cpu_cores else "") if p
    )
    where = rig.instance_type or f"local machine {machine.hostname or '(unnamed)'}" + (
        f" ({described})" if described else ""
    )
    if machine.gpu_name:
        where += f", GPU {machine.gpu_name}"
    parts = [f"status {manifest.status}", f"profile {manifest.profile}", f"rig {rig.kind}: {where}"]
    chain = section.figures.run.chain
    if chain:
        parts.insert(1, f"resumed sweep joined from {len(chain)} linked runs ({' + '.join(chain)})")
    if manifest.build is not None and manifest.build.patches:
        patched = ", ".join(f"{patch.name} ({patch.sha256[:12]})" for patch in manifest.build.patches)
        parts.append(f"llama.cpp, patched: {patched}")
    if manifest.model is not None:
        model = manifest.model
        terms = f", under the {model.terms}" if model.terms else ""
        parts.append(f"model {model.label or model.name} ({model.sha256[:12]}{terms})")
    parts.append(f"drafter {manifest.drafter.name}" if manifest.drafter is not None else "no drafter")
    if manifest.server is not None:
        slots = manifest.server.parallel_slots
        parts.append(f"parallel slots {slots}" if slots else "parallel slots unknown (the server has no /slots)")
    if manifest.load is not None:
        load = manifest.load
        parts.append(
            f"load: {counted(load.prompts, 'prompt')}, max_tokens {load.max_tokens}, "
            f"warm-up {load.warmup_seconds:g} s, "
            f"measure {format_seconds(load.measure_seconds)} s per step"
        )
        if load.open_loop:
            rates = ", ".join(f"{rate:g}" for rate in load.rate_steps)
            parts.append(f"open loop: {describe_arrivals(load)} arrivals at {rates} req/s")
        prompts, replies = describe_lengths(load)
        if load.trace is not None or load.prompt_length is not None or load.output_length is not None:
            parts.append(f"prompts {prompts}, replies {replies} tokens")
    return "; ".join(parts)


def _comparison_load(row: StepComparison) -> int | str:
    return f"{row.rate:g}" if row.rate is not None else row.users


def comparison_table(rows: list[StepComparison]) -> str:
    table = [
        [
            _comparison_load(r),
            r.context_tokens,
            r.per_user_ratio.format(3),
            r.aggregate_ratio.format(3),
            r.ttft_p90_ratio.format(3),
            f"{len(r.categories)} ({r.rate_measure})",
        ]
        for r in rows
    ]
    headers = [
        load_header(any(r.rate is not None for r in rows)),
        "context",
        f"per-user tok/s B/A (paired by category) {HIGHER}",
        f"aggregate tok/s B/A {HIGHER}",
        f"TTFT p90 B/A {LOWER}",
        "categories",
    ]
    return tabulate(table, headers=headers, tablefmt="github")


def category_table(rows: list[StepComparison]) -> str:
    categories = sorted({name for row in rows for name in row.per_category})
    table = [
        [_comparison_load(r), *(r.per_category[c].format(3) if c in r.per_category else "-" for c in categories)]
        for r in rows
    ]
    header = load_header(any(r.rate is not None for r in rows))
    return tabulate(table, headers=[header, *(f"{c} B/A {HIGHER}" for c in categories)], tablefmt="github")


def render(report: Report) -> str:
    """report.md's text."""
    lines = [f"# rigbench report: {report.title}", "", "## At a glance", ""]
    for paragraph in headline(report.sections):
        lines += [paragraph, ""]
    lines += search_sections(report.sections)
    lines += between_runs_lines(report.sections)
    for section in report.sections:
        lines += [f"## {section.label}", "", LEGEND, "", *glance_table(section), "", "Every figure per step:", ""]
        lines += [step_table(section), "", _describe_run(section), "", token_methods_line(section), ""]
        if section.figures.open_loop:
            lines += ["### Open-loop arrivals", "", arrivals_table(section), ""]
            lines += ["Latency counts from each request's intended start (t_intended), so the start lag is in it.", ""]
        lines += ["### Cost", ""]
        lines += cost_section(section)
        lines += ["", *roofline_section(section.roofline, load_header(section.figures.open_loop))]
        lines += ceiling_section(section.figures, section.ceiling, load_header(section.figures.open_loop))
        lines += budget_section(section.budget)
        lines += card_limits_section(section, report.sections)
        lines += energy_section(section, report.energy_prices)
        lines += contention_lines(section)
        lines += goodput_section(section)
        lines += replicas_section(section)
        lines += sessions_section(section)
        lines += ["", f"### Warnings ({len(section.warnings)})", ""]
        lines += [f"- {w}" for w in section.warnings] or ["none"]
        lines += ["", "### Latency, decode and drafter detail", "", detail_table(section), ""]
        lines += [
            "ITL is per content chunk, TPOT per token (they differ when a chunk carries several tokens). "
            "Server counter tok/s moves only when a request finishes, so it is a coarse cross-check: ± beside it is "
            "one typical request's tokens over the window; server timings tok/s places each request's "
            "own decode time on the client's clock, a per-token cross-check.",
            "",
        ]
    for comparison in report.comparisons:
        lines += [f"## Comparison: B = {comparison.b} against A = {comparison.a}", "",
                  "Run against run: these intervals hold the noise inside each run only, not how far a second run "
                  "would land (Between runs holds that, where arms ran more than once).", ""]
        lines += [comparison_table(comparison.steps), ""]
        lines += ["Per prompt category (ratio of mean per-user tok/s):", "", category_table(comparison.steps), ""]
    lines += ["## Plots", ""]
    lines += [f"![{p.stem}]({p.relative_to(report.out_dir)})" for p in report.plots]
    lines += ["", "## Definitions", "", FIGURE_DEFINITIONS.split("(the report repeats them):", 1)[1].strip(), ""]
    lines += [GLANCE_DEFINITIONS, ""]
    if any(step.goodput is not None for section in report.sections for step in section.figures.steps):
        lines += [GOODPUT_DEFINITIONS.split("(the report repeats them):", 1)[1].strip(), ""]
    lines += [
        f"Intervals: 95%, scipy.stats.bootstrap (percentile, {N_RESAMPLES} resamples, fixed seed) up to "
        f"{BOOTSTRAP_MAX_N:,} observations; "
        "beyond that order-statistic intervals for percentiles, normal for means, delta method for ratios. "
        "An interval is cut at what the figure can be: no rate, latency, count or cost below 0, no share above 1 "
        "(a normal or delta-method interval, or the aggregate's moved by the edge requests' counts, can reach past "
        "them; the method says where it was cut); a $/Mtok interval whose throughput interval reaches 0 is open "
        "above (∞). Each figure has at least the table's decimals, more where fewer would round it away (at least "
        "one significant digit of its interval's width, two of a value without one). "
        "A figure with nothing behind it is absent (-), not 0: a step every request of which running in its "
        "window failed has no aggregate, $/Mtok or energy per token. "
        "n beside each figure is the number of requests (sub-windows for aggregate tok/s).",
        "",
        "$/Mtok = hourly price / (aggregate output tok/s x 3600) x 1e6; its interval follows from the throughput's.",
        "",
    ]
    return "\n".join(lines)


def default_out_dir(run_dirs: list[Path]) -> Path:
    if len(run_dirs) == 1:
        return run_dirs[0]
    ids = "+".join(sorted(path.resolve().name for path in run_dirs))
    digest = hashlib.sha256(ids.encode()).hexdigest()[:10]
    return run_dirs[0].resolve().parent / "reports" / f"cross-{digest}"


def build_sections(
    run_dirs: list[Path],
    price_as: list[str] | None = None,
    book: PriceBook | None = None,
    decode_bytes: Mapping[str, DecodeBytes] | None = None,
    ceilings: list[Path] | None = None,
    slo: Mapping[str, float] | None = None,
) -> list[RunSection]:
    """``price_as``: the known types a run on no known type counts as (``--price-as``; see
    ``analysis.cost``); ``ceilings``: llama-batched-bench reports to set beside the runs
    (``--ceiling``), besides those found in each run's folders (``analysis.ceiling``); ``slo``: targets
    to judge every step's goodput by (``--slo``), instead of each run's own. A capacity search's folder
    stands for its probes' runs."""
    if not run_dirs:
        raise AnalysisError("no run directory given; pass one or more runs/<run-id> folders")
    price_as = known_types(price_as or [], "--price-as")  # refused before any run is read
    book = book or PriceBook.default()
    named = [explicit_ceiling(path) for path in ceilings or []]
    run_dirs = expand_searches(run_dirs)
    sections = [build_section(Path(path), book, price_as, decode_bytes, named, slo=slo) for path in run_dirs]
    attach_budgets(sections)  # the runs given together pair up to split each one's decode call
    return sections


def parse_formats(text: str, option: str = "--format") -> tuple[str, ...]:
    """``"md,html"`` -> ("md", "html"); ``all`` is every format. Refused before anything is written."""
    chosen = parse_choices(text, option, (*REPORT_FORMATS, "all"), example="md,html,csv")
    return REPORT_FORMATS if "all" in chosen else tuple(name for name in REPORT_FORMATS if name in chosen)


@unwritten_said_as(AnalysisError, "every file is written whole or not at all, so none is cut; free space there, "
                   "or write the report to another folder (rigbench report RUN --out DIR)")
def write_files(sections: list[RunSection], out: Path, formats: Sequence[str] = ("md",),
                comparisons: list[RunComparison] | None = None,
                energy_prices: EnergyPrices | None = None) -> list[Path]:
    """Render already-built sections in ``formats`` (compare with the first run when there are
    several, unless the caller has: ``compare_sections``'s result); summary.json and plots/ are
    written whatever the formats, each file whole or not at all. Returns the report files; a file that
    cannot be written (a full disk) is one ``AnalysisError`` naming it."""
    unknown = sorted(set(formats) - set(REPORT_FORMATS))
    if unknown or not formats:
        found = ", ".join(unknown) or "none"
        raise UsageError(f"report formats: found {found}; expected one or more of {', '.join(REPORT_FORMATS)}")
    if comparisons is None:
        comparisons = compare_sections(sections)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(sections, out / "plots") + energy_plot_files(sections, out / "plots")
    report = Report(sections, comparisons, plots, out, energy_prices)
    markdown = render(report)
    written = []
    if "md" in formats:
        report_path = out / "report.md"
        write_whole(report_path, markdown)
        written.append(report_path)
    write_whole(out / SUMMARY_FILE, summary_text(build_summary(report)))
    if "html" in formats:
        written.append(write_html(markdown, out))
    if "csv" in formats:
        written += write_csv(report)
    return written


def write_sections(sections: list[RunSection], out: Path, formats: Sequence[str] = ("md",),
                   energy_prices: EnergyPrices | None = None) -> Path:
    """As :func:`write_files`; returns the first report file (report.md when ``md`` is asked)."""
    return write_files(sections, out, formats, energy_prices=energy_prices)[0]


def write_report(
    run_dirs: list[Path],
    out_dir: Path | None = None,
    *,
    price_as: list[str] | None = None,
    book: PriceBook | None = None,
    formats: Sequence[str] = ("md",),
    decode_bytes: Mapping[str, DecodeBytes] | None = None,
    energy_prices: EnergyPrices | None = None,
) -> Path:
    """Write report.md (or the other ``formats``), summary.json and plots/; returns the first report file.

    Default ``out_dir``: the run's own directory for one run, ``<runs>/reports/cross-<hash>``
    for several. ``price_as``: the known instance types a run on no known type is priced as (without
    them such a run is not priced). ``decode_bytes``: model summaries by sha256 for runs whose
    manifests record none, so their roofline can be drawn."""
    return write_report_with_headline(run_dirs, out_dir, price_as=price_as, book=book, formats=formats,
                                      decode_bytes=decode_bytes, energy_prices=energy_prices)[0]


def write_report_with_headline(
    run_dirs: list[Path],
    out_dir: Path | None = None,
    *,
    price_as: list[str] | None = None,
    book: PriceBook | None = None,
    formats: Sequence[str] = ("md",),
    decode_bytes: Mapping[str, DecodeBytes] | None = None,
    energy_prices: EnergyPrices | None = None,
) -> tuple[Path, str]:
    """As :func:`write_report`, and the headline the report opens with, as a terminal shows it."""
    run_dirs = [Path(p) for p in run_dirs]
    sections = build_sections(run_dirs, price_as, book, decode_bytes)
    out = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    return write_sections(sections, out, formats, energy_prices), headline_text(sections)
