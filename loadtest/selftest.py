"""The load generator against the ground-truth server: serve the truth, sweep it, keep both.

The run directory holds the sweep and the server's own send log (``ground_truth.jsonl``), so
the figures rigbench reports can be judged against what the server really sent
(``rigbench.fidelity``: ``rigbench selftest`` and the fidelity report). The ground truth can
pack several tokens per chunk and jitter its token gaps, and for an open-loop sweep it queues
requests on a known number of slots, so its capacity is known and a rate near it queues.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import RunIncomplete
from core.lists import SWEEP_DRAIN_SECONDS
from core.rundir import LoadSettings, RunDir, ServerInfo, new_manifest, server_at
from core.rundir.models import RepeatInfo
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.sweep import run_sweep

TRUTH_LOG = "ground_truth.jsonl"
OPEN_LOOP_SLOTS = 8


def run_selftest(
    runs_dir: Path,
    *,
    user_steps: list[int] | None = None,
    rate_steps: list[float] | None = None,
    tok_s_per_user: float = 100.0,
    ttft_ms: float = 50.0,
    reply_tokens: int = 128,
    tokens_per_chunk: int = 1,
    jitter: float = 0.0,
    slots: int | None = None,
    warmup: float = 2.0,
    measure: float = 5.0,
    processes: int = 1,
    progress: bool = True,
    per_chunk_counts: bool = True,
    tokens_per_chunk_max: int | None = None,
    pause_ms: float = 0.0,
    llama_endpoints: bool = True,
    timeline: bool = True,
    drain: float = SWEEP_DRAIN_SECONDS,
    repeat: RepeatInfo | None = None,
) -> tuple[RunDir, Path]:
    """Serve the ground truth, sweep it; returns the run and the server's send log in it.

    Closed loop (``user_steps``): replies of 64-128 tokens (varied, so users desync), one slot
    per user. Open loop (``rate_steps``): replies of exactly ``reply_tokens`` on ``slots``
    queued slots, so the server's capacity is known (``open_loop_capacity``) and a rate near it
    queues on the server as on a real one."""
    open_loop = bool(rate_steps)
    settings = LoadSettings(
        user_steps=[] if open_loop else list(user_steps or []),
        rate_steps=list(rate_steps or []),
        warmup_seconds=warmup,
        measure_seconds=measure,
        max_tokens=reply_tokens,
        ignore_eos=True,
        processes=processes,
        arm="selftest",
        drain_seconds=drain,
        timeline=timeline,
        max_error_rate=0.05,
    )
    config = GroundTruthConfig(
        ttft_ms=ttft_ms,
        itl_ms=1000.0 / tok_s_per_user,
        model="default",
        slots=slots or (OPEN_LOOP_SLOTS if open_loop else max(settings.user_steps)),
        length_jitter=0.0 if open_loop else 0.5,
        tokens_per_chunk=tokens_per_chunk,
        jitter=jitter,
        queue=open_loop,
        per_chunk_counts=per_chunk_counts,
        tokens_per_chunk_max=tokens_per_chunk_max,
        pause_ms=pause_ms,
        llama_endpoints=llama_endpoints,
    )
    server_args = ["ground-truth", config.model_dump_json()]
    # the port is known once the ground-truth server listens
    pending = ServerInfo(args=server_args, host="127.0.0.1", port=0, parallel_slots=config.slots, slots_from="server")
    manifest = new_manifest("selftest", "selftest", load=settings, server=pending).model_copy(
        update={"repeat": repeat})  # one repeat of an A/A check (``rigbench selftest --aa``)
    run = RunDir.create(runs_dir, manifest)
    truth_log = run.path / TRUTH_LOG
    with GroundTruthServer(config, truth_log) as server:
        run.update_manifest(server=server_at(server.base_url, server_args, config.slots, "server"))
        final = run_sweep(run, server.base_url, progress=progress)
    if final.status != "complete":
        # a sweep that failed has steps it did not follow for a reason of its own: no capacity from it
        raise RunIncomplete(f"{run.path}: the self-test sweep ended {final.status} ({final.status_detail}); "
                            "no figures or capacity are taken from it")
    return run, truth_log


def open_loop_capacity(slots: int, ttft_ms: float, tok_s_per_user: float, reply_tokens: int) -> float:
    """Requests per second the queued ground-truth server completes at most: each slot serves
    one reply of TTFT plus (tokens - 1) gaps at a time."""
    reply_seconds = (ttft_ms + (reply_tokens - 1) * 1000.0 / tok_s_per_user) / 1000.0
    return slots / reply_seconds
