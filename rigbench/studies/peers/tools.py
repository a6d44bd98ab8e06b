"""The three tools the peers study drives, one adapter each: its command line and the reader of its figures.

rigbench runs as the CLI a user runs (``rigbench sweep``) from the repository root and is read
from its run directory through ``analysis``, as ``rigbench report`` reads it; servebench and
guidellm run from their own virtualenvs (``peer_venv``) and are read from their result files.
Every figure keeps the tool's own meaning (``ToolReport.itl_unit``: per chunk or per token).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from analysis.figures import run_figures
from analysis.load import load_run
from core.errors import StudyError
from core.whole_files import whole_file
from rigbench.own_command import rigbench_program
from rigbench.studies.peers.loads import MODEL, REPLY_TOKENS, Durations, Load
from rigbench.studies.peers.peer_venv import installed_version, peer_env

ROOT = Path(__file__).resolve().parents[3]  # the repository: rigbench runs from here
TOOLS = ("rigbench", "servebench", "guidellm")
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


@dataclass
class ToolReport:
    """A tool's own figures for one run, in its own meaning (``itl_unit``: chunk or token)."""

    ttft_p50_ms: float | None
    tok_s: float | None
    itl_p50_ms: float | None
    itl_unit: str
    tpot_p50_ms: float | None
    window: tuple[float, float] | None = None  # the tool's measured span in unix time, if it says
    load_start: float | None = None  # when the tool's load (warm-up included) began, if it says
    requests_ok: int | None = None
    requests_failed: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToolRun:
    """One tool on one load: the truth server it drives and the folder its files go in."""

    base_url: str
    load: Load
    durations: Durations
    folder: Path


class ToolAdapter(Protocol):
    """How the runner drives one tool: where and how it runs, and how its figures are read after."""

    name: ClassVar[str]

    def command(self, run: ToolRun) -> list[str]: ...

    def cwd(self, run: ToolRun) -> Path: ...

    def env(self) -> dict[str, str] | None: ...

    def read(self, run: ToolRun) -> ToolReport: ...

    def version(self) -> str | None: ...


def _p50_ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def rigbench_command(base_url: str, load: Load, durations: Durations, runs_dir: Path) -> list[str]:
    program = rigbench_program()
    offered = ["--steps", str(load.users)] if load.rate is None else [
        "--rates", f"{load.rate:g}", "--arrival", "poisson", "--arrival-seed", "1"]
    return [
        *program, "sweep", "--url", base_url, *offered,
        "--warmup", f"{durations.warmup:g}", "--measure", f"{durations.measure:g}",
        "--max-tokens", str(REPLY_TOKENS), "--ignore-eos", "--runs-dir", str(runs_dir), "--timeline",
        "--model-name", MODEL, "--no-progress",
    ]  # fmt: skip


def parse_rigbench(run_path: Path) -> ToolReport:
    """A rigbench run directory through the analysis package, as ``rigbench report`` reads it:
    aggregate tok/s over the measured window, TTFT p50, ITL p50 (each request's mean gap between
    content chunks), TPOT p50 (each request's decode span over the tokens after its first chunk)."""
    figures = run_figures(load_run(run_path))
    step = figures.steps[0]
    return ToolReport(
        ttft_p50_ms=_p50_ms(step.ttft_s["p50"].value),
        tok_s=step.aggregate_tok_s.value,
        itl_p50_ms=_p50_ms(step.itl_s["p50"].value),
        itl_unit="chunk",
        tpot_p50_ms=_p50_ms(step.tpot_s["p50"].value),
        window=(step.window_start, step.window_end),
        load_start=figures.run.manifest.steps[0].started_at,
        requests_ok=step.ok,
        requests_failed=step.error_count,
        notes=list(figures.warnings),
    )


class RigbenchTool:
    """This rigbench, as a user runs it: ``rigbench sweep`` against the truth server."""

    name: ClassVar[str] = "rigbench"

    def command(self, run: ToolRun) -> list[str]:
        return rigbench_command(run.base_url, run.load, run.durations, run.folder / "runs")

    def cwd(self, run: ToolRun) -> Path:
        return ROOT

    def env(self) -> dict[str, str] | None:
        return None

    def read(self, run: ToolRun) -> ToolReport:
        runs = run.folder / "runs"
        made = sorted(p for p in runs.iterdir() if (p / "manifest.json").exists())
        if len(made) != 1:
            raise StudyError(f"expected one run directory in {runs}, found {len(made)}")
        return parse_rigbench(made[0])

    def version(self) -> str | None:
        try:
            version = importlib.metadata.version("rigbench")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=False).stdout.strip()
        return f"{version} ({commit})" if commit else version


def servebench_command(venv: Path, base_url: str, load: Load, durations: Durations, out: Path) -> list[str]:
    offered = ["--concurrency", str(load.users)] if load.rate is None else [
        "--rate", f"{load.rate:g}", "--arrival-dist", "poisson"]
    return [
        str(venv / "bin" / "servebench"), "run", "--url", f"{base_url}/v1", "--model", MODEL,
        *offered, "--duration", f"{durations.seconds:g}",
        "--output-len", str(REPLY_TOKENS), "--ignore-eos", "--warmup", "0", "--no-gpu",
        "--seed", "1", "--input-len", "32", "--timeout", "60", "--out", str(out),
    ]  # fmt: skip


def parse_servebench(run_json: dict) -> ToolReport:
    """servebench's ``run.json``: one level; times in seconds; ITL is the gap between content
    chunks, TPOT (e2e - ttft) / (output tokens - 1), output tok/s over the level's duration."""
    level = run_json["levels"][0]
    summary = level["summary"]
    return ToolReport(
        ttft_p50_ms=_p50_ms(summary["ttft"].get("p50")),
        tok_s=summary.get("output_throughput"),
        itl_p50_ms=_p50_ms(summary["itl"].get("p50")),
        itl_unit="chunk",
        tpot_p50_ms=_p50_ms(summary["tpot"].get("p50")),
        requests_ok=summary.get("completed"),
        requests_failed=summary.get("failed"),
        notes=[f"duration {level.get('duration', 0):.2f} s (in-flight requests finish)"],
    )


@dataclass(frozen=True)
class VirtualenvTool:
    """A peer installed in its own virtualenv: run there, from the run's folder, with the virtualenv's
    environment; its version is what that virtualenv has installed."""

    venv: Path
    name: ClassVar[str]

    def cwd(self, run: ToolRun) -> Path:
        return run.folder

    def env(self) -> dict[str, str] | None:
        return peer_env(self.venv)

    def version(self) -> str | None:
        return installed_version(self.venv / "bin" / "python", self.name)


@dataclass(frozen=True)
class ServebenchTool(VirtualenvTool):
    """servebench 1.x from its virtualenv: one level of ``--concurrency N`` (or ``--rate``), its ``run.json``."""

    name: ClassVar[str] = "servebench"

    def command(self, run: ToolRun) -> list[str]:
        return servebench_command(self.venv, run.base_url, run.load, run.durations, run.folder / "run.json")

    def read(self, run: ToolRun) -> ToolReport:
        return parse_servebench(json.loads((run.folder / "run.json").read_text()))


def guidellm_data(path: Path, rows: int) -> Path:
    """Prompts with a fixed reply length: guidellm then asks for exactly that many tokens and
    ignore_eos, and a file needs no tokenizer (synthetic prompts would fetch one)."""
    with whole_file(path) as handle:
        for i in range(rows):
            handle.write(json.dumps({"prompt": f"{PROMPT} ({i})", "output_tokens_count": REPLY_TOKENS}) + "\n")
    return path


def guidellm_command(venv: Path, base_url: str, load: Load, durations: Durations, data: Path, out: Path) -> list[str]:
    return [
        str(venv / "bin" / "guidellm"), "run",
        "--backend", f"kind=openai_http,target={base_url},model={MODEL}",
        "--profile", (f"kind=concurrent,streams={load.users}" if load.rate is None else
                      f"kind=poisson,rate={load.rate:g}") + f",warmup={durations.warmup:g}",
        "--constraint", f"kind=max_duration,seconds={durations.seconds:g}",
        "--data", f"kind=json_file,path={data}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip


def _successful(distribution: dict | None) -> dict:
    """guidellm's StatusDistributionSummary: the ``successful`` group."""
    return (distribution or {}).get("successful") or {}


def _median_of(distribution: dict | None) -> float | None:
    group = _successful(distribution)
    if group.get("median") is not None:
        return group["median"]
    return (group.get("percentiles") or {}).get("p50")


def parse_guidellm(report: dict) -> ToolReport:
    """guidellm's benchmarks JSON: the last benchmark's metrics (ms already), its measured window
    (``scheduler_metrics`` measure start/end, unix seconds); latencies are the successful requests'
    medians, output tok/s the mean over all requests (cut ones too), as its console shows them."""
    benchmark = report["benchmarks"][-1]
    metrics = benchmark["metrics"]
    scheduler = benchmark.get("scheduler_metrics") or {}
    window = None
    start, end = scheduler.get("measure_start_time"), scheduler.get("measure_end_time")
    if start and end and end > start:
        window = (float(start), float(end))
    totals = metrics.get("request_totals") or {}
    load_start = scheduler.get("start_time")
    return ToolReport(
        ttft_p50_ms=_median_of(metrics.get("time_to_first_token_ms")),
        tok_s=((metrics.get("output_tokens_per_second") or {}).get("total") or {}).get("mean"),
        itl_p50_ms=_median_of(metrics.get("inter_token_latency_ms")),
        itl_unit="token",
        tpot_p50_ms=_median_of(metrics.get("time_per_output_token_ms")),
        window=window,
        load_start=float(load_start) if load_start else None,
        requests_ok=totals.get("successful"),
        requests_failed=totals.get("errored"),
    )


@dataclass(frozen=True)
class GuidellmTool(VirtualenvTool):
    """guidellm from its virtualenv, on a prompt file that fixes the reply length; its benchmarks JSON."""

    name: ClassVar[str] = "guidellm"

    def command(self, run: ToolRun) -> list[str]:
        # enough rows that the data never runs out inside the duration, twice over
        rows = max(1000, int(2 * run.load.users * run.durations.seconds / (REPLY_TOKENS / run.load.tok_s)))
        data = guidellm_data(run.folder / "prompts.jsonl", rows)
        return guidellm_command(self.venv, run.base_url, run.load, run.durations, data,
                                run.folder / "benchmarks.json")

    def read(self, run: ToolRun) -> ToolReport:
        return parse_guidellm(json.loads((run.folder / "benchmarks.json").read_text()))


PEER_TOOLS: dict[str, type[ServebenchTool] | type[GuidellmTool]] = {
    ServebenchTool.name: ServebenchTool, GuidellmTool.name: GuidellmTool}
