"""Prometheus text and /slots parsing, endpoints a server lacks, and the CPU warnings."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx

from loadtest.telemetry import (
    BUSIEST_PROCESS_CPU_METRIC,
    LOADGEN_CPU_METRIC,
    MACHINE_CPU_METRIC,
    OTHER_CPU_METRIC,
    ServerTelemetry,
    count_slots,
    cpu_warnings,
    parse_metrics,
)

LLAMA_METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 567
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# TYPE demo_seconds histogram
demo_seconds_bucket{le="0.5"} 2
demo_seconds_bucket{le="+Inf"} 4
demo_seconds_sum 1.5
demo_seconds_count 4
"""


def test_parse_metrics_keeps_names_and_labels() -> None:
    values = parse_metrics(LLAMA_METRICS)
    assert values["llamacpp:prompt_tokens_total"] == 1234
    assert values["llamacpp:tokens_predicted_total"] == 567
    assert values["llamacpp:requests_processing"] == 3
    assert values['demo_seconds_bucket{le="0.5"}'] == 2
    assert values["demo_seconds_count"] == 4


def test_count_slots() -> None:
    slots = [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}, {"id": 2, "is_processing": True}]
    assert count_slots(slots) == (3, 2)
    assert count_slots({"error": "disabled"}) == (None, None)


class _Counting(BaseHTTPRequestHandler):
    """/slots answers; /metrics does not exist; every request is counted by path."""

    hits: ClassVar[dict[str, int]] = {}

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.hits[self.path] = self.hits.get(self.path, 0) + 1
        body = json.dumps([{"id": 0, "is_processing": True}]).encode() if self.path == "/slots" else b"no"
        self.send_response(200 if self.path == "/slots" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_an_absent_endpoint_is_asked_once_then_skipped_with_one_note() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}") as client:
            telemetry = ServerTelemetry(client)
            snapshots = [telemetry.snapshot(0, 1, boundary) for boundary in ("start", "measure", "end")]
    finally:
        server.shutdown()
    assert _Counting.hits == {"/metrics": 1, "/slots": 3}
    assert [s.slots_busy for s in snapshots] == [1, 1, 1] and all(s.error is None for s in snapshots)
    assert list(telemetry.absent) == ["/metrics"] and "HTTP 404" in telemetry.absent["/metrics"]


def test_a_saturated_process_or_machine_warns_whatever_the_process_count() -> None:
    quiet = {LOADGEN_CPU_METRIC: 120.0, BUSIEST_PROCESS_CPU_METRIC: 60.0, MACHINE_CPU_METRIC: 70.0}
    assert cpu_warnings(0, quiet) == []
    # two processes at 95% each: the old rule (90% x processes) said nothing
    one_core_full = quiet | {BUSIEST_PROCESS_CPU_METRIC: 95.0, LOADGEN_CPU_METRIC: 190.0}
    assert [w.split(":")[0] for w in cpu_warnings(1, one_core_full)] == ["step 1"]
    assert "a load process used 95% CPU" in cpu_warnings(1, one_core_full)[0]
    # tool plus a local server at 196% of 200%
    box_full = quiet | {MACHINE_CPU_METRIC: 98.0}
    assert "the machine's CPU was 98% busy over the window (" in cpu_warnings(2, box_full)[0]
    # neighbours filled it: the warning says how much was theirs
    crowded = box_full | {OTHER_CPU_METRIC: 61.0}
    assert "98% busy over the window, 61% by processes other than the load and the server (" in \
        cpu_warnings(2, crowded)[0]
