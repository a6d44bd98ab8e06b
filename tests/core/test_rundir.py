"""Run-directory models: round trip, validation on read, schema version, committed schema."""

from __future__ import annotations

import json

import pytest

from core.errors import RunDirError
from core.rundir import RequestRecord, RunDir, RunManifest, ServerTimings, new_run_id, utc_now
from core.rundir.schema import SCHEMA_FILE, schema_text


def make_run(tmp_path) -> RunDir:
    return RunDir.create(tmp_path, RunManifest(run_id=new_run_id("t"), created_at=utc_now(), profile="tiny"))


def record(i: int, **changes) -> RequestRecord:
    base = dict(request_id=f"r{i}", shard="p0", step=0, users=1, phase="measure", category="chat",
                t_start=100.0 + i, t_first_token=100.1 + i, t_last_token=100.5 + i, t_end=100.6 + i,
                content_chunks=5, http_status=200, prompt_tokens=10, completion_tokens=5,
                timings=ServerTimings(predicted_n=5, predicted_per_second=12.5, draft_n=0))
    base.update(changes)
    return RequestRecord(**base)


def test_round_trip_and_private_permissions(tmp_path):
    run = make_run(tmp_path)
    with run.open_shard("p0") as writer:
        for i in range(3):
            writer.write(record(i))
    assert [r.request_id for r in run.read_records()] == ["r0", "r1", "r2"]
    assert run.read_records()[0].timings.predicted_per_second == 12.5
    assert run.path.stat().st_mode & 0o077 == 0
    assert run.shard_path("p0").stat().st_mode & 0o077 == 0
    manifest = run.update_manifest(status="complete")
    assert run.read_manifest().status == "complete" == manifest.status


def test_truncated_last_line_is_skipped_and_counted(tmp_path):
    run = make_run(tmp_path)
    with run.open_shard("p0") as writer:
        writer.write(record(0))
    with open(run.shard_path("p0"), "a") as handle:
        handle.write(record(1).model_dump_json()[:40])
    warnings: list[str] = []
    assert len(run.read_records(warnings)) == 1
    assert warnings == ["p0.jsonl:2: truncated last line skipped"]


def test_damage_in_the_middle_is_an_error_naming_the_line(tmp_path):
    run = make_run(tmp_path)
    with open(run.shard_path("p0"), "w") as handle:
        handle.write('{"bad": 1}\n' + record(1).model_dump_json() + "\n")
    with pytest.raises(RunDirError, match=r"p0.jsonl:1: request_id: Field required"):
        run.read_records()


def test_unknown_schema_version_is_refused(tmp_path):
    run = make_run(tmp_path)
    data = json.loads(run.manifest_path.read_text())
    data["schema_version"] = 99
    run.manifest_path.write_text(json.dumps(data))
    with pytest.raises(RunDirError, match="schema_version 99 is not supported"):
        run.read_manifest()


def test_missing_manifest_and_unknown_keys(tmp_path):
    with pytest.raises(RunDirError, match="no manifest.json"):
        RunDir(tmp_path).read_manifest()
    run = make_run(tmp_path)
    data = json.loads(run.manifest_path.read_text())
    data["surprise"] = True
    run.manifest_path.write_text(json.dumps(data))
    with pytest.raises(RunDirError, match="surprise: unknown key"):
        run.read_manifest()


def test_committed_schema_matches_models():
    assert SCHEMA_FILE.read_text() == schema_text(), "run `rigbench schema --write` and commit the result"


def test_records_validate_against_committed_json_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_FILE.read_text())["files"]["records/<shard>.jsonl (one per line)"]
    jsonschema.validate(json.loads(record(0).model_dump_json(exclude_none=True)), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"request_id": 1}, schema)
