"""One unit per quantity: TTFT and end-to-end latency in seconds in every table, plot, gate row and flag."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from analysis.gate import TTFT_P90
from analysis.gate_output import figure_header
from analysis.plots import PLOTS
from analysis.report import write_report
from rigbench.cli import app
from rigbench.decode_bytes import decode_bytes_for_runs

RUNS = Path(__file__).resolve().parents[2] / "runs"
RUN = RUNS / "gpu-h200-study-2026-11-30/runs/20261130T062207Z-gemma4-e2b-e2b-best-0bae"
SECONDS = ("TTFT", "end-to-end")


def header_cells(markdown: str) -> list[str]:
    """Every cell of every table's header row (the row above a |---| line)."""
    lines = markdown.splitlines()
    return [cell.strip() for above, line in zip(lines, lines[1:], strict=False) if line.startswith("|--")
            for cell in above.strip("|").split("|")]


def test_the_reports_latency_headers_are_in_seconds_and_say_which_way_is_better(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    run = shutil.copytree(RUN, tmp_path / RUN.name, ignore=shutil.ignore_patterns("plots", "report.md"))
    markdown = write_report([run], decode_bytes=decode_bytes_for_runs([run], [])).read_text()
    latency = [cell for cell in header_cells(markdown) if cell.startswith(SECONDS)]
    # TTFT p90 in the narrow table; p50 and p90 in the wide one; p99 and end-to-end in the detail table
    assert latency == ["TTFT p90 s ↓", "TTFT p50 s ↓", "TTFT p90 s ↓", "TTFT p99 s ↓", "end-to-end p50/p90/p99 s ↓"]
    assert not re.search(r"(TTFT|end-to-end)[^|\n.;,]*\bms\b", markdown)  # nor in a sentence or a cell
    assert "TTFT and end-to-end latency in seconds (s), ITL, TPOT and start lag in milliseconds (ms)" in markdown
    for cell in header_cells(markdown):
        if cell.startswith(("ITL", "TPOT")):
            assert re.search(r"\bms ↓$", cell), cell


def test_the_plot_the_gate_and_the_flags_read_ttft_in_seconds() -> None:
    assert PLOTS["ttft_p90"].ylabel == "TTFT p90 (s)"
    assert figure_header(TTFT_P90) == "TTFT p90 (s)" and TTFT_P90.scale == 1.0
    runner = CliRunner()
    for command, flag in (("plan", "--ttft-p90"), ("gate", "--max-ttft-p90")):
        shown = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "240"}).output.split())
        said = shown.split(flag, 1)[1][:160]
        assert "seconds" in said and " ms" not in said, said
