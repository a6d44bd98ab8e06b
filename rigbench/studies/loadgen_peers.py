"""rigbench beside two other load generators, each judged against the ground-truth server.

Why: the self-test says how exact rigbench is; it does not say whether another tool would do
better or worse on the same machine. This benchmark drives rigbench, servebench and guidellm
with the same closed-loop streaming loads (N users, fixed 128-token replies, a fixed duration)
against ``loadtest.ground_truth``, one tool at a time and a fresh truth server for each run, and
compares what each tool reports with what the truth server logged that it sent:

- TTFT p50 error: the tool's p50 TTFT minus the truth log's p50 of (first send - received),
  over the requests the truth server received inside the tool's measured window;
- aggregate tok/s error: the tool's reported output tok/s against the tokens the truth server
  sent over the same span (the tool's measured window when it says which one, else the span
  the truth server was busy: first request received to last chunk sent);
- ITL p50 and TPOT p50 as each tool reports them (a tool's ITL is per chunk or per token as
  that tool means it; the truth is the configured per-token interval, times tokens per chunk
  for a per-chunk figure);
- the load tool's CPU (psutil over its process tree) over the span the truth server was busy,
  as % of one core and as CPU milliseconds per 1,000 streamed chunks (chunks from the truth log).

Each peer is installed once in its own virtualenv under the rigbench cache
(``<cache>/peers/<name>-<version>``), so its dependencies never meet rigbench's. A tool that
cannot be installed or fails a run leaves its error in its table cells; the others go on.

Usage, from the repository root (the full run, ~15-20 s per tool per load)::

    .venv/bin/python -m rigbench.studies.loadgen_peers --out runs/loadgen-peers-<host>-<date>

A quick trial: ``--loads 8x100,8x100:k3:j0.5 --seconds 5 --warmup 1``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import traceback
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil
from tabulate import tabulate

from core.cache import cache_root
from rigbench.own_command import rigbench_program

ROOT = Path(__file__).resolve().parents[2]  # children (the truth server, rigbench) run from here
MODEL = "ground-truth"
REPLY_TOKENS = 128
TTFT_MS = 50.0
DEFAULT_LOADS = "64x100,64x100:k3:j0.5,128x100:k3,128x200,256x200,32x100:p0.8"
TOOLS = ("rigbench", "servebench", "guidellm")
SAMPLE_SECONDS = 0.2  # CPU sampling period: a process that exits loses at most this much of its CPU
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


# ---------------------------------------------------------------------------------------------
# loads


@dataclass(frozen=True)
class Load:
    """One load: a closed loop of ``users`` streams at ``tok_s`` each, ``k`` tokens per chunk; or,
    with ``share``, Poisson arrivals at that share of the capacity of a truth server that streams
    at most ``users`` replies at once and queues the rest (so the queue is in the truth's TTFT)."""

    users: int
    tok_s: float
    k: int = 1
    jitter: float = 0.0
    share: float | None = None

    @property
    def itl_ms(self) -> float:
        return 1000.0 / self.tok_s

    @property
    def capacity_req_s(self) -> float:
        """Replies a server of ``users`` slots finishes per second, one reply taking its first
        token's wait and then one interval per further token."""
        return self.users / ((TTFT_MS + (REPLY_TOKENS - 1) * self.itl_ms) / 1000.0)

    @property
    def rate(self) -> float | None:
        """Requests/s of an open-loop load, rounded as the tools are given it."""
        return None if self.share is None else round(self.share * self.capacity_req_s, 2)

    @property
    def name(self) -> str:
        tail = f" K={self.k}" + (f" jitter ±{self.jitter:g}" if self.jitter else "")
        if self.share is not None:
            return f"Poisson {self.rate:g} req/s ({self.share:.0%} of {self.users} slots x {self.tok_s:g} tok/s{tail})"
        return f"{self.users} x {self.tok_s:g} tok/s{tail}"

    @property
    def slug(self) -> str:
        slug = f"{self.users}x{self.tok_s:g}-k{self.k}" + (f"-j{self.jitter:g}" if self.jitter else "")
        return slug + (f"-p{self.share:g}" if self.share is not None else "")


def parse_loads(text: str) -> list[Load]:
    """``USERSxTOK_S[:kK][:jJITTER][:pSHARE]`` items, comma-separated: ``64x100,64x100:k3:j0.5``;
    ``32x100:p0.8`` is Poisson arrivals at 80% of a 32-slot server's capacity."""
    loads = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        head, *options = item.split(":")
        match = re.fullmatch(r"(\d+)x(\d+(?:\.\d+)?)", head)
        if not match:
            raise ValueError(f"load {item!r}: expected USERSxTOK_S, e.g. 64x100")
        k, jitter, share = 1, 0.0, None
        for option in options:
            if option.startswith("k") and option[1:].isdigit():
                k = int(option[1:])
            elif option.startswith("j"):
                jitter = float(option[1:])
            elif option.startswith("p"):
                share = float(option[1:])
            else:
                raise ValueError(f"load {item!r}: unknown option {option!r} (kK, jJITTER or pSHARE)")
        if int(match.group(1)) < 1 or float(match.group(2)) <= 0 or k < 1 or not 0 <= jitter < 1:
            raise ValueError(f"load {item!r}: users >= 1, tok/s > 0, k >= 1, 0 <= jitter < 1")
        if share is not None and not 0 < share <= 2:
            raise ValueError(f"load {item!r}: 0 < SHARE <= 2 (of the server's capacity)")
        loads.append(Load(int(match.group(1)), float(match.group(2)), k, jitter, share))
    if not loads:
        raise ValueError("no loads given")
    return loads


# ---------------------------------------------------------------------------------------------
# the truth log


@dataclass
class TruthEntry:
    request_id: str
    t_received: float
    sends: list[float]
    tokens: list[int]
    fault: str


def read_truth(path: Path) -> list[TruthEntry]:
    """Every logged request (cut ones too); a log without per-chunk counts is one token a send."""
    from loadtest.ground_truth import read_truth_log

    entries = []
    for raw in read_truth_log(path).values():
        sends = list(raw.get("sends") or [])
        tokens = list(raw.get("tokens") or [1] * len(sends))
        entries.append(TruthEntry(raw["request_id"], raw["t_received"], sends, tokens, raw.get("fault", "none")))
    return entries


def busy_span(entries: Sequence[TruthEntry], after: float | None = None) -> tuple[float, float] | None:
    """From the first request received to the last chunk sent: the span a load kept the server busy.

    ``after``: where the tool says its load began, so a check it made before (rigbench's pre-flight
    reply, seconds ahead of the load processes' start) is not taken for load."""
    load = [e for e in entries if after is None or e.t_received >= after]
    sends = [t for e in load for t in e.sends]
    if not sends:
        return None
    return min(e.t_received for e in load), max(sends)


def tokens_sent(entries: Sequence[TruthEntry], start: float, end: float) -> tuple[int, int]:
    """(tokens, chunks) the truth server sent in [start, end)."""
    tokens = chunks = 0
    for entry in entries:
        for at, n in zip(entry.sends, entry.tokens, strict=False):
            if start <= at < end:
                tokens += n
                chunks += 1
    return tokens, chunks


def truth_tpot_ms(entries: Sequence[TruthEntry], start: float, end: float) -> list[float]:
    """Each reply's per-token decode time as the server sent it (last send - first send over
    the tokens after the first chunk), for requests received in [start, end)."""
    return [
        (e.sends[-1] - e.sends[0]) * 1000.0 / (sum(e.tokens) - e.tokens[0])
        for e in entries
        if len(e.sends) > 1 and start <= e.t_received < end and sum(e.tokens) > e.tokens[0]
    ]


def truth_ttft_ms(entries: Sequence[TruthEntry], start: float, end: float) -> list[float]:
    """First send minus received (ms) of the requests received in [start, end) that got a chunk."""
    return [(e.sends[0] - e.t_received) * 1000.0 for e in entries if e.sends and start <= e.t_received < end]


# ---------------------------------------------------------------------------------------------
# what a tool reports


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


def _p50_ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


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


def parse_rigbench(run_path: Path) -> ToolReport:
    """A rigbench run directory through the analysis package, as ``rigbench report`` reads it:
    aggregate tok/s over the measured window, TTFT p50, ITL p50 (each request's mean gap between
    content chunks), TPOT p50 (each request's decode span over the tokens after its first chunk)."""
    from analysis.figures import run_figures
    from analysis.load import load_run

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


# ---------------------------------------------------------------------------------------------
# CPU of a process tree


@dataclass
class CpuTrace:
    """Cumulative CPU-seconds (user + system) of a process tree, sampled: (unix time, seconds)."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    lifetime_seconds: float | None = None  # from the kernel's accounting of waited-for children

    def at(self, when: float) -> float:
        """Cumulative CPU at ``when``, linear between samples, clamped at the ends."""
        if not self.samples:
            return 0.0
        times = [t for t, _ in self.samples]
        i = bisect_left(times, when)
        if i == 0:
            return self.samples[0][1]
        if i >= len(self.samples):
            return self.samples[-1][1]
        (t0, c0), (t1, c1) = self.samples[i - 1], self.samples[i]
        return c0 + (c1 - c0) * ((when - t0) / (t1 - t0) if t1 > t0 else 1.0)

    def between(self, start: float, end: float) -> float:
        return max(0.0, self.at(end) - self.at(start))


def _tree_cpu(root: psutil.Process, seen: dict[tuple[int, float], float]) -> float:
    """Add the tree's current CPU times to ``seen`` (keyed by pid and start time, so a reused pid
    is a new process) and return the sum over every process ever seen."""
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        processes = [root]
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                seen[(process.pid, process.create_time())] = times.user + times.system
        except psutil.Error:
            continue
    return sum(seen.values())


@dataclass
class Outcome:
    returncode: int | None
    seconds: float
    cpu: CpuTrace
    timed_out: bool
    log_tail: str


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def run_measured(command: list[str], cwd: Path, log_path: Path, timeout: float, env: dict | None = None) -> Outcome:
    """Run a tool to its end with its output in ``log_path``, sampling its tree's CPU."""
    seen: dict[tuple[int, float], float] = {}
    trace = CpuTrace()
    before = _children_cpu()
    started = time.time()
    timed_out = False
    with open(log_path, "wb") as log:
        process = psutil.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env)
        while process.poll() is None:
            trace.samples.append((time.time(), _tree_cpu(process, seen)))
            if time.time() - started > timeout:
                timed_out = True
                with contextlib.suppress(psutil.Error):
                    for child in process.children(recursive=True):
                        child.kill()
                    process.kill()
                break
            time.sleep(SAMPLE_SECONDS)
        returncode = process.wait()
    trace.samples.append((time.time(), sum(seen.values())))
    trace.lifetime_seconds = _children_cpu() - before
    tail = log_path.read_text(errors="replace")[-3000:]
    return Outcome(returncode, time.time() - started, trace, timed_out, tail)


# ---------------------------------------------------------------------------------------------
# peers in their own virtualenvs


@dataclass(frozen=True)
class Peer:
    name: str
    version: str

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"


PEERS = {"servebench": Peer("servebench", "1.1.3"), "guidellm": Peer("guidellm", "0.8.1")}
INSTALLED_MARK = ".rigbench-installed"


def ensure_peer(peer: Peer, cache: Path, log: Callable[[str], None], timeout: float = 3600) -> Path:
    """The peer's virtualenv (``bin/`` has its command), made once and reused when marked whole."""
    venv = cache / peer.folder
    if (venv / INSTALLED_MARK).exists() and (venv / "bin" / "python").exists():
        return venv
    if venv.exists():
        shutil.rmtree(venv)  # a half-made install from an earlier, interrupted attempt
    venv.parent.mkdir(parents=True, exist_ok=True)
    log(f"installing {peer.name}=={peer.version} into {venv} (once; guidellm pulls torch, minutes)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         f"{peer.name}=={peer.version}"],
        capture_output=True, text=True, timeout=timeout, check=False,
    )
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if not line.startswith("WARNING:")]
        raise RuntimeError(f"pip install {peer.name}=={peer.version} failed: " + " ".join(lines[-3:])[-400:])
    (venv / INSTALLED_MARK).write_text(f"{peer.name}=={peer.version}\n")
    return venv


def installed_version(python: Path, package: str) -> str | None:
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return done.stdout.strip() or None


# ---------------------------------------------------------------------------------------------
# driving each tool


@dataclass
class Durations:
    seconds: float  # load time of each tool: rigbench's warm-up + measure, the peers' duration
    warmup: float  # rigbench's warm-up and guidellm's warm-up, both excluded from their figures

    @property
    def measure(self) -> float:
        return self.seconds - self.warmup


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


def servebench_command(venv: Path, base_url: str, load: Load, durations: Durations, out: Path) -> list[str]:
    offered = ["--concurrency", str(load.users)] if load.rate is None else [
        "--rate", f"{load.rate:g}", "--arrival-dist", "poisson"]
    return [
        str(venv / "bin" / "servebench"), "run", "--url", f"{base_url}/v1", "--model", MODEL,
        *offered, "--duration", f"{durations.seconds:g}",
        "--output-len", str(REPLY_TOKENS), "--ignore-eos", "--warmup", "0", "--no-gpu",
        "--seed", "1", "--input-len", "32", "--timeout", "60", "--out", str(out),
    ]  # fmt: skip


def guidellm_data(path: Path, rows: int) -> Path:
    """Prompts with a fixed reply length: guidellm then asks for exactly that many tokens and
    ignore_eos, and a file needs no tokenizer (synthetic prompts would fetch one)."""
    with open(path, "w") as handle:
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


def peer_env(venv: Path) -> dict[str, str]:
    # the peer's own interpreter: none of this process's venv or Python search settings leak into it
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and not k.startswith("PYTHON")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["HF_HUB_OFFLINE"] = "1"  # nothing in these runs needs the Hub; never wait on it
    return env


# ---------------------------------------------------------------------------------------------
# one cell: one tool on one load


@dataclass
class Cell:
    tool: str
    load: str
    ok: bool
    error: str | None = None
    report: dict | None = None
    truth: dict | None = None
    ttft_p50_error_ms: float | None = None
    tok_s_error_pct: float | None = None
    itl_p50_ms: float | None = None
    itl_unit: str | None = None
    tpot_p50_ms: float | None = None
    tpot_p50_error_ms: float | None = None
    cpu_seconds: float | None = None
    cpu_pct: float | None = None
    cpu_ms_per_1k_chunks: float | None = None
    cpu_seconds_lifetime: float | None = None
    wall_seconds: float | None = None
    loadavg_before: list[float] | None = None
    command: list[str] | None = None


def compare_cell(tool: str, load: Load, report: ToolReport, entries: Sequence[TruthEntry], cpu: CpuTrace) -> Cell:
    """A tool's figures against the truth log and its CPU over the span the server was busy."""
    span = busy_span(entries, report.load_start)
    if span is None:
        return Cell(tool, load.name, ok=False, error="the truth server logged no chunks", report=asdict(report))
    window = report.window or span
    tokens, chunks_in_window = tokens_sent(entries, *window)
    truth_tok_s = tokens / (window[1] - window[0]) if window[1] > window[0] else 0.0
    ttfts = truth_ttft_ms(entries, *window)
    truth_ttft = statistics.median(ttfts) if ttfts else None
    tpots = truth_tpot_ms(entries, *window)
    truth_tpot = statistics.median(tpots) if tpots else None
    gaps = [(b - a) * 1000.0 for e in entries for a, b in zip(e.sends, e.sends[1:], strict=False)]
    _, chunks = tokens_sent(entries, span[0], math.nextafter(span[1], math.inf))
    cpu_seconds = cpu.between(*span)
    truth = {
        "window": list(window),
        "window_from": "tool" if report.window else "truth server busy span",
        "busy_span": list(span),
        "requests_logged": len(entries),
        "requests_cut": sum(1 for e in entries if e.fault != "none"),
        "tok_s": truth_tok_s,
        "tokens_in_window": tokens,
        "chunks_in_window": chunks_in_window,
        "chunks_busy_span": chunks,
        "ttft_p50_ms": truth_ttft,
        "tpot_p50_ms": truth_tpot,
        "itl_ms_per_token": load.itl_ms,
        "itl_ms_per_chunk": load.itl_ms * load.k,
        "chunk_gap_p50_ms": statistics.median(gaps) if gaps else None,
    }
    return Cell(
        tool=tool,
        load=load.name,
        ok=True,
        report=asdict(report),
        truth=truth,
        ttft_p50_error_ms=(report.ttft_p50_ms - truth_ttft)
        if report.ttft_p50_ms is not None and truth_ttft is not None
        else None,
        tok_s_error_pct=(report.tok_s - truth_tok_s) / truth_tok_s * 100.0 if report.tok_s and truth_tok_s else None,
        itl_p50_ms=report.itl_p50_ms,
        itl_unit=report.itl_unit,
        tpot_p50_ms=report.tpot_p50_ms,
        tpot_p50_error_ms=(report.tpot_p50_ms - truth_tpot)
        if report.tpot_p50_ms is not None and truth_tpot is not None
        else None,
        cpu_seconds=cpu_seconds,
        cpu_pct=cpu_seconds / (span[1] - span[0]) * 100.0 if span[1] > span[0] else None,
        cpu_ms_per_1k_chunks=cpu_seconds * 1000.0 / chunks * 1000.0 if chunks else None,
        cpu_seconds_lifetime=cpu.lifetime_seconds,
    )


def truth_config(load: Load):
    from loadtest.ground_truth import GroundTruthConfig

    return GroundTruthConfig(
        ttft_ms=TTFT_MS,
        itl_ms=load.itl_ms,
        tokens=REPLY_TOKENS,  # fixed whatever a tool calls the field (guidellm sends max_completion_tokens)
        model=MODEL,
        slots=load.users,
        tokens_per_chunk=load.k,
        jitter=load.jitter,
        seed=1,
        per_chunk_counts=True,
        queue=load.share is not None,
    )


class Study:
    def __init__(self, out: Path, durations: Durations, cache: Path, tools: Sequence[str]):
        self.out = out
        self.durations = durations
        self.cache = cache
        self.tools = list(tools)
        self.venvs: dict[str, Path] = {}
        self.install_errors: dict[str, str] = {}
        self.versions: dict[str, str | None] = {}

    def say(self, message: str) -> None:
        print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)

    def install(self) -> None:
        try:
            version = importlib.metadata.version("rigbench")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=False).stdout.strip()
        self.versions["rigbench"] = f"{version} ({commit})" if commit else version
        for name in self.tools:
            if name not in PEERS:
                continue
            try:
                venv = ensure_peer(PEERS[name], self.cache, self.say)
                self.venvs[name] = venv
                self.versions[name] = installed_version(venv / "bin" / "python", name)
            except Exception as error:  # noqa: BLE001 - a peer that cannot install is reported, not fatal
                self.install_errors[name] = f"install failed: {error}"
                self.say(f"{name}: {self.install_errors[name]}")

    def run_cell(self, tool: str, load: Load) -> Cell:
        if tool in self.install_errors:
            return Cell(tool, load.name, ok=False, error=self.install_errors[tool])
        from loadtest.ground_truth import GroundTruthServer

        folder = self.out / "raw" / load.slug / tool
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        truth_log = folder / "truth.jsonl"
        loadavg = list(os.getloadavg())
        timeout = self.durations.seconds + 180
        command: list[str] | None = None
        try:
            with GroundTruthServer(truth_config(load), truth_log) as server:
                command, env, read = self.prepare(tool, load, server.base_url, folder)
                self.say(f"{load.name}: {tool}")
                cwd = ROOT if tool == "rigbench" else folder
                outcome = run_measured(command, cwd, folder / "tool.log", timeout, env)
            if outcome.timed_out:
                raise RuntimeError(f"ran past {timeout:g} s and was stopped")
            if outcome.returncode != 0:
                raise RuntimeError(f"exit {outcome.returncode}: {_last_lines(outcome.log_tail)}")
            cell = compare_cell(tool, load, read(), read_truth(truth_log), outcome.cpu)
            cell.wall_seconds = outcome.seconds
        except Exception as error:  # noqa: BLE001 - one failed run must not lose the others
            (folder / "error.txt").write_text(traceback.format_exc())
            cell = Cell(tool, load.name, ok=False, error=f"{type(error).__name__}: {error}"[:300])
        cell.loadavg_before = loadavg
        cell.command = command
        return cell

    def prepare(self, tool: str, load: Load, base_url: str, folder: Path):
        """(command, environment, reader of the tool's figures) for one run."""
        if tool == "rigbench":
            runs = folder / "runs"

            def read_rigbench() -> ToolReport:
                made = sorted(p for p in runs.iterdir() if (p / "manifest.json").exists())
                if len(made) != 1:
                    raise RuntimeError(f"expected one run directory in {runs}, found {len(made)}")
                return parse_rigbench(made[0])

            return rigbench_command(base_url, load, self.durations, runs), None, read_rigbench
        venv = self.venvs[tool]
        if tool == "servebench":
            out = folder / "run.json"
            return (servebench_command(venv, base_url, load, self.durations, out), peer_env(venv),
                    lambda: parse_servebench(json.loads(out.read_text())))
        if tool == "guidellm":
            out = folder / "benchmarks.json"
            # enough rows that the data never runs out inside the duration, twice over
            rows = max(1000, int(2 * load.users * self.durations.seconds / (REPLY_TOKENS / load.tok_s)))
            data = guidellm_data(folder / "prompts.jsonl", rows)
            return (guidellm_command(venv, base_url, load, self.durations, data, out), peer_env(venv),
                    lambda: parse_guidellm(json.loads(out.read_text())))
        raise ValueError(f"unknown tool {tool!r}")


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-n:])[-300:]


# ---------------------------------------------------------------------------------------------
# the report


def _fmt(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


ROWS: tuple[tuple[str, Callable[[Cell], str]], ...] = (
    ("TTFT p50 error (ms)", lambda c: _fmt(c.ttft_p50_error_ms, 1, signed=True)),
    ("aggregate tok/s error (%)", lambda c: _fmt(c.tok_s_error_pct, 2, signed=True)),
    ("ITL p50 (ms)", lambda c: f"{_fmt(c.itl_p50_ms, 2)} per {c.itl_unit}"),
    ("TPOT p50 (ms)", lambda c: _fmt(c.tpot_p50_ms, 2)),
    ("TPOT p50 error (ms)", lambda c: _fmt(c.tpot_p50_error_ms, 2, signed=True)),
    ("load tool CPU (% of one core)", lambda c: _fmt(c.cpu_pct, 0)),
    ("CPU ms per 1,000 chunks", lambda c: _fmt(c.cpu_ms_per_1k_chunks, 0)),
)


def _truth_note(row: str, load: Load, cells: Sequence[Cell]) -> str:
    truths = [c.truth for c in cells if c.ok and c.truth]
    if row.startswith("TTFT"):
        values = [t["ttft_p50_ms"] for t in truths if t["ttft_p50_ms"] is not None]
        return f"truth {statistics.median(values):.1f} ms" if values else "truth n/a"
    if row.startswith("aggregate"):
        values = [t["tok_s"] for t in truths]
        return f"truth {statistics.median(values):.0f} tok/s" if values else "truth n/a"
    if row.startswith("ITL"):
        return f"truth {load.itl_ms:.2f}/token, {load.itl_ms * load.k:.2f}/chunk"
    if row.startswith("TPOT p50 error"):
        values = [t["tpot_p50_ms"] for t in truths if t.get("tpot_p50_ms") is not None]
        return f"against each run's send log, median {statistics.median(values):.2f}" if values else "truth n/a"
    if row.startswith("TPOT"):
        return f"configured {load.itl_ms:.2f}"
    if row.startswith("CPU ms"):
        values = [t["chunks_busy_span"] for t in truths]
        return f"{statistics.median(values):,.0f} chunks" if values else ""
    return ""


def _error_cell(cell: Cell, first_row: bool) -> str:
    """A failed run's cells: the error, cut short, in its load's first row; a dash below it."""
    if not first_row:
        return "-"
    text = (cell.error or "failed").replace("|", "/")
    return f"error: {text[:90]}" + ("…" if len(text) > 90 else "")


def side_by_side(loads: Sequence[Load], cells: dict[tuple[str, str], Cell], tools: Sequence[str]) -> str:
    """The Markdown table: one row per figure per load, one column per tool."""
    rows = []
    for load in loads:
        here = [cells.get((tool, load.slug)) or Cell(tool, load.name, ok=False, error="not run") for tool in tools]
        for number, (label, show) in enumerate(ROWS):
            note = _truth_note(label, load, here)
            first = f"**{load.name}**: {label}" + (f" ({note})" if note else "")
            rows.append([first, *(show(c) if c.ok else _error_cell(c, number == 0) for c in here)])
    return tabulate(rows, headers=["load (truth server)", *tools], tablefmt="github", disable_numparse=True)


def machine() -> dict:
    model = platform.processor() or platform.machine()
    with_name = Path("/proc/cpuinfo")
    if with_name.exists():
        for line in with_name.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "host": socket.gethostname(),
        "cpu_model": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": list(os.getloadavg()),
    }


METHOD = """\
Each tool ran alone against its own ground-truth server (a fresh process per run, on loopback,
`loadtest.ground_truth`: first token {ttft:g} ms after a request arrives, then one token per
interval, K tokens a chunk, {reply} tokens a reply whatever the request asks), the loads in
order, the tools in the order of the columns. A closed-loop load ran N concurrent streams
for {seconds:g} s: **rigbench** as `rigbench sweep --steps N --warmup {warmup:g} --measure
{measure:g} --max-tokens {reply} --ignore-eos --timeline` (its figures from the run directory
through `analysis`, as `rigbench report` reads them); **servebench** as `servebench run
--concurrency N --duration {seconds:g} --output-len {reply} --ignore-eos --warmup 0 --no-gpu`
(its `run.json`); **guidellm** as `guidellm run --profile kind=concurrent,streams=N,warmup={warmup:g}
--constraint kind=max_duration,seconds={seconds:g}` on a prompt file that asks {reply} tokens a
reply (its benchmarks JSON). An open-loop load (`Poisson R req/s`) gives each tool the rate
instead: `rigbench sweep --rates R --arrival poisson --arrival-seed 1`, `servebench run --rate R
--arrival-dist poisson`, `guidellm run --profile kind=poisson,rate=R`; its truth server streams
at most N replies at once and queues the rest, so the truth's TTFT (from the request's arrival)
holds the queue, and rigbench counts latency from each request's intended start. Exact command
lines are in `results.json`.

*Error* is the tool's figure minus the truth. TTFT: the tool's p50 minus the p50 of (first chunk
sent - request received) in the truth server's log, over the requests it received in the tool's
measured window. Aggregate tok/s: the tool's reported output rate against the tokens the truth
server sent in the same window (rigbench and guidellm say which window they measured; for
servebench, which does not, the span the truth server was busy, first request received to last
chunk sent, which is the level's duration). ITL and TPOT are shown as each tool reports them:
per chunk (rigbench: each request's mean gap between content chunks; servebench: every gap
between content chunks) or per token (guidellm); the truth is the configured interval, times K
per chunk. CPU is the tool's whole process tree (psutil, sampled every {sample:g} s) over the
span the truth server was busy, so start-up and report writing are left out (the lifetime total
is in `results.json`); per 1,000 chunks divides it by the chunks the truth server sent in that span.

Noise: one run per tool and load; the truth server shares the machine's cores with the tool
(its own process), so a busy machine shows up as TTFT error and as CPU. The load average before
each run is in `results.json`; figures from a shared or small machine are not a ranking.
"""


def _errors_section(loads: Sequence[Load], cells: dict, tools: Sequence[str]) -> list[str]:
    failed = [cells[(t, load.slug)] for load in loads for t in tools if (t, load.slug) in cells]
    lines = [f"- {c.tool}, {c.load}: {c.error}" for c in failed if not c.ok]
    return ["## Errors", "", *lines, ""] if lines else []


def write_report(out: Path, loads: Sequence[Load], study: Study, cells: dict, command: str, started: float) -> str:
    tools = study.tools
    table = side_by_side(loads, cells, tools)
    info = machine()
    results = {
        "command": command,
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": info,
        "versions": study.versions,
        "install_errors": study.install_errors,
        "settings": {"seconds": study.durations.seconds, "warmup": study.durations.warmup,
                     "reply_tokens": REPLY_TOKENS, "ttft_ms": TTFT_MS, "cpu_sample_seconds": SAMPLE_SECONDS},
        "loads": [asdict(load) | {"name": load.name, "slug": load.slug} for load in loads],
        "cells": [asdict(cells[(tool, load.slug)]) for load in loads for tool in tools if (tool, load.slug) in cells],
    }  # fmt: skip
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    versions = ", ".join(f"{t} {study.versions.get(t) or 'not installed'}" for t in tools)
    text = "\n".join([
        f"# Load generators against the ground-truth server on {info['host']}",
        "",
        f"{info['cpu_model']}, {info['logical_cores']} logical cores, Python {info['python']}; {versions}.",
        f"Load average at the start: {', '.join(f'{x:.2f}' for x in info['loadavg_at_start'])}.",
        "",
        "```bash",
        command,
        "```",
        "",
        table,
        "",
        *_errors_section(loads, cells, tools),
        "## Method",
        "",
        METHOD.format(ttft=TTFT_MS, reply=REPLY_TOKENS, seconds=study.durations.seconds,
                      warmup=study.durations.warmup, measure=study.durations.measure, sample=SAMPLE_SECONDS),
    ])  # fmt: skip
    (out / "README.md").write_text(text)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path("runs") / f"loadgen-peers-{socket.gethostname()}-{datetime.now():%Y%m%d}"
    parser.add_argument("--out", type=Path, default=default_out, help="results.json, README.md and raw/ go here")
    parser.add_argument("--loads", default=DEFAULT_LOADS, help="USERSxTOK_S[:kK][:jJITTER], comma-separated")
    parser.add_argument("--seconds", type=float, default=18.0, help="load time per tool per load")
    parser.add_argument("--warmup", type=float, default=3.0, help="of --seconds: rigbench's and guidellm's warm-up")
    parser.add_argument("--tools", default=",".join(TOOLS), help="which of rigbench,servebench,guidellm")
    parser.add_argument("--peers-cache", type=Path, default=None, help="default: <rigbench cache>/peers")
    args = parser.parse_args(argv)
    loads = parse_loads(args.loads)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = set(tools) - set(TOOLS)
    if unknown or not 0 <= args.warmup < args.seconds:
        parser.error(f"unknown tools {sorted(unknown)}" if unknown else "--warmup must be below --seconds")
    command = "python -m rigbench.studies.loadgen_peers " + " ".join(
        (sys.argv[1:] if argv is None else argv) or [f"--out {args.out}"]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    study = Study(args.out, Durations(args.seconds, args.warmup), args.peers_cache or cache_root() / "peers", tools)
    study.install()
    cells: dict[tuple[str, str], Cell] = {}
    for load in loads:
        for tool in tools:
            cells[(tool, load.slug)] = cell = study.run_cell(tool, load)
            if not cell.ok:
                study.say(f"{load.name}: {tool} failed: {cell.error}")
            write_report(args.out, loads[: loads.index(load) + 1], study, cells, command, started)
    table = write_report(args.out, loads, study, cells, command, started)
    print(table)
    print(f"\n{args.out / 'README.md'}, {args.out / 'results.json'} ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
