"""Run directories into pandas, validated in bulk.

Why not ``RunDir.read_records``: it validates each record with pydantic, about 30 µs a line,
so a million-record run would take half a minute. Here a shard is parsed in one ``orjson``
call, the columns are pulled out as arrays, and the record schema is checked per column
(schema version, required keys, numeric types). The manifest still goes through pydantic
(``RunDir.read_manifest``), since it is one small file.

Damage policy (same as ``RunDir.read_records``): a truncated last line of a shard (a writer
killed mid-line) is skipped and counted as a warning; any other unreadable line is a
``RunDirError`` naming the file and line.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
from pydantic import ValidationError

from rigbench.errors import RunDirError
from rigbench.rundir import SCHEMA_VERSION, RunDir, RunManifest, TelemetrySnapshot

REQUIRED = ("request_id", "shard", "step", "users", "phase", "category", "t_start", "t_end")
TEXT_COLUMNS = ("request_id", "shard", "phase", "category", "error_kind", "error_message")
CATEGORY_COLUMNS = ("shard", "phase", "category", "error_kind")
NUMBER_COLUMNS = (
    "step",
    "users",
    "context_tokens",
    "t_start",
    "t_first_token",
    "t_last_token",
    "t_end",
    "content_chunks",
    "http_status",
    "prompt_tokens",
    "completion_tokens",
)
TIMING_KEYS = (
    "prompt_n",
    "prompt_ms",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
)
# Defaults of RequestRecord for keys RecordWriter leaves out (exclude_none drops only None).
NUMBER_DEFAULTS = {"context_tokens": 0.0, "content_chunks": 0.0}


@dataclass
class LoadedRun:
    """One validated run: its manifest, one row per request record, telemetry and warnings."""

    path: Path
    manifest: RunManifest
    records: pd.DataFrame
    telemetry: list[TelemetrySnapshot] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """A short name for tables and plot legends: arm or drafter, instance type, run id."""
        manifest = self.manifest
        parts = [manifest.rig.instance_type or manifest.rig.kind]
        if manifest.load is not None and manifest.load.arm:
            parts.append(manifest.load.arm)
        elif manifest.drafter is not None:
            parts.append("drafter")
        parts.append(manifest.run_id)
        return " ".join(parts)


def _shard_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if not path.name.endswith(".gz"):
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as error:
        raise RunDirError(
            f"{path}: the gzip stream is damaged or cut short ({error}); re-archive the shard from the .jsonl original"
        ) from None


def _locate_bad_line(path: Path, lines: list[bytes]) -> RunDirError:
    for number, line in enumerate(lines, 1):
        try:
            if not isinstance(orjson.loads(line), dict):
                raise orjson.JSONDecodeError("not a JSON object", line.decode(errors="replace"), 0)
        except orjson.JSONDecodeError as error:
            return RunDirError(
                f"{path}:{number}: not a JSON record ({error}); only a shard's last line may be cut short, "
                "so this shard is damaged: restore it or remove it and say so in the report"
            )
    return RunDirError(f"{path}: cannot be parsed as JSON lines")


def read_shard_rows(path: Path, warnings: list[str]) -> list[dict]:
    """The JSON objects of one shard, in order; a truncated last line becomes a warning."""
    data = _shard_bytes(path)
    if not data.strip():
        warnings.append(f"{path.name}: empty shard (no records)")
        return []
    lines = data.split(b"\n")
    tail = lines.pop() if lines else b""
    if b"\n\n" in data or b"\r" in data:
        lines = [line for line in (piece.strip() for piece in lines) if line]
    if tail.strip():
        try:
            orjson.loads(tail)
            lines.append(tail)
        except orjson.JSONDecodeError:
            warnings.append(f"{path.name}:{len(lines) + 1}: truncated last line skipped")
    if not lines:
        return []
    try:
        rows = orjson.loads(b"[" + b",".join(lines) + b"]")
    except orjson.JSONDecodeError:
        raise _locate_bad_line(path, lines) from None
    if not all(type(row) is dict for row in rows):
        raise _locate_bad_line(path, lines)
    return rows


def _number_column(rows: list[dict], key: str, source: Path) -> np.ndarray:
    default = NUMBER_DEFAULTS.get(key)
    values = [row.get(key, default) for row in rows]
    try:
        return np.array(values, dtype=float)
    except (TypeError, ValueError):
        bad = next(i for i, v in enumerate(values) if v is not None and not isinstance(v, int | float))
        raise RunDirError(
            f"{source}:{bad + 1}: {key} is {values[bad]!r}, expected a number; "
            "the shard was not written by RecordWriter"
        ) from None


def rows_to_frame(rows: list[dict], source: Path) -> pd.DataFrame:
    """Columns of the records with ``timings`` flattened to ``timings_<key>``; validated."""
    versions = {row.get("schema_version") for row in rows}
    if versions != {SCHEMA_VERSION}:
        unknown = sorted(str(v) for v in versions - {SCHEMA_VERSION})
        raise RunDirError(
            f"{source}: record schema_version {', '.join(unknown)} is not supported (this rigbench reads "
            f"version {SCHEMA_VERSION}); upgrade rigbench or analyse the run with the version that wrote it"
        )
    columns: dict[str, object] = {}
    for key in TEXT_COLUMNS:
        values = [row.get(key) for row in rows]
        if key in REQUIRED and None in values:
            bad = values.index(None)
            raise RunDirError(f"{source}:{bad + 1}: required key {key!r} is missing; expected a RequestRecord line")
        columns[key] = pd.Categorical(values) if key in CATEGORY_COLUMNS else values
    for key in NUMBER_COLUMNS:
        array = _number_column(rows, key, source)
        if key in REQUIRED and np.isnan(array).any():
            bad = int(np.flatnonzero(np.isnan(array))[0])
            raise RunDirError(f"{source}:{bad + 1}: required key {key!r} is missing; expected a RequestRecord line")
        columns[key] = array
    columns["interrupted"] = np.array([bool(row.get("interrupted", False)) for row in rows], dtype=bool)
    timings = [row.get("timings") or {} for row in rows]
    for key in TIMING_KEYS:
        columns[f"timings_{key}"] = _number_column(timings, key, source)
    frame = pd.DataFrame(columns)
    for key in ("step", "users"):
        frame[key] = frame[key].astype(np.int64)
    return frame


def _expected_shards(manifest: RunManifest) -> int | None:
    return manifest.load.processes if manifest.load is not None else None


def load_run(path: Path | str) -> LoadedRun:
    """Read and validate one run directory; raises RunDirError with file and line on damage."""
    run_dir = RunDir(path)
    if not run_dir.path.is_dir():
        raise RunDirError(f"{run_dir.path}: no such directory; pass a run directory such as runs/<run-id>")
    manifest = run_dir.read_manifest()
    warnings: list[str] = []
    frames = []
    shard_paths = run_dir.shard_paths()
    for shard_path in shard_paths:
        rows = read_shard_rows(shard_path, warnings)
        if rows:
            frames.append(rows_to_frame(rows, shard_path))
    expected = _expected_shards(manifest)
    if expected is not None and len(shard_paths) < expected:
        warnings.append(
            f"{len(shard_paths)} record shard(s) found, {expected} expected (load.processes): "
            "a load process wrote nothing or its shard is missing; figures cover the shards present"
        )
    if frames:
        records = pd.concat(frames, ignore_index=True)
        for column in CATEGORY_COLUMNS:
            records[column] = records[column].astype("category")
    else:
        records = _empty()
        warnings.append("the run has no request records")
    duplicated = int(records["request_id"].duplicated().sum()) if len(records) else 0
    if duplicated:
        warnings.append(f"{duplicated} duplicate request_id(s) across shards; each counted once")
        records = records.drop_duplicates("request_id", keep="first").reset_index(drop=True)
    try:
        telemetry = run_dir.read_telemetry()
    except (ValidationError, ValueError) as error:
        telemetry = []
        warnings.append(f"telemetry.jsonl unreadable, ignored ({str(error).splitlines()[0]})")
    warnings.extend(f"manifest: {text}" for text in manifest.warnings)
    return LoadedRun(run_dir.path, manifest, records, telemetry, warnings)


def _empty() -> pd.DataFrame:
    columns: dict[str, object] = {key: pd.Categorical([]) for key in CATEGORY_COLUMNS}
    columns.update({key: [] for key in TEXT_COLUMNS if key not in CATEGORY_COLUMNS})
    columns.update({key: np.array([], dtype=float) for key in NUMBER_COLUMNS})
    columns["interrupted"] = np.array([], dtype=bool)
    columns.update({f"timings_{key}": np.array([], dtype=float) for key in TIMING_KEYS})
    frame = pd.DataFrame(columns)
    for key in ("step", "users"):
        frame[key] = frame[key].astype(np.int64)
    return frame


def load_runs(paths: list[Path]) -> list[LoadedRun]:
    if not paths:
        raise RunDirError("no run directory given; pass one or more runs/<run-id> folders")
    return [load_run(path) for path in paths]
