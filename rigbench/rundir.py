"""The run directory: the contract between loadtest (which writes it) and analysis.

::

    runs/<run-id>/
      manifest.json          RunManifest, written atomically (temp file + rename)
      records/<shard>.jsonl  RequestRecord per line, one shard per load process,
                             append-only, flushed per line (.jsonl.gz when archived)
      telemetry.jsonl        TelemetrySnapshot per line (/metrics and /slots)
      report.md, summary.json, plots/   written by analysis

Every file carries or sits beside ``schema_version``; reading validates, and a version this
code does not know is a clear error rather than a guess. The JSON Schema committed at
``rigbench/schema/run-v1.json`` is generated from these models (``rigbench schema``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rigbench.errors import RunDirError
from rigbench.validation import describe_validation_error

SCHEMA_VERSION = 1
RunStatus = Literal["running", "complete", "interrupted", "failed"]
Phase = Literal["warmup", "measure"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MachineInfo(Strict):
    hostname: str = ""
    cpu_model: str = ""
    cpu_cores: int = 0
    memory_gib: float = 0.0
    gpu_name: str | None = None
    gpu_memory_mib: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None


class RigInfo(Strict):
    """Where the server ran; prices are what was known at run time, with their source."""

    kind: Literal["local", "aws"] = "local"
    instance_type: str | None = None
    region: str | None = None
    availability_zone: str | None = None
    market: Literal["spot", "on-demand"] | None = None
    price_per_hour: float | None = None
    price_source: str | None = None
    launch_time: str | None = None
    machine: MachineInfo = Field(default_factory=MachineInfo)


class BuildInfo(Strict):
    source: str
    backend: str
    cuda_arch: str | None = None
    cmake_options: list[str] = Field(default_factory=list)
    build_seconds: float | None = None
    key: str | None = None


class ModelInfo(Strict):
    name: str
    sha256: str
    size_bytes: int
    repo: str | None = None
    synthetic: bool = False
    label: str | None = None


class ServerInfo(Strict):
    args: list[str]
    host: str
    port: int
    parallel_slots: int = 1
    endpoint: str = "/v1/chat/completions"


class LoadSettings(Strict):
    user_steps: list[int]
    warmup_seconds: float
    # one measured window for every step, or one per step (longer where requests are longer)
    measure_seconds: float | list[float]
    max_tokens: int
    temperature: float = 0.0
    cache_prompt: bool = False
    ignore_eos: bool = False
    prompts: str = "mixed"
    context_tokens: int = 0
    processes: int = 1
    arm: str | None = None

    @model_validator(mode="after")
    def _one_window_per_step(self) -> LoadSettings:
        if isinstance(self.measure_seconds, list) and len(self.measure_seconds) != len(self.user_steps):
            raise ValueError(
                f"measure_seconds has {len(self.measure_seconds)} windows for {len(self.user_steps)} user steps"
            )
        return self

    def remaining(self, first_step: int) -> LoadSettings:
        """The settings of the steps from ``first_step`` on (a resumed sweep)."""
        measure = self.measure_seconds
        if isinstance(measure, list):
            measure = measure[first_step:]
        return self.model_copy(update={"user_steps": self.user_steps[first_step:], "measure_seconds": measure})


def format_measure(measure: float | list[float]) -> str:
    """``30`` or ``8,8,10,20``: measured seconds as command lines take them and reports show them
    (the inverse of ``loadtest.schedule.parse_measure``)."""
    values = measure if isinstance(measure, list) else [measure]
    return ",".join(f"{value:g}" for value in values)


class StepWindow(Strict):
    """One step of a sweep; analysis uses records from [measure_start, measure_end) only."""

    index: int
    users: int
    started_at: float
    measure_start: float
    measure_end: float | None = None
    context_tokens: int = 0


class RunManifest(Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    status: RunStatus = "running"
    status_detail: str | None = None
    created_at: str
    ended_at: str | None = None
    profile: str
    rig: RigInfo = Field(default_factory=RigInfo)
    build: BuildInfo | None = None
    model: ModelInfo | None = None
    drafter: ModelInfo | None = None
    server: ServerInfo | None = None
    load: LoadSettings | None = None
    steps: list[StepWindow] = Field(default_factory=list)
    last_complete_step: int | None = None
    linked_runs: list[str] = Field(default_factory=list)
    resumed_from: str | None = None
    warnings: list[str] = Field(default_factory=list)


class ServerTimings(BaseModel):
    """llama-server's ``timings`` object from the final stream chunk (unknown keys kept)."""

    model_config = ConfigDict(extra="allow")

    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    predicted_per_second: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None


class RequestRecord(Strict):
    """One request, as raw as possible: timestamps (unix seconds) and the server's counts.

    The inter-token gaps are summarised by ``t_first_token``, ``t_last_token`` and
    ``content_chunks`` (mean ITL = span / (chunks - 1)); full arrival times go to the
    optional timeline shard so a million records stay quick to analyse.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str
    shard: str
    step: int
    users: int
    phase: Phase
    category: str
    context_tokens: int = 0
    t_start: float
    t_first_token: float | None = None
    t_last_token: float | None = None
    t_end: float
    content_chunks: int = 0
    http_status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    timings: ServerTimings | None = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class TelemetrySnapshot(Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    taken_at: float
    step: int
    users: int
    boundary: Literal["start", "measure", "end"]
    metrics: dict[str, float] = Field(default_factory=dict)
    slots_total: int | None = None
    slots_busy: int | None = None
    error: str | None = None


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_run_id(prefix: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{prefix}-{secrets.token_hex(2)}"


def sweep_manifest(
    label: str, profile: str, url: str, settings: LoadSettings, slots: int, server_args: list[str] | None = None
) -> RunManifest:
    """A new run's manifest for a sweep against the server at ``url`` (``rigbench sweep``, a
    hand-started Locust, tests)."""
    parts = urlsplit(url)
    return RunManifest(
        run_id=new_run_id(label),
        created_at=utc_now(),
        profile=profile,
        server=ServerInfo(
            args=list(server_args or []), host=parts.hostname or "", port=parts.port or 80, parallel_slots=slots
        ),
        load=settings,
    )


PRIVATE_UMASK = 0o077


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Inside, every file and folder this process or a child it starts creates is private to the
    user (0600 / 0700): run directories hold prompts and server logs, and keep their modes when
    copied off a rig. The umask is process-wide, so wrap a whole command, not a library call."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def write_json_atomic(path: Path, payload: str) -> None:
    """Write via a temporary file and rename, so readers never see half a file (created 0600)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


class RunDir:
    """A run directory on disk. Creating one writes its manifest; opening one validates it."""

    MANIFEST = "manifest.json"
    RECORDS = "records"
    TELEMETRY = "telemetry.jsonl"

    def __init__(self, path: Path | str):
        self.path = Path(path)

    @classmethod
    def create(cls, root: Path | str, manifest: RunManifest) -> RunDir:
        run = cls(Path(root) / manifest.run_id)
        (run.path / cls.RECORDS).mkdir(parents=True, exist_ok=False, mode=0o700)
        os.chmod(run.path, 0o700)
        run.write_manifest(manifest)
        run.reserve_space()
        return run

    # Room kept for the final manifest write: when the disk fills up under the records, the
    # writer deletes this file and the run can still say why it failed.
    SPACE_RESERVE = ".space-reserve"
    SPACE_RESERVE_BYTES = 64 * 1024

    def reserve_space(self) -> None:
        with open(self.path / self.SPACE_RESERVE, "wb") as handle:
            handle.write(b"\0" * self.SPACE_RESERVE_BYTES)

    def release_space_reserve(self) -> None:
        (self.path / self.SPACE_RESERVE).unlink(missing_ok=True)

    @property
    def manifest_path(self) -> Path:
        return self.path / self.MANIFEST

    def write_manifest(self, manifest: RunManifest) -> None:
        write_json_atomic(self.manifest_path, manifest.model_dump_json(indent=2))

    def read_manifest(self) -> RunManifest:
        if not self.manifest_path.exists():
            raise RunDirError(f"{self.path}: no {self.MANIFEST}; is this a run directory?")
        try:
            data = json.loads(self.manifest_path.read_text())
        except json.JSONDecodeError as error:
            raise RunDirError(f"{self.manifest_path}: not valid JSON ({error})") from None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise RunDirError(
                f"{self.manifest_path}: schema_version {version!r} is not supported "
                f"(this rigbench reads version {SCHEMA_VERSION}); upgrade rigbench or re-run"
            )
        try:
            return RunManifest.model_validate(data)
        except ValidationError as error:
            raise RunDirError(describe_validation_error(error, self.manifest_path)) from None

    def update_manifest(self, **changes: object) -> RunManifest:
        manifest = self.read_manifest().model_copy(update=changes)
        self.write_manifest(manifest)
        return manifest

    def shard_path(self, shard: str) -> Path:
        return self.path / self.RECORDS / f"{shard}.jsonl"

    def shard_paths(self) -> list[Path]:
        folder = self.path / self.RECORDS
        if not folder.is_dir():
            raise RunDirError(f"{self.path}: no {self.RECORDS}/ folder; the run wrote no records")
        return sorted(p for p in folder.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))

    def open_shard(self, shard: str) -> RecordWriter:
        return RecordWriter(self.shard_path(shard))

    def iter_record_lines(self, path: Path) -> Iterator[tuple[int, str, bool]]:
        """(line number, text, is_last) of a shard, gzip or plain."""
        opener: IO[str]
        opener = gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)  # noqa: SIM115
        with opener as handle:
            previous: tuple[int, str] | None = None
            for number, line in enumerate(handle, 1):
                if previous is not None:
                    yield previous[0], previous[1], False
                previous = (number, line)
            if previous is not None:
                yield previous[0], previous[1], True

    def read_records(self, warnings: list[str] | None = None) -> list[RequestRecord]:
        """Validated records of every shard. A truncated last line (a writer killed
        mid-line) is skipped and counted in ``warnings``; damage elsewhere is an error."""
        records = []
        for path in self.shard_paths():
            for number, line, is_last in self.iter_record_lines(path):
                if not line.strip():
                    continue
                try:
                    records.append(RequestRecord.model_validate_json(line))
                except ValidationError as error:
                    if is_last and not line.endswith("\n"):
                        if warnings is not None:
                            warnings.append(f"{path.name}:{number}: truncated last line skipped")
                        continue
                    raise RunDirError(describe_validation_error(error, f"{path}:{number}")) from None
        return records

    def append_telemetry(self, snapshot: TelemetrySnapshot) -> None:
        with open(self.path / self.TELEMETRY, "a") as handle:
            handle.write(snapshot.model_dump_json() + "\n")

    def read_telemetry(self) -> list[TelemetrySnapshot]:
        path = self.path / self.TELEMETRY
        if not path.exists():
            return []
        return [TelemetrySnapshot.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


class RecordWriter:
    """Append-only JSONL shard writer: one line per record, flushed as written, so a
    killed process loses at most the line it was writing."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(path, "a", buffering=1)  # noqa: SIM115
        os.chmod(path, 0o600)

    def write(self, record: RequestRecord) -> None:
        self._handle.write(record.model_dump_json(exclude_none=True) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_json_schema() -> dict:
    """The JSON Schema of every run-directory file, keyed by file kind."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "rigbench run directory",
        "schema_version": SCHEMA_VERSION,
        "files": {
            "manifest.json": RunManifest.model_json_schema(),
            "records/<shard>.jsonl (one per line)": RequestRecord.model_json_schema(),
            "telemetry.jsonl (one per line)": TelemetrySnapshot.model_json_schema(),
        },
    }
