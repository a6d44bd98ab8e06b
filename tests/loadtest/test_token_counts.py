"""Cut requests counted by the server's /tokenize after the run, and a server without one."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.errors import RunDirError
from core.rundir import LoadSettings, RequestRecord, RunDir, new_manifest
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.token_counts import count_cut_requests


def run_with(tmp_path: Path, records: list[RequestRecord]) -> RunDir:
    settings = LoadSettings(user_steps=[1], warmup_seconds=0, measure_seconds=1, max_tokens=16)
    run = RunDir.create(tmp_path / "runs", new_manifest("t", "t", load=settings, server=None))
    with run.open_shard("host-1") as writer:
        for record in records:
            writer.write(record)
    return run


def record(request_id: str, **fields: object) -> RequestRecord:
    base = {"request_id": request_id, "shard": "host-1", "step": 0, "users": 1, "phase": "measure",
            "category": "chat", "t_start": 1.0, "t_end": 2.0}
    return RequestRecord.model_validate(base | fields)


@pytest.mark.integration
def test_cut_requests_are_counted_by_the_servers_tokenizer(tmp_path: Path) -> None:
    run = run_with(tmp_path, [
        record("cut", interrupted=True, content_chunks=2, tokens_counted_by="chunks", partial_text="t0 t1 t2 t3 t4 "),
        record("counted", interrupted=True, content_chunks=2, streamed_tokens=6, tokens_counted_by="per_chunk"),
        record("whole", completion_tokens=9, tokens_counted_by="usage"),
    ])
    with GroundTruthServer(GroundTruthConfig(), tmp_path / "truth.jsonl") as server:
        assert count_cut_requests(run, server.base_url) is None
    counts = run.read_token_counts()
    assert list(counts) == ["cut"] and counts["cut"].streamed_tokens == 5


class NoTokenize(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_server_without_tokenize_leaves_chunk_counts_and_says_so(tmp_path: Path) -> None:
    run = run_with(tmp_path, [record("cut", error_kind="disconnect", content_chunks=3, tokens_counted_by="chunks",
                                     partial_text="a b c d")])
    server = ThreadingHTTPServer(("127.0.0.1", 0), NoTokenize)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        warning = count_cut_requests(run, f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert warning is not None and warning.startswith("1 of 1 cut request could not be counted") and "404" in warning
    assert run.read_token_counts() == {}


def test_a_damaged_token_count_line_names_file_and_line(tmp_path: Path) -> None:
    run = run_with(tmp_path, [])
    (run.path / RunDir.TOKEN_COUNTS).write_text('{"request_id": "a", "streamed_tokens": 3}\n{"request_id": "b"}\n')
    with pytest.raises(RunDirError, match=r"token_counts.jsonl:2"):
        run.read_token_counts()
