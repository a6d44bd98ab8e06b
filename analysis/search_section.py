"""The report's capacity search section: the probes of a search, its result and why it stopped.

Why once per report: a search's probes are separate runs (each with its own section below), but
the answer, the most load that met every target, is a reading across them. A report given the
search's folder or any of its probes' runs shows it.
"""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from analysis.goodput_section import reading_cell, target_header, targets_text
from analysis.report_model import RunSection
from core.rundir.capacity_search import STOP_REASONS, CapacitySearch, SearchProbe, search_of_run
from core.wording import counted


def searches_of(sections: list[RunSection]) -> list[tuple[Path, CapacitySearch]]:
    """The capacity searches the sections' runs are probes of, each once, in the sections' order."""
    found: dict[Path, CapacitySearch] = {}
    for section in sections:
        search = search_of_run(section.figures.run.path)
        if search is not None and search[0] not in found:
            found[search[0]] = search[1]
    return list(found.items())


def probe_verdict(probe: SearchProbe) -> str:
    if probe.status != "complete" and not probe.targets:
        return f"failed ({probe.status})"
    return "meets" if probe.meets else "does not meet"


def probe_rows(search: CapacitySearch) -> list[dict[str, object]]:
    rows = []
    for number, probe in enumerate(search.probes, 1):
        row: dict[str, object] = {"probe": number, search.unit: f"{probe.load:g}", "verdict": probe_verdict(probe)}
        for key, target in search.targets.items():
            reading = probe.targets.get(key)
            row[target_header(key, target)] = "-" if reading is None else reading_cell(
                key, reading.value, reading.low, reading.high, reading.verdict)
        row["met every target ↑"] = "-" if probe.met_share is None else f"{probe.met_share:.0%}"
        row["goodput req/s ↑"] = "-" if probe.goodput_req_s is None else f"{probe.goodput_req_s:.2f}"
        row["goodput tok/s ↑"] = "-" if probe.goodput_tok_s is None else f"{probe.goodput_tok_s:,.1f}"
        row["aggregate tok/s ↑"] = "-" if probe.aggregate_tok_s is None else f"{probe.aggregate_tok_s:,.1f}"
        row["errors ↓"] = probe.errors
        row["run"] = probe.run_id
        rows.append(row)
    return rows


def resolution_text(search: CapacitySearch) -> str:
    if search.resolution_relative:
        return f"{search.resolution:.0%} of the bracket's low end"
    return search.load_text(search.resolution)


def result_lines(search: CapacitySearch) -> list[str]:
    """The answer and why the search stopped (or that it has not)."""
    result = search.result
    if result is None:
        return [f"Not finished: {counted(len(search.probes), 'probe')} so far, no result recorded (a probe was running "
                "when it stopped)."]
    if result.largest_meeting is None:
        answer = "No probed load met every target"
    else:
        answer = f"Largest load meeting every target: **{search.load_text(result.largest_meeting)}**"
        if result.reason == "max_load_met":
            answer += " (at least: the largest allowed)"
    if result.smallest_missing is not None:
        answer += f"; smallest not meeting: {search.load_text(result.smallest_missing)}"
    return [f"{answer}.", "", f"Stopped: {STOP_REASONS[result.reason]}: {result.detail}."]


def search_section(folder: Path, search: CapacitySearch) -> list[str]:
    kind = "concurrent users" if search.mode == "users" else "offered requests/s (open loop)"
    limit = f", up to {search.load_text(search.max_load)}" if search.max_load is not None else ""
    lines = [
        f"## Capacity search: {search.search_id}", "",
        f"The most {kind} that met every target: {targets_text(search.targets)}. From "
        f"{search.load_text(search.first_load)} the load doubled until a probe did not meet them{limit}, then "
        f"halved the bracket until it was within {resolution_text(search)}. Each probe is a one-step run (warm-up, "
        "measured window, 95% intervals); it meets only when every target's interval lies within the target and no "
        "measured request failed: unclear (the interval reaching over the target) counts as not meeting.", "",
        *result_lines(search), "",
        tabulate(probe_rows(search), headers="keys", tablefmt="github", disable_numparse=True), "",
        f"Search record: {folder.name}/capacity_search.json.", "",
    ]
    for number, probe in enumerate(search.probes, 1):
        if probe.detail:
            lines.append(f"- probe {number} ({search.load_text(probe.load)}): {probe.detail}")
    return [*lines, ""] if any(probe.detail for probe in search.probes) else lines


def search_sections(sections: list[RunSection]) -> list[str]:
    lines: list[str] = []
    for folder, search in searches_of(sections):
        lines += search_section(folder, search)
    return lines
