"""The peers study's run: every tool on every load, one at a time, each against a fresh truth server.

A tool that cannot be installed or fails a run leaves its error in its cells and the others go
on; the report is written again after every cell, so an interrupted study keeps what it measured.
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from core.errors import StudyError
from core.whole_files import write_whole
from loadtest.ground_truth import GroundTruthServer
from rigbench.fidelity import read_truth
from rigbench.studies.peers.cells import Cell, compare_cell
from rigbench.studies.peers.cpu_trace import run_measured
from rigbench.studies.peers.loads import Durations, Load, truth_config
from rigbench.studies.peers.peer_venv import PEERS, ensure_peer
from rigbench.studies.peers.report import write_report
from rigbench.studies.peers.tools import PEER_TOOLS, RigbenchTool, ToolAdapter, ToolRun

RUN_TIMEOUT_MARGIN_SECONDS = 180  # past its load time a tool may take this long to start and write its results


class PeerComparison:
    """The tools of one comparison, each installed once, and the runs of each against each load."""

    def __init__(self, out: Path, durations: Durations, cache: Path, tools: Sequence[str]):
        self.out = out
        self.durations = durations
        self.cache = cache
        self.tools = list(tools)
        self.adapters: dict[str, ToolAdapter] = {RigbenchTool.name: RigbenchTool()}
        self.install_errors: dict[str, str] = {}
        self.versions: dict[str, str | None] = {}

    def say(self, message: str) -> None:
        print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)

    def install(self) -> None:
        self.versions[RigbenchTool.name] = self.adapters[RigbenchTool.name].version()
        for name in self.tools:
            if name not in PEERS:
                continue
            try:
                adapter = PEER_TOOLS[name](ensure_peer(PEERS[name], self.cache, self.say))
                self.adapters[name] = adapter
                self.versions[name] = adapter.version()
            except Exception as error:  # noqa: BLE001 - a peer that cannot install is reported, not fatal
                self.install_errors[name] = f"install failed: {error}"
                self.say(f"{name}: {self.install_errors[name]}")

    def run_cell(self, tool: str, load: Load) -> Cell:
        if tool in self.install_errors:
            return Cell(tool, load.name, ok=False, error=self.install_errors[tool])
        folder = self.out / "raw" / load.slug / tool
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        truth_log = folder / "truth.jsonl"
        loadavg = list(os.getloadavg())
        timeout = self.durations.seconds + RUN_TIMEOUT_MARGIN_SECONDS
        command: list[str] | None = None
        try:
            adapter = self.adapters[tool]
            with GroundTruthServer(truth_config(load), truth_log) as server:
                run = ToolRun(server.base_url, load, self.durations, folder)
                command = adapter.command(run)
                self.say(f"{load.name}: {tool}")
                outcome = run_measured(command, adapter.cwd(run), folder / "tool.log", timeout, adapter.env())
            if outcome.timed_out:
                raise StudyError(f"ran past {timeout:g} s and was stopped")
            if outcome.returncode != 0:
                raise StudyError(f"exit {outcome.returncode}: {_last_lines(outcome.log_tail)}")
            cell = compare_cell(tool, load, adapter.read(run), read_truth(truth_log), outcome.cpu)
            cell.wall_seconds = outcome.seconds
        except Exception as error:  # noqa: BLE001 - one failed run must not lose the others
            write_whole(folder / "error.txt", traceback.format_exc())
            cell = Cell(tool, load.name, ok=False, error=f"{type(error).__name__}: {error}"[:300])
        cell.loadavg_before = loadavg
        cell.command = command
        return cell


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-n:])[-300:]


def run_peers(out: Path, loads: Sequence[Load], tools: Sequence[str], durations: Durations, peers_cache: Path,
              command: str) -> str:
    """Every tool on every load; results.json and README.md in ``out`` (rewritten after each cell); the table."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    comparison = PeerComparison(out, durations, peers_cache, tools)
    comparison.install()
    cells: dict[tuple[str, str], Cell] = {}

    def report(done: Sequence[Load]) -> str:
        return write_report(out, done, cells, tools=comparison.tools, durations=durations,
                            versions=comparison.versions, install_errors=comparison.install_errors,
                            command=command, started=started)

    for done, load in enumerate(loads, 1):
        for tool in tools:
            cells[(tool, load.slug)] = cell = comparison.run_cell(tool, load)
            if not cell.ok:
                comparison.say(f"{load.name}: {tool} failed: {cell.error}")
            report(loads[:done])
    return report(loads)
