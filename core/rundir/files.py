"""The run directory on disk: create, read and validate, append records and telemetry.

::

    runs/<run-id>/
      manifest.json          RunManifest, written atomically (temp file + rename)
      records/<shard>.jsonl  RequestRecord per line, one shard per load process,
                             append-only, flushed per line (.jsonl.gz when archived)
      telemetry.jsonl        TelemetrySnapshot per line (/metrics and /slots; .jsonl.gz when archived)
      token_counts.jsonl     TokenCount per line: cut requests counted by /tokenize after the run
      timelines/<shard>.jsonl  with --timeline: {"request_id", "chunks": [arrival times]} per line
      records.arrow          the records as one validated table, once the run has ended (core.rundir.columns)
      report.md, summary.json, plots/   written by analysis

Every file carries or sits beside ``schema_version``; reading validates, and a version this
code does not know is a clear error rather than a guess.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from core.errors import RunDirError
from core.rundir.jsonl import forms, iter_lines, packed
from core.rundir.models import SCHEMA_VERSION, RequestRecord, RunManifest, TelemetrySnapshot, TokenCount
from core.validation import describe_validation_error
from core.whole_files import write_whole
from core.wording import counted


def write_json_atomic(path: Path, payload: str) -> None:
    """Write via a temporary file and rename, so readers never see half a file (created 0600, synced): on a
    full disk the file keeps what it held and no temporary is left (``core.whole_files``)."""
    write_whole(path, payload, private=True, sync=True)


class RunDir:
    """A run directory on disk. Creating one writes its manifest; opening one validates it."""

    MANIFEST = "manifest.json"
    RECORDS = "records"
    TELEMETRY = "telemetry.jsonl"
    TOKEN_COUNTS = "token_counts.jsonl"
    TIMELINES = "timelines"

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
        """(line number, text, is_last) of a shard, gzip or plain (``core.rundir.jsonl``)."""
        return iter_lines(path)

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
        """Every snapshot, from ``telemetry.jsonl`` or its packed ``.gz`` (both, packed first, where both are)."""
        return [TelemetrySnapshot.model_validate_json(line) for path in forms(self.path / self.TELEMETRY)
                for _, line, _ in iter_lines(path) if line.strip()]

    def write_token_counts(self, counts: list[TokenCount]) -> None:
        """All of a run's /tokenize counts at once (atomic), replacing an earlier pass's, packed or not."""
        write_json_atomic(self.path / self.TOKEN_COUNTS, "".join(count.model_dump_json() + "\n" for count in counts))
        packed(self.path / self.TOKEN_COUNTS).unlink(missing_ok=True)

    def read_token_counts(self, warnings: list[str] | None = None) -> dict[str, TokenCount]:
        """The /tokenize counts by request id, from ``token_counts.jsonl`` or its packed ``.gz`` (both, packed first,
        where both are). A last line cut short (the counter killed mid-line) is skipped with a line in ``warnings``
        as a shard's is, a request counted twice keeps its last count (said there too); any other bad line is an
        error naming file and line."""
        counts: dict[str, TokenCount] = {}
        repeated = 0
        for path in forms(self.path / self.TOKEN_COUNTS):
            for number, line, is_last in iter_lines(path):
                if not line.strip():
                    continue
                try:
                    count = TokenCount.model_validate_json(line)
                except ValidationError as error:
                    if is_last and not line.endswith("\n"):
                        if warnings is not None:
                            warnings.append(f"{path.name}:{number}: truncated last line skipped")
                        continue
                    raise RunDirError(describe_validation_error(error, f"{path}:{number}") + "; expected TokenCount "
                                      "lines: remove the line or re-count with the server's /tokenize") from None
                repeated += count.request_id in counts
                counts[count.request_id] = count
        if repeated and warnings is not None:
            warnings.append(f"{self.TOKEN_COUNTS}: {counted(repeated, 'request_id')} counted twice; the last count is "
                            "used")
        return counts


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
