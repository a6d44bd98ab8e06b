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


def test_a_server_whose_process_ended_is_not_ridden_out() -> None:
    watch = ErrorWatch(max_error_rate=0.9, min_requests=10, outage_seconds=60)
    watch.observe(100, 0, [], now=1.0)
    assert watch.observe(104, 4, [("connect: refused", 4)], users=4, now=2.0) is None  # ridden out, for now
    detail = watch.server_ended("llama-server (http://127.0.0.1:1) exited with code -9; its log: x.log", 1.8)
    assert detail.startswith("the server stopped answering: llama-server (http://127.0.0.1:1) exited with code -9; "
                             "its log: x.log (4 refused connections since the last successful request)"), detail
    assert "--ride-out (60 s)" in detail
    assert watch.away_since == 1.0, "from the first refusal (the observation before it), not the end seen later"


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
                      "kept (--max-error-rate sets the limit, judged per step)")
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


def test_the_error_limit_is_judged_per_step_so_good_steps_do_not_hide_a_bad_one() -> None:
    """400 good requests in step 0, then step 1 turns 70 % away with 503 between its successes: over the
    sweep that is 14 %, under the 50 % limit; the step's own share is what stops it."""
    watch = ErrorWatch(max_error_rate=0.5, min_requests=10, outage_seconds=10)
    assert watch.observe(400, 0, [], users=8, step="step 0 (1 users)", now=1.0) is None
    said = None
    for second in range(1, 8):  # each second: 3 answered, 7 refused with 503, so no second is an outage
        errors = [("http_503: Loading model (unavailable_error)", 7 * second)]
        said = watch.observe(400 + 10 * second, 7 * second, errors, users=8, step="step 1 (8 users)",
                             now=1.0 + second)
        if said is not None:
            break
    # judged in its second second: a second's refusals beside its answers may be an outage beginning
    assert said is not None and said.startswith("step 1 (8 users): error rate 70% over 20 requests exceeds the "
                                                "limit of 50%; most are http_503 (14 of 14, the server said: "
                                                "'Loading model (unavailable_error)')"), said
    assert not watch.ridden, "refusals between successes are not an outage ridden out"


def test_a_short_outage_is_ridden_out_recorded_and_left_out_of_the_step_s_error_rate() -> None:
    watch = ErrorWatch(max_error_rate=0.5, min_requests=10, outage_seconds=5)
    assert watch.observe(20, 0, [], users=4, step="step 0 (4 users)", now=0.0) is None
    for second, refused in enumerate((4, 20, 40, 60), start=1):  # 4 s of refused connections, nothing answered
        errors = [("connect: Connection refused", refused)]
        assert watch.observe(20 + refused, refused, errors, users=4, step="step 0 (4 users)", now=second) is None
    # the server is back: 6 answers, and the step's 60 refusals are not judged (60 of 86 would be 70 %)
    assert watch.observe(86, 60, [("connect: Connection refused", 60)], users=4, step="step 0 (4 users)",
                         now=5.0) is None
    assert watch.ridden == ["step 0 (4 users): the server was away: no request succeeded for 4-5 s (60 refused "
                            "connections; all recorded), then it answered again: ridden out (--ride-out 5 s) and left "
                            "out of the step's error rate; the step's figures include the outage"]
    assert watch.outage is None and watch.unfinished_outage(6.0) is None


def test_an_outage_longer_than_the_ride_out_stops_the_sweep_naming_it() -> None:
    watch = ErrorWatch(max_error_rate=0.5, min_requests=10, outage_seconds=3)
    watch.observe(100, 0, [], users=4, step="step 0 (4 users)", now=0.0)
    said = [watch.observe(100 + 5 * s, 5 * s, [("connect: refused", 5 * s)], users=4, step="step 0 (4 users)",
                          now=float(s)) for s in range(1, 6)]
    assert said[:3] == [None, None, None], "within the ride-out: held"
    assert said[3] == ("the server stopped answering: 20 refused connections since the last successful request, "
                       "over 4.0 s (--ride-out waits 3 s) (nothing answers at the URL any more: is the server still "
                       "running?). Sweep stopped, records kept")
    assert watch.away_since == 0.0, "from the last second that saw an answer: no step ended after it completed"
    # a sweep that ends inside an outage shorter than the ride-out fails naming it too
    ended = ErrorWatch(max_error_rate=0.5, min_requests=10, outage_seconds=30)
    ended.observe(100, 0, [], users=4, now=0.0)
    ended.observe(112, 12, [("connect: refused", 12)], users=4, now=1.0)
    assert ended.observe(120, 20, [("connect: refused", 20)], users=4, now=2.0) is None
    assert ended.unfinished_outage(2.5) == (
        "the server stopped answering: 20 refused connections since the last successful request, over 2.5 s, and it "
        "had not answered again when the sweep ended (--ride-out waits 30 s): nothing answers at the URL any more: "
        "is the server still running? Records kept")
