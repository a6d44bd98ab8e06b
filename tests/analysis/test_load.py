"""Loading run directories: bulk validation, merged shards, and every kind of bad input."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from analysis.load import load_run, read_token_counts
from analysis.report import write_report
from core.errors import RunDirError
from core.rundir import RunDir, columns


def _two_shard_run(kit):
    t0 = kit.T0
    shards = {
        "p0": [kit.record("a", t_start=t0 + 101, shard="p0"), kit.record("b", t_start=t0 + 102, shard="p0")],
        "p1": [kit.record("c", t_start=t0 + 103, shard="p1", error_kind="timeout")],
    }
    return kit.make_run("r1", [kit.window()], shards)


def test_shards_are_merged_and_timings_flattened(kit):
    run = load_run(_two_shard_run(kit))
    frame = run.records
    assert sorted(frame["request_id"]) == ["a", "b", "c"]
    assert set(frame["shard"]) == {"p0", "p1"}
    assert frame.loc[frame["request_id"] == "a", "timings_predicted_per_second"].item() == 10.0
    assert frame.loc[frame["request_id"] == "c", "error_kind"].item() == "timeout"
    assert frame["content_chunks"].notna().all()  # RecordWriter omits defaults only when None
    assert run.warnings == []


def test_truncated_last_line_is_skipped_and_counted(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p0.jsonl"
    shard.write_text(shard.read_text() + '{"schema_version":1,"request_id":"half')
    run = load_run(path)
    assert len(run.records) == 3
    assert run.warnings == ["p0.jsonl:3: truncated last line skipped"]


def test_damage_before_the_last_line_is_an_error_naming_the_line(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p0.jsonl"
    lines = shard.read_text().splitlines()
    shard.write_text(lines[0][:40] + "\n" + lines[1] + "\n")
    with pytest.raises(RunDirError, match=r"p0\.jsonl:1: .*damaged"):
        load_run(path)


def test_wrong_type_in_a_column_names_file_line_and_field(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p0.jsonl"
    lines = shard.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["t_end"] = "soon"
    shard.write_text(lines[0] + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(RunDirError, match=r"p0\.jsonl:2: t_end"):
        load_run(path)


def test_unknown_record_schema_version_is_a_clear_error(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p1.jsonl"
    record = json.loads(shard.read_text())
    record["schema_version"] = 2
    shard.write_text(json.dumps(record) + "\n")
    with pytest.raises(RunDirError, match="schema_version 2 is not supported"):
        load_run(path)


def test_unknown_manifest_schema_version_is_a_clear_error(kit):
    path = _two_shard_run(kit)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["schema_version"] = 9
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RunDirError, match="schema_version 9 is not supported"):
        load_run(path)


def test_missing_required_key_is_an_error(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p1.jsonl"
    record = json.loads(shard.read_text())
    del record["category"]
    shard.write_text(json.dumps(record) + "\n")
    with pytest.raises(RunDirError, match=r"p1\.jsonl:1: .*category"):
        load_run(path)


def test_unknown_key_is_caught(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p1.jsonl"
    record = json.loads(shard.read_text())
    record["colour"] = "blue"
    shard.write_text(json.dumps(record) + "\n")
    with pytest.raises(RunDirError, match=r"p1\.jsonl:1: unknown key .colour."):
        load_run(path)


def test_missing_shard_is_a_counted_warning(kit):
    path = _two_shard_run(kit)
    RunDir(path).update_manifest(load=RunDir(path).read_manifest().load.model_copy(update={"processes": 3}))
    run = load_run(path)
    assert any("2 record shards found, 3 expected" in w for w in run.warnings)


def test_gzip_shards_read_like_plain_ones(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p0.jsonl"
    (path / "records" / "p0.jsonl.gz").write_bytes(gzip.compress(shard.read_bytes()))
    shard.unlink()
    assert len(load_run(path).records) == 3


def test_not_a_run_directory(tmp_path):
    with pytest.raises(RunDirError, match="no such directory"):
        load_run(tmp_path / "nope")
    with pytest.raises(RunDirError, match="no manifest.json"):
        load_run(tmp_path)


def test_run_without_records_reports_zero_requests_and_says_why(kit):
    path = kit.make_run("empty", [kit.window()], {})
    run = load_run(path)
    assert len(run.records) == 0
    assert "the run has no request records" in run.warnings
    report = write_report([path])
    assert "the run has no request records" in report.read_text()
    summary = json.loads((path / "summary.json").read_text())
    step = summary["runs"][0]["steps"][0]
    assert step["requests"] == 0 and step["aggregate_tok_s"]["value"] is None  # nothing ran: absent, not 0
    # no throughput -> no $/Mtok at all, rather than a zero or an infinity
    assert all(cost["value"] is None for cost in summary["runs"][0]["usd_per_mtok"][0].values())


def test_unknown_key_in_a_middle_line_is_caught_and_extra_timings_keys_are_kept_out(kit):
    path = _two_shard_run(kit)
    shard = path / "records" / "p0.jsonl"
    first, second = (json.loads(line) for line in shard.read_text().splitlines())
    first["timings"]["cache_n"] = 7  # llama-server adds keys to timings; RequestRecord allows them
    shard.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    run = load_run(path)
    assert "timings_cache_n" not in run.records.columns and len(run.records) == 3
    middle = dict(first, request_id="m", colour="blue")
    shard.write_text(json.dumps(first) + "\n" + json.dumps(middle) + "\n" + json.dumps(second) + "\n")
    with pytest.raises(RunDirError, match=r"p0\.jsonl:2: unknown key 'colour'"):
        load_run(path)


def test_an_ended_run_is_read_from_its_side_file_until_a_shard_changes(kit, monkeypatch):
    monkeypatch.setattr(columns, "SIDE_FILE_MIN_RECORDS", 1)
    path = _two_shard_run(kit)
    shard = path / "records" / "p0.jsonl"
    shard.write_text(shard.read_text() + shard.read_text().splitlines()[0] + "\n")  # "a" held twice
    first = load_run(path)  # from the shards; the side file written for the next read
    assert (path / columns.SIDE_FILE).stat().st_mode & 0o077 == 0
    run_dir = RunDir(path)
    cached = columns.read_record_table(run_dir, run_dir.read_manifest())
    assert cached.from_side_file and cached.shards == ["p0.jsonl", "p1.jsonl"] and cached.duplicates == 1
    again = load_run(path)
    pd.testing.assert_frame_equal(again.records, first.records)
    assert again.warnings == first.warnings == ["1 duplicate request_id across shards; each counted once"]

    with open(path / "records" / "p1.jsonl", "a") as handle:  # appended to: the side file is stale
        handle.write(kit.record("d", t_start=kit.T0 + 104, shard="p1").model_dump_json(exclude_none=True) + "\n")
    assert not columns.read_record_table(run_dir, run_dir.read_manifest()).from_side_file
    assert sorted(load_run(path).records["request_id"]) == ["a", "b", "c", "d"]

    (path / columns.SIDE_FILE).write_bytes(b"not arrow")  # damaged: the shards are read instead
    assert sorted(load_run(path).records["request_id"]) == ["a", "b", "c", "d"]
    assert columns.read_record_table(run_dir, run_dir.read_manifest()).from_side_file  # and it was rewritten


def test_a_running_run_gets_no_side_file_until_it_ends(kit, monkeypatch):
    monkeypatch.setattr(columns, "SIDE_FILE_MIN_RECORDS", 1)
    path = _two_shard_run(kit)
    RunDir(path).update_manifest(status="running")
    load_run(path)
    assert not (path / columns.SIDE_FILE).exists()
    written = columns.write_record_table(RunDir(path))  # as the load generator ends a run
    assert written == path / columns.SIDE_FILE
    assert sorted(load_run(path).records["request_id"]) == ["a", "b", "c"]


def test_a_small_run_is_left_as_it_was_written(kit):
    path = _two_shard_run(kit)
    load_run(path)
    assert not (path / columns.SIDE_FILE).exists()


def test_token_counts_keep_the_last_count_of_a_request_and_skip_a_cut_last_line(kit) -> None:
    """One reader of token_counts.jsonl, plain or packed: a request counted twice keeps its later count and a last
    line the counter was killed in the middle of is skipped, each said once; any other bad line names file:line."""
    from core.rundir.compact import gzip_file

    path = kit.make_run("counted", [kit.window()], {"p0": [kit.record("a", t_start=kit.T0 + 101)]})
    counts = path / RunDir.TOKEN_COUNTS
    counts.write_text('{"request_id": "a", "streamed_tokens": 3}\n{"request_id": "a", "streamed_tokens": 4}\n'
                      '{"request_id": "b", "stream')
    warnings: list[str] = []
    assert read_token_counts(counts, warnings) == {"a": 4}
    assert warnings == ["token_counts.jsonl:3: truncated last line skipped",
                        "token_counts.jsonl: 1 request_id counted twice; the last count is used"]
    gzip_file(counts)
    packed: list[str] = []
    assert read_token_counts(counts, packed) == {"a": 4}
    assert packed == ["token_counts.jsonl.gz:3: truncated last line skipped", warnings[1]]
