"""The rules that stop a sweep for its errors, fed the totals a Locust master keeps."""

from __future__ import annotations

from loadtest.error_watch import ErrorWatch, error_kind
from loadtest.streaming import RequestMeta, build_payload, make_client, stream_chat

META = RequestMeta(shard="t", step=0, users=1, phase="measure", category="chat")


def test_a_client_bug_stops_at_once() -> None:
    watch = ErrorWatch(max_error_rate=0.5, min_requests=10)
    assert watch.observe(100, 0, []) is None
    detail = watch.observe(101, 1, [("client_error: UnsupportedProtocol: missing an 'http://'", 1)])
    assert detail.startswith("the load generator's own request code failed (client_error: UnsupportedProtocol")


def test_refused_connections_without_a_success_between_mean_the_server_is_gone() -> None:
    watch = ErrorWatch(max_error_rate=0.5, min_requests=10)
    assert watch.observe(500, 0, []) is None  # 500 successes, then the server dies
    assert watch.observe(506, 6, [("connect: All connection attempts failed", 6)]) is None  # 6 of 506: no rate stop
    detail = watch.observe(511, 11, [("connect: All connection attempts failed", 11)])
    assert detail.startswith("the server stopped answering: 11 refused connections since the last successful request")


def test_a_success_between_refusals_starts_the_count_again() -> None:
    watch = ErrorWatch(max_error_rate=0.9, min_requests=10)
    watch.observe(20, 8, [("connect: refused", 8)])
    assert watch.observe(42, 20, [("connect: refused", 20)]) is None, "a second with successes never stops"
    assert watch.refused_since_success == 12, "the 8 before the successes are forgotten"
    assert watch.observe(60, 22, [("connect: refused", 22)]) is None  # a busy server: it still answers
    assert watch.refused_since_success == 2


def test_a_server_that_dies_just_after_a_success_is_seen_the_next_second() -> None:
    watch = ErrorWatch(max_error_rate=0.9, min_requests=10)
    watch.observe(100, 0, [])
    assert watch.observe(120, 12, [("connect: refused", 12)]) is None  # 8 successes, then it died
    detail = watch.observe(124, 16, [("connect: refused", 16)], users=4)
    assert detail.startswith("the server stopped answering: 16 refused connections since the last successful")


def test_a_busy_step_needs_as_many_refusals_as_it_has_users() -> None:
    watch = ErrorWatch(max_error_rate=0.9, min_requests=10)
    watch.observe(100, 0, [])
    assert watch.observe(130, 30, [("connect: refused", 30)], users=64) is None
    assert watch.observe(164, 64, [("connect: refused", 64)], users=64).startswith("the server stopped answering: 64")


def test_a_stats_reset_does_not_count_backwards() -> None:
    watch = ErrorWatch(max_error_rate=0.9, min_requests=10)
    watch.observe(100, 0, [])
    watch.observe(105, 5, [("connect: refused", 5)])
    watch.observe(0, 0, [])  # the web UI's reset
    assert watch.refused_since_success == 5
    watch.observe(3, 3, [("connect: refused", 3)])
    assert watch.refused_since_success == 8, "refusals after the reset add to those before it"


def test_the_error_rate_stop_names_the_commonest_kind_and_its_fix() -> None:
    watch = ErrorWatch(max_error_rate=0.3, min_requests=10)
    errors = [("http_500: slot crashed", 4), ("http_500: other text", 3), ("disconnect: closed", 2)]
    detail = watch.observe(20, 9, errors)
    assert detail == ("error rate 45% over 20 requests exceeds the limit of 30%; most are http_500 (7 of 9, the "
                      "server said: 'slot crashed'): the server failed requests: check its log. Sweep stopped, records "
                      "kept (--max-error-rate sets the limit)")
    from_workers = [("Exception('http_503: Loading model (unavailable_error)')", 6)]
    detail = ErrorWatch(0.3, 5).observe(6, 6, from_workers)
    assert "most are http_503 (6 of 6, the server said: 'Loading model (unavailable_error)'): the server is busy" \
        in detail
    assert ErrorWatch(0.3, 10).observe(9, 9, errors) is None, "too few requests to judge"


def test_a_worker_failure_reaches_the_master_as_a_repr() -> None:
    assert error_kind("Exception('timeout: stream stalled: no byte arrived within 60 s')") == "timeout"
    assert error_kind("something else") == "unknown"


def test_an_exception_in_the_request_path_is_a_client_error_not_an_interruption() -> None:
    payload = build_payload([{"role": "user", "content": "hi"}], model="m", max_tokens=2, temperature=0.0,
                            cache_prompt=False, ignore_eos=False)
    payload["stop"] = {"a set, which JSON cannot write"}  # the client's own bug, before any byte is sent
    with make_client("http://127.0.0.1:9") as client:
        record = stream_chat(client, payload, META).record
    assert (record.error_kind, record.interrupted) == ("client_error", False)
    assert record.error_message == "TypeError: Type is not JSON serializable: set"
