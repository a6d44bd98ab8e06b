"""The run directory: the contract between the stages that write a run and those that read it.

    models.py    what each file holds (manifest, request records, telemetry), schema version 1
    files.py     the folder on disk: create, validate on read, append-only record shards
    jsonl.py     a run's JSONL files read plain or gzipped (``rigbench compact``), one way for every reader
    columns.py   every record as one Arrow table, in bulk: from the shards, or the run's side file
    manifest.py  the one builder of a new run's manifest
    server_ended.py  a local server's exit, written by the process that started it for the sweep to read
    check.py     every problem of a run directory, listed (``rigbench check``)
    compact.py   a finished run made small enough to commit (``rigbench compact``)
    schema.py    the JSON Schema generated from the models (``rigbench schema``)

The names below are the public surface; everything else is imported by its module's path.
"""

from core.private_files import private_umask
from core.rundir.files import RecordWriter, RunDir, write_json_atomic
from core.rundir.manifest import new_manifest, new_run_id, server_at, utc_now
from core.rundir.models import (
    SCHEMA_VERSION,
    BuildInfo,
    DecodeBytes,
    KvWidth,
    LoadSettings,
    MachineInfo,
    ModelInfo,
    Phase,
    RequestRecord,
    RigInfo,
    RunManifest,
    RunStatus,
    ServerInfo,
    ServerTimings,
    StepWindow,
    TelemetrySnapshot,
    TokenCount,
    TokenCountMethod,
)

__all__ = [
    "SCHEMA_VERSION",
    "BuildInfo",
    "DecodeBytes",
    "KvWidth",
    "LoadSettings",
    "MachineInfo",
    "ModelInfo",
    "Phase",
    "RecordWriter",
    "RequestRecord",
    "RigInfo",
    "RunDir",
    "RunManifest",
    "RunStatus",
    "ServerInfo",
    "ServerTimings",
    "StepWindow",
    "TelemetrySnapshot",
    "TokenCount",
    "TokenCountMethod",
    "new_manifest",
    "new_run_id",
    "private_umask",
    "server_at",
    "utc_now",
    "write_json_atomic",
]
