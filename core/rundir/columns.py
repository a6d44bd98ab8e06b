"""A run's request records as one Arrow table: parsed in bulk from the shards, or read from its side file.

Why not ``RunDir.read_records``: it validates each record with pydantic, about 30 µs a line,
so a million-record run would take half a minute. Here a shard is parsed by pyarrow's JSON
reader against an explicit schema (types are checked as it parses, in C++); the schema
version, required keys and unknown keys are checked per column; ``timings`` (which may carry
extra llama-server keys) is flattened to ``timings_<key>`` columns; and the first and last
line of each shard also go through pydantic (enums such as ``phase``).

Damage policy (same as ``RunDir.read_records``): a truncated last line of a shard (a writer
killed mid-line) is skipped and counted as a warning; any other bad line is a
``RunDirError`` naming the file and line (found by re-reading the shard line by line, only
on that error path). A request id held twice is counted once (the first), and counted.

Why a side file: even in C++ a million JSON lines take seconds to parse on one core, while
the same table in Arrow's own file format (``records.arrow`` beside ``manifest.json``,
uncompressed, memory-mapped on read) takes milliseconds. It holds the validated, deduplicated
table and the warnings reading the shards gave; it is written when a run has ended (by
:func:`write_record_table`, and by :func:`read_record_table` when it has just parsed the shards
of an ended run of at least ``SIDE_FILE_MIN_RECORDS`` records: smaller runs parse in well under
a second and their folders stay as they were written). How staleness is detected: the side
file names every shard it was built from with its size and modification time (ns), and the
table layout it holds; when the shards on disk now differ in any of these (a shard appended
to, added, removed, gzipped or copied without its times) or the layout is another, the side
file is stale: the shards are read, and the side file rewritten.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from pydantic import ValidationError

from core.errors import RunDirError
from core.rundir.files import RunDir
from core.rundir.models import SCHEMA_VERSION, RequestRecord, RunManifest
from core.validation import describe_validation_error

REQUIRED = ("request_id", "shard", "step", "users", "phase", "category", "t_start", "t_end")
TEXT_COLUMNS = (
    "request_id", "shard", "phase", "category", "error_kind", "error_message", "tokens_counted_by", "partial_text",
    "conversation",
)
# Repeated strings, held dictionary-encoded (pandas categories).
CATEGORY_COLUMNS = ("shard", "phase", "category", "error_kind", "tokens_counted_by")
NUMBER_COLUMNS = (
    "step",
    "users",
    "replica",
    "repeat",
    "context_tokens",
    "t_intended",
    "t_start",
    "t_first_token",
    "t_last_token",
    "t_end",
    "content_chunks",
    "http_status",
    "prompt_tokens",
    "completion_tokens",
    "streamed_tokens",
    "first_chunk_tokens",
    "window_chunks",
    "window_tokens",
    "turn",
    "cached_tokens",
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
RECORD_SCHEMA = pa.schema(
    [("schema_version", pa.int64())]
    + [(key, pa.string()) for key in TEXT_COLUMNS]
    + [(key, pa.float64()) for key in NUMBER_COLUMNS]
    + [("timings", pa.struct([(key, pa.float64()) for key in TIMING_KEYS])), ("interrupted", pa.bool_())]
)
BLOCK_SIZE = 8 << 20
SIDE_FILE = "records.arrow"
SIDE_FILE_MIN_RECORDS = 100_000
# The flat table's layout; a side file of another layout is stale. Change it with the columns.
TABLE_LAYOUT = 4
METADATA_KEY = b"rigbench"


@dataclass
class RecordTable:
    """Every record of a run, flat; the shards it came from and what reading them found."""

    table: pa.Table
    shards: list[str]
    warnings: list[str] = field(default_factory=list)
    duplicates: int = 0  # records left out: their request id was held by an earlier record
    from_side_file: bool = False


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


def _first_bad_line(path: Path, data: bytes) -> RunDirError:
    """The slow path, only after the bulk reader refused the shard: pydantic line by line."""
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            RequestRecord.model_validate_json(line)
        except ValidationError as error:
            return RunDirError(
                describe_validation_error(error, f"{path}:{number}") + "; only a shard's last "
                "line may be cut short, so this shard is damaged: restore or remove it"
            )
    return RunDirError(f"{path}: cannot be read as RequestRecord lines; check it with `rigbench schema`")


def _trim_truncated_tail(path: Path, data: bytes, warnings: list[str]) -> bytes:
    if data.endswith(b"\n"):
        return data
    cut = data.rfind(b"\n") + 1
    try:
        json.loads(data[cut:])
        return data
    except ValueError:
        line_number = data.count(b"\n") + 1
        warnings.append(f"{path.name}:{line_number}: truncated last line skipped")
        return data[:cut]


def _check_edges(path: Path, data: bytes) -> None:
    """Full pydantic validation of a shard's first and last record (unknown keys, enums)."""
    last_start = data.rfind(b"\n", 0, max(len(data) - 1, 0)) + 1
    lines = [line for line in (data[: data.find(b"\n")], data[last_start:]) if line.strip()]
    for line in lines:
        try:
            RequestRecord.model_validate_json(line)
        except ValidationError:
            raise _first_bad_line(path, data) from None


def read_shard_table(path: Path, warnings: list[str]) -> pa.Table | None:
    """One shard as a flat Arrow table (``timings`` split into ``timings_<key>``); None when empty."""
    data = _trim_truncated_tail(path, _shard_bytes(path), warnings)
    if len(data) < 4096 and not data.strip():
        warnings.append(f"{path.name}: empty shard (no records)")
        return None
    try:
        table = pa_json.read_json(
            pa.BufferReader(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=BLOCK_SIZE),
            parse_options=pa_json.ParseOptions(explicit_schema=RECORD_SCHEMA, unexpected_field_behavior="infer"),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise _first_bad_line(path, data) from None
    _check_schema_version(table, path)
    _check_required(table, path)
    _check_unknown_keys(table, path)
    _check_edges(path, data)
    return _flatten(table)


def _check_unknown_keys(table: pa.Table, path: Path) -> None:
    """Keys outside RECORD_SCHEMA arrive as inferred columns (timings may carry extra keys)."""
    for name in set(table.schema.names) - set(RECORD_SCHEMA.names):
        present = pc.is_valid(table.column(name))
        if pc.any(present).as_py():
            line = pc.index(present, True).as_py() + 1
            raise RunDirError(
                f"{path}:{line}: unknown key {name!r}; expected RequestRecord keys only (schema version "
                f"{SCHEMA_VERSION}): was this run written by a newer rigbench?"
            )


def _flatten(table: pa.Table) -> pa.Table:
    """Known top-level columns plus ``timings_<key>``, identical across shards for concat."""
    timings = table.column("timings")
    flat = table.select([name for name in RECORD_SCHEMA.names if name != "timings"])
    for key in TIMING_KEYS:
        flat = flat.append_column(f"timings_{key}", pc.struct_field(timings, key))
    return flat


def _check_schema_version(table: pa.Table, path: Path) -> None:
    versions = pc.unique(table.column("schema_version")).to_pylist()
    if versions != [SCHEMA_VERSION]:
        unknown = sorted(str(v) for v in versions if v != SCHEMA_VERSION)
        raise RunDirError(
            f"{path}: record schema_version {', '.join(unknown)} is not supported (this rigbench reads "
            f"version {SCHEMA_VERSION}); upgrade rigbench or analyse the run with the version that wrote it"
        )


def _check_required(table: pa.Table, path: Path) -> None:
    for key in REQUIRED:
        column = table.column(key)
        if column.null_count:
            bad = pc.index(pc.is_null(column), True).as_py()
            raise RunDirError(f"{path}:{bad + 1}: required key {key!r} is missing; expected a RequestRecord line")


def _first_of_each_id(table: pa.Table) -> tuple[pa.Table, int]:
    """Each request id once, the first record that holds it (shards in name order, lines in order),
    and how many records were left out."""
    if not table.num_rows:
        return table, 0
    codes = pc.dictionary_encode(table.column("request_id").combine_chunks()).indices.to_numpy()
    _, first = np.unique(codes, return_index=True)
    duplicated = table.num_rows - len(first)
    return (table.take(np.sort(first)) if duplicated else table), duplicated


def _encode_categories(table: pa.Table) -> pa.Table:
    """One chunk, repeated strings dictionary-encoded in order of first appearance."""
    table = table.combine_chunks()
    for key in CATEGORY_COLUMNS:
        index = table.schema.get_field_index(key)
        table = table.set_column(index, key, pc.dictionary_encode(table.column(key)))
    return table


def empty_table() -> pa.Table:
    """The flat layout with no rows."""
    return _encode_categories(_flatten(RECORD_SCHEMA.empty_table()))


def parse_shards(run: RunDir) -> RecordTable:
    """Every shard of ``run`` parsed and validated (see the module's docstring), as one table."""
    warnings: list[str] = []
    paths = run.shard_paths()
    tables = [table for path in paths if (table := read_shard_table(path, warnings)) is not None]
    table = pa.concat_tables(tables) if tables else _flatten(RECORD_SCHEMA.empty_table())
    table, duplicates = _first_of_each_id(table)
    return RecordTable(_encode_categories(table), [path.name for path in paths], warnings, duplicates)


def _fingerprint(run: RunDir) -> list[list[object]]:
    """[name, size, mtime_ns] of each shard now on disk, in name order."""
    found = []
    for path in run.shard_paths():
        stat = path.stat()
        found.append([path.name, stat.st_size, stat.st_mtime_ns])
    return found


def side_file_path(run: RunDir) -> Path:
    return run.path / SIDE_FILE


def write_side_file(run: RunDir, records: RecordTable, fingerprint: list[list[object]]) -> Path:
    """``records`` as the run's side file, written beside then renamed (readers never see half), 0600."""
    path = side_file_path(run)
    about = {
        "layout": TABLE_LAYOUT,
        "schema_version": SCHEMA_VERSION,
        "shards": fingerprint,
        "warnings": records.warnings,
        "duplicates": records.duplicates,
    }
    table = records.table.replace_schema_metadata({METADATA_KEY: json.dumps(about).encode()})
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_record_table(run: RunDir) -> Path:
    """Parse the shards of an ended run and write its side file; returns its path.

    Called as a run ends (its shards closed), so that the first analysis is as quick as the next."""
    fingerprint = _fingerprint(run)
    return write_side_file(run, parse_shards(run), fingerprint)


def read_side_file(run: RunDir, fingerprint: list[list[object]]) -> RecordTable | None:
    """The side file's table when it was built from exactly the shards in ``fingerprint``; else None."""
    path = side_file_path(run)
    if not path.is_file():
        return None
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        about = json.loads((table.schema.metadata or {})[METADATA_KEY])
        current = [about["layout"], about["schema_version"], about["shards"]] == [
            TABLE_LAYOUT, SCHEMA_VERSION, fingerprint]
        warnings, duplicates = list(about["warnings"]), int(about["duplicates"])
    except (OSError, KeyError, TypeError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
        return None  # damaged or foreign: the shards are the truth, and it is rewritten from them
    table = table.replace_schema_metadata(None)
    if not current or not table.schema.equals(empty_table().schema):
        return None
    return RecordTable(table, [str(entry[0]) for entry in fingerprint], warnings, duplicates, True)


def read_record_table(run: RunDir, manifest: RunManifest) -> RecordTable:
    """The run's records from its side file when that is up to date, else from the shards (and a
    side file written for the next read when the run has ended and is large enough to gain)."""
    fingerprint = _fingerprint(run)
    cached = read_side_file(run, fingerprint)
    if cached is not None:
        return cached
    records = parse_shards(run)
    if manifest.status != "running" and records.table.num_rows >= SIDE_FILE_MIN_RECORDS:
        with contextlib.suppress(OSError):  # a read-only copy of a run: read from its shards each time
            write_side_file(run, records, fingerprint)
    return records
