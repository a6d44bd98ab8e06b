"""What limits the card, on hand-made runs: one per case of each rule, firing and not.

Each run is a closed-loop sweep at 8 and 64 users whose aggregate is set by hand, with GPU samples of a
set SM utilisation in ``hardware/gpu.jsonl``; the one-server runs also carry llama-server's decode-call
counter in telemetry.jsonl and a llama-batched-bench ceiling beside them, so the report's decode-call
budget gives the call and the card's step the rule reads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from analysis.card_limits import IDLE_SM_PCT, TITLE, card_limits, card_limits_section
from analysis.prices import PriceBook
from analysis.report import build_sections, write_report
from core.llama_bench import BenchReport
from core.rundir import ModelInfo, ServerInfo, TelemetrySnapshot
from core.rundir.hardware import GPU_SAMPLES, GpuSample, append_samples, shard
from core.rundir.models import MpsInfo, ReplicaInfo

USERS = (8, 64)
MODEL = ModelInfo(name="tiny.gguf", sha256="ab" * 32, size_bytes=1_000)
ARGS = ["-m", "/models/tiny.gguf", "-np", "64", "--metrics"]
# the card's batched decode: 1 sequence at 400 tok/s (2.5 ms a step), 8 at 2,000 tok/s (4 ms), 64 at 6,400 (10 ms)
CEILING = {1: 400.0, 8: 2000.0, 64: 6400.0}
FIGURE = r"(\d+\.\d) \[(\d+\.\d), (\d+\.\d)\]"


def window(kit, index: int) -> tuple[float, float]:
    start = kit.T0 + index * 100
    return start + 10, start + 70


def sweep(kit, run_id: str, speeds: dict[int, float], **changes) -> Path:
    """Each user streams 21-token replies back to back; the server's total speed at ``users`` is ``speeds[users]``."""
    steps, records = [], []
    for index, (count, speed) in enumerate(speeds.items()):
        start = kit.T0 + index * 100
        steps.append(kit.window(index, count, *window(kit, index)))
        cycle = 21 * count / speed  # each user's request, first token to the next request's start
        for user in range(count):
            clock, number = start + user * cycle / count, 0
            while clock < start + 80:
                records.append(kit.record(f"{index}-{user}-{number}", step=index, users=count,
                                          phase="measure" if clock >= start + 10 else "warmup", t_start=clock,
                                          ttft=0.005, decode=cycle - 0.01, tokens=21, server_tok_s=speed / count))
                clock += cycle
                number += 1
    return kit.make_run(run_id, steps, {"p0": records}, model=MODEL, **changes)


def sample_gpus(kit, path: Path, sm: dict[int, float | None], gpus: int = 1) -> None:
    """Every GPU at ``sm[users]`` % SM utilisation through each step (None: the field not sampled), once a second."""
    samples = []
    for index, pct in enumerate(sm.values()):
        start = kit.T0 + index * 100
        for t in np.arange(start, start + 80, 1.0):
            samples += [GpuSample(t=float(t), gpu=gpu, power_w=300.0, sm_util_pct=pct) for gpu in range(gpus)]
    append_samples(shard(path, GPU_SAMPLES), samples)


def count_calls(kit, path: Path, calls_per_s: dict[int, float]) -> None:
    """llama-server's decode-call counter at each window's edges, rising ``calls_per_s[users]`` a second."""
    snapshots, total = [], 0.0
    for index, (count, rate) in enumerate(calls_per_s.items()):
        start, end = window(kit, index)
        snapshots.append(TelemetrySnapshot(taken_at=start, step=index, users=count, boundary="measure",
                                           metrics={"llamacpp:n_decode_total": total}))
        total += rate * (end - start)
        snapshots.append(TelemetrySnapshot(taken_at=end, step=index, users=count, boundary="end",
                                           metrics={"llamacpp:n_decode_total": total}))
    (path / "telemetry.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in snapshots))


def place_ceiling(kit) -> None:
    """A llama-batched-bench result of the same model file beside the runs (their folder's parent)."""
    report = BenchReport(command=["llama-batched-bench", "-m", "/models/tiny.gguf", "-npp", "128", "-ntg", "128"],
                         summary={f"tg@{n}": tok_s for n, tok_s in CEILING.items()}, results=[])
    (kit.root / "batched-bench-tiny.json").write_text(report.to_json())


def replicas_run(kit, run_id: str = "replicas", mps: MpsInfo | None = MpsInfo(ran=False, reason="off: --mps off"),
                 speeds: dict[int, float] | None = None, sm: dict[int, float | None] | None = None) -> Path:
    """Four replicas on GPU 0, 2,000 tok/s at 8 users falling to 1,000 at 64, the GPU 99% busy."""
    replicas = [ReplicaInfo(index=i, url=f"http://127.0.0.1:{8080 + i}", slots=16, gpu=0) for i in range(4)]
    server = ServerInfo(args=ARGS, host="127.0.0.1", port=8080, parallel_slots=64, replicas=replicas, mps=mps)
    path = sweep(kit, run_id, speeds or {8: 2000.0, 64: 1000.0}, server=server)
    sample_gpus(kit, path, sm or {8: 99.0, 64: 99.0})
    return path


def one_server_run(kit, run_id: str = "one-server", sm: dict[int, float | None] | None = None,
                   calls: dict[int, float] | None = None, ceiling: bool = True, samples: bool = True,
                   speeds: dict[int, float] | None = None) -> Path:
    """One server at 30% SM whose decode call takes 10 ms at 8 users (2.5x the card's 4 ms) and 40 ms at 64
    (4x the card's 10 ms)."""
    server = ServerInfo(args=ARGS, host="127.0.0.1", port=8080, parallel_slots=64)
    path = sweep(kit, run_id, speeds or {8: 700.0, 64: 1500.0}, server=server)
    if samples:
        sample_gpus(kit, path, sm or {8: 30.0, 64: 30.0})
    count_calls(kit, path, calls or {8: 100.0, 64: 25.0})
    if ceiling:
        place_ceiling(kit)
    return path


def findings(*paths: Path) -> list[list[tuple[str, str]]]:
    """Each run's findings (kind, line), the runs reported together."""
    sections = build_sections(list(paths), book=PriceBook([]))
    return [[(f.kind, f.line) for f in card_limits(section, sections)] for section in sections]


def test_replicas_sharing_a_gpu_without_mps_busy_while_the_aggregate_falls_take_turns(kit) -> None:
    [[(kind, line)]] = findings(replicas_run(kit))
    assert kind == "taking_turns"
    found = re.fullmatch(rf"taking turns on the GPU: serve them under MPS — 4 replicas share GPU 0 without MPS; "
                         rf"SM 99% at 64 users while the aggregate fell to {FIGURE} tok/s from {FIGURE} at 8 users",
                         line)
    assert found, line
    fell, before = float(found.group(1)), float(found.group(4))
    assert fell == pytest.approx(1000, rel=0.01) and before == pytest.approx(2000, rel=0.01)
    assert float(found.group(3)) < float(found.group(5)), "the fall is beyond noise"


def test_the_same_replicas_under_mps_do_not(kit) -> None:
    assert findings(replicas_run(kit, mps=MpsInfo(ran=True, reason="auto: 4 replicas share GPU 0"))) == [[]]


def test_replicas_whose_manifest_does_not_say_whether_mps_ran_are_not_called_without_it(kit) -> None:
    assert findings(replicas_run(kit, mps=None)) == [[]]


@pytest.mark.parametrize("case", ["gpu-not-busy", "aggregate-rises", "no-sm-samples"])
def test_replicas_taking_turns_need_a_busy_gpu_a_falling_aggregate_and_the_samples(kit, case: str) -> None:
    run = {
        "gpu-not-busy": lambda: replicas_run(kit, sm={8: 99.0, 64: 80.0}),
        "aggregate-rises": lambda: replicas_run(kit, speeds={8: 1000.0, 64: 2000.0}),
        "no-sm-samples": lambda: replicas_run(kit, sm={8: None, 64: None}),
    }[case]()
    assert findings(run) == [[]]


def test_replicas_below_one_servers_aggregate_at_as_many_users_take_turns_too(kit) -> None:
    """One step at 64 users, nothing earlier to fall from: the one-server run of the same model and machine in the
    same report shows the fall."""
    alone = one_server_run(kit, speeds={64: 1500.0}, sm={64: 30.0}, calls={64: 50.0})  # 2x: it fires as well
    shared = replicas_run(kit, speeds={64: 1000.0}, sm={64: 99.0})
    [[(alone_kind, _)], [(kind, line)]] = findings(alone, shared)
    assert (alone_kind, kind) == ("server_loop", "taking_turns")
    found = re.search(rf"SM 99% at 64 users while the aggregate, {FIGURE} tok/s, is below one server's {FIGURE} at "
                      r"the same load \(`local one-server`\)$", line)
    assert found, line
    assert float(found.group(1)) == pytest.approx(1000, rel=0.01)
    assert float(found.group(4)) == pytest.approx(1500, rel=0.01)
    assert findings(shared) == [[]], "alone, nothing shows the fall"


def test_one_server_idle_on_the_gpu_with_a_call_of_several_card_steps_is_limited_by_its_loop(kit) -> None:
    [[(kind, line)]] = findings(one_server_run(kit))
    assert kind == "server_loop"
    assert line == ("limited by the server's own loop: add replicas — one server at 64 users: SM 30%, a decode call "
                    "40.0 ms against the card's 10.0 ms for 64 sequences (4.0x); the same at 8 users")


@pytest.mark.parametrize("case", ["busy-gpu", "call-near-the-card"])
def test_a_busy_gpu_or_a_call_near_the_cards_step_is_not_the_loop(kit, case: str) -> None:
    run = (one_server_run(kit, sm={8: 95.0, 64: 95.0}) if case == "busy-gpu"
           else one_server_run(kit, calls={8: 208.3, 64: 83.3}))  # 4.8 ms against 4 ms, 12 ms against 10: 1.2x
    assert findings(run) == [[]]


@pytest.mark.parametrize("case", ["no-gpu-samples", "no-sm-field", "no-ceiling", "no-decode-counter"])
def test_absent_figures_do_not_fire(kit, case: str) -> None:
    if case == "no-gpu-samples":
        run = one_server_run(kit, samples=False)
    elif case == "no-sm-field":
        run = one_server_run(kit, sm={8: None, 64: None})
    elif case == "no-ceiling":
        run = one_server_run(kit, ceiling=False)
    else:
        run = one_server_run(kit)
        (run / "telemetry.jsonl").unlink()
    assert findings(run) == [[]]


def test_one_user_is_not_told_to_add_replicas(kit) -> None:
    """At 1 user the GPU idles and a call takes 4x the card's step, but replicas have nothing to spread."""
    run = one_server_run(kit, speeds={1: 100.0, 64: 1500.0}, sm={1: 30.0, 64: 80.0}, calls={1: 100.0, 64: 25.0})
    [section] = build_sections([run], book=PriceBook([]))
    (one,) = [step for step in section.budget.steps if step.users == 1]
    assert one.call_ms / one.ceiling_ms == pytest.approx(4.0) and IDLE_SM_PCT <= 80.0
    assert card_limits(section, [section]) == []


@pytest.mark.parametrize("make", [replicas_run, one_server_run], ids=["taking-turns", "server-loop"])
def test_the_report_has_the_section_the_glance_and_summary_json(kit, make) -> None:
    path = make(kit)
    report = write_report([path], price_as=None, book=PriceBook([]))
    markdown = report.read_text()
    section = markdown.split(f"{TITLE}\n", 1)[1].split("\n### ", 1)[0]
    (line,) = [row[2:] for row in section.splitlines() if row.startswith("- ")]
    summary = json.loads((path / "summary.json").read_text())
    (limit,) = summary["runs"][0]["card_limits"]
    assert limit["line"] == line
    glance = markdown.split("## At a glance\n", 1)[1].split("\n## ", 1)[0]
    expected = {"taking_turns": "Its 4 replicas take turns on GPU 0 without MPS (SM 99% at 64 users while the "
                                "aggregate fell): serve them under MPS (see what limits the card).",
                "server_loop": "Its own loop limits the server (SM 30% at 64 users, a decode call 4.0x the card's "
                               "batched step): add replicas (see what limits the card)."}[limit["kind"]]
    assert glance.strip().endswith(expected)


def test_a_run_without_a_finding_has_no_section(kit) -> None:
    sections = build_sections([one_server_run(kit, sm={8: 95.0, 64: 95.0})], book=PriceBook([]))
    assert card_limits_section(sections[0], sections) == []
    report = write_report([sections[0].figures.run.path], book=PriceBook([]))
    assert TITLE not in report.read_text()
    assert json.loads((report.parent / "summary.json").read_text())["runs"][0]["card_limits"] is None
