"""How exact is the load generator? A sweep against the ground-truth server, compared.

For each step the client's measurements are set against the server's own send log:

- aggregate tok/s: tokens the client saw arrive inside the measured window, against the
  tokens the server sent inside the same window (a client that falls behind sees fewer);
- TTFT p50: client ``t_first_token - t_start`` against server ``first send - received``;
- ITL p50: gaps between the client's chunk arrivals against gaps between the server's sends.

The highest aggregate rate one load process follows (tok/s within 1 %, TTFT p50 within
2 ms, ITL p50 within 0.5 ms) is its ceiling on this machine (kept by ``loadtest.ceiling``);
a sweep warns when it asks more of a process than that.
"""

from __future__ import annotations

import json
import statistics
from bisect import bisect_left
from dataclasses import asdict, dataclass
from pathlib import Path

from core.errors import RunIncomplete
from core.rundir import LoadSettings, RunDir, ServerInfo, new_manifest, server_at
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer, read_truth_log
from loadtest.streaming import TIMELINES
from loadtest.sweep import run_sweep

TRACKING_TOLERANCE = 0.01
TTFT_TOLERANCE_MS = 2.0
ITL_TOLERANCE_MS = 0.5


@dataclass
class StepFidelity:
    step: int
    users: int
    requests: int
    truth_tok_s: float
    client_tok_s: float
    tok_s_error_pct: float
    truth_ttft_p50_ms: float
    ttft_p50_error_ms: float
    truth_itl_p50_ms: float
    itl_p50_error_ms: float
    loadgen_cpu_pct: float | None = None

    @property
    def tracked(self) -> bool:
        """Followed: tok/s within 1 % and latency within the benchmark's TTFT/ITL targets."""
        return (
            abs(self.tok_s_error_pct) <= TRACKING_TOLERANCE * 100
            and abs(self.ttft_p50_error_ms) <= TTFT_TOLERANCE_MS
            and abs(self.itl_p50_error_ms) <= ITL_TOLERANCE_MS
        )


def read_timelines(run: RunDir) -> dict[str, list[float]]:
    timelines: dict[str, list[float]] = {}
    for path in sorted((run.path / TIMELINES).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                timelines[entry["request_id"]] = entry["chunks"]
    return timelines


def _count_in(times: list[float], start: float, end: float) -> int:
    ordered = sorted(times)
    return bisect_left(ordered, end) - bisect_left(ordered, start)


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def compare(run: RunDir, truth_log: Path) -> list[StepFidelity]:
    """Per-step fidelity of a finished ground-truth sweep."""
    manifest = run.read_manifest()
    records = [r for r in run.read_records() if r.ok and not r.interrupted]
    truth = read_truth_log(truth_log)
    timelines = read_timelines(run)
    client_cpu = {}
    for snapshot in run.read_telemetry():
        if snapshot.boundary == "end":
            client_cpu[snapshot.step] = snapshot.metrics.get("rigbench_loadgen_cpu_percent")
    all_client = [t for r in records for t in timelines.get(r.request_id, [])]
    all_truth = [t for r in records if r.request_id in truth for t in truth[r.request_id]["sends"]]
    results = []
    for window in manifest.steps:
        if window.measure_end is None:
            continue
        length = window.measure_end - window.measure_start
        measured = [r for r in records if r.step == window.index and r.phase == "measure" and r.request_id in truth]
        if not measured:
            continue
        truth_count = _count_in(all_truth, window.measure_start, window.measure_end)
        client_count = _count_in(all_client, window.measure_start, window.measure_end)
        client_ttft = [(r.t_first_token - r.t_start) * 1000 for r in measured if r.t_first_token]
        truth_ttft = [(truth[r.request_id]["sends"][0] - truth[r.request_id]["t_received"]) * 1000 for r in measured]
        client_itl = [g * 1000 for r in measured for g in _gaps(timelines.get(r.request_id, []))]
        truth_itl = [g * 1000 for r in measured for g in _gaps(truth[r.request_id]["sends"])]
        results.append(
            StepFidelity(
                step=window.index,
                users=window.users,
                requests=len(measured),
                truth_tok_s=truth_count / length,
                client_tok_s=client_count / length,
                tok_s_error_pct=(client_count - truth_count) / truth_count * 100 if truth_count else 0.0,
                truth_ttft_p50_ms=statistics.median(truth_ttft),
                ttft_p50_error_ms=statistics.median(client_ttft) - statistics.median(truth_ttft),
                truth_itl_p50_ms=statistics.median(truth_itl) if truth_itl else 0.0,
                itl_p50_error_ms=(statistics.median(client_itl) - statistics.median(truth_itl)) if client_itl else 0.0,
                loadgen_cpu_pct=client_cpu.get(window.index),
            )
        )
    return results


def ceiling(results: list[StepFidelity]) -> float:
    """The highest true aggregate tok/s that was followed within 1 % (0 if none)."""
    tracked = [r.truth_tok_s for r in results if r.tracked]
    return max(tracked, default=0.0)


def run_selftest(
    runs_dir: Path,
    *,
    user_steps: list[int],
    tok_s_per_user: float = 100.0,
    ttft_ms: float = 50.0,
    reply_tokens: int = 128,
    warmup: float = 2.0,
    measure: float = 5.0,
    processes: int = 1,
    progress: bool = True,
) -> tuple[RunDir, list[StepFidelity]]:
    """Serve the ground truth, sweep it, and compare; the run directory keeps everything."""
    settings = LoadSettings(
        user_steps=user_steps,
        warmup_seconds=warmup,
        measure_seconds=measure,
        max_tokens=reply_tokens,
        ignore_eos=True,
        processes=processes,
        arm="selftest",
    )
    config = GroundTruthConfig(
        ttft_ms=ttft_ms, itl_ms=1000.0 / tok_s_per_user, model="default", slots=max(user_steps), length_jitter=0.5
    )
    server_args = ["ground-truth", config.model_dump_json()]
    # the port is known once the ground-truth server listens
    pending = ServerInfo(args=server_args, host="127.0.0.1", port=0, parallel_slots=config.slots)
    manifest = new_manifest("selftest", "selftest", load=settings, server=pending)
    run = RunDir.create(runs_dir, manifest)
    truth_log = run.path / "ground_truth.jsonl"
    with GroundTruthServer(config, truth_log) as server:
        run.update_manifest(server=server_at(server.base_url, server_args, config.slots))
        final = run_sweep(run, server.base_url, progress=progress, timeline=True, max_error_rate=0.05)
    if final.status != "complete":
        # a sweep that failed has steps it did not follow for a reason of its own: no ceiling from it
        raise RunIncomplete(f"{run.path}: the self-test sweep ended {final.status} ({final.status_detail}); "
                            "no figures or ceiling are taken from it")
    return run, compare(run, truth_log)


def results_table(results: list[StepFidelity]) -> list[dict]:
    rows = []
    for r in results:
        row = asdict(r)
        row["tracked_1pct"] = r.tracked
        rows.append(row)
    return rows
