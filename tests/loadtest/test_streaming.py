"""One request at a time against the ground-truth server: records and every error kind."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from core.network import free_port
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer, read_truth_log
from loadtest.streaming import RequestMeta, build_payload, cached_tokens, make_client, stream_chat

pytestmark = pytest.mark.integration
META = RequestMeta(shard="t", step=0, users=1, phase="measure", category="chat")
FAULTS = ["none", "http_500", "disconnect", "malformed", "stall", "error_event"]


def payload(model: str = "ground-truth", max_tokens: int = 8) -> dict:
    return build_payload(
        [{"role": "user", "content": "say hi"}],
        model=model,
        max_tokens=max_tokens,
        temperature=0.0,
        cache_prompt=False,
        ignore_eos=True,
    )


@pytest.fixture(scope="module")
def faulty_server(tmp_path_factory: pytest.TempPathFactory):
    config = GroundTruthConfig(ttft_ms=20, itl_ms=5, fault_cycle=FAULTS, stall_seconds=5)
    log = tmp_path_factory.mktemp("truth") / "truth.jsonl"
    with GroundTruthServer(config, log) as server:
        yield server, log


def test_request_body_asks_for_usage_and_llama_extensions() -> None:
    body = payload()
    assert body["stream"] is True
    # per-chunk cumulative counts: vLLM's continuous usage, llama-server's timings on every chunk
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["timings_per_token"] is True
    assert body["ignore_eos"] is True and body["cache_prompt"] is False and body["max_tokens"] == 8
    plain = build_payload([], model="m", max_tokens=1, temperature=0.5, cache_prompt=True, ignore_eos=False)
    assert "ignore_eos" not in plain and plain["cache_prompt"] is True


@pytest.mark.timing
def test_each_fault_becomes_its_error_kind_and_good_requests_match_the_truth(faulty_server) -> None:
    server, log = faulty_server
    with make_client(server.base_url, read_timeout=1.0) as client:
        results = [stream_chat(client, payload(), META) for _ in FAULTS]
        bad_model = stream_chat(client, payload(model="no-such-model"), META)
    kinds = [r.record.error_kind for r in results]
    assert kinds == [None, "http_500", "disconnect", "malformed_sse", "timeout", "server_error"]
    assert results[1].record.http_status == 500
    # llama-server's mid-stream error event is the server's fault, named with its code and message
    errored = results[5].record
    assert errored.error_message == "error event, code 500 (server_error): Context size has been exceeded."
    assert errored.http_status == 200 and errored.content_chunks == 2
    assert results[3].record.error_message.startswith("event data is not JSON")
    assert bad_model.record.error_kind == "bad_model" and bad_model.record.http_status == 404

    good = results[0]
    record = good.record
    truth = read_truth_log(log)[record.request_id]
    assert record.completion_tokens == 8 and record.timings.predicted_n == 8 and record.prompt_tokens == 2
    assert record.content_chunks == len(good.chunk_times) == len(truth["sends"]) == 8
    assert record.t_start <= truth["t_received"] < truth["sends"][0]
    # the server stamps a send just after its write, so a quick client may read the bytes a little before
    assert truth["sends"][0] - 0.002 <= record.t_first_token
    assert record.t_first_token - truth["sends"][0] < 0.05
    assert record.t_last_token == good.chunk_times[-1] <= record.t_end
    # a stalled request is cut at the read timeout, not at the server's 5 s stall
    stalled = results[4].record
    assert 0.9 < stalled.t_end - stalled.t_start < 3.0 and stalled.content_chunks == 1


@pytest.mark.timing
def test_a_request_given_a_start_time_is_built_first_and_sent_at_that_time(tmp_path: Path) -> None:
    """An open loop's scheduled start: the request goes out at ``not_before``, never before it,
    and the server receives it after it."""
    log = tmp_path / "truth.jsonl"
    with GroundTruthServer(GroundTruthConfig(ttft_ms=5, itl_ms=1), log) as server, \
            make_client(server.base_url, read_timeout=2.0) as client:
        not_before = time.time() + 0.2
        record = stream_chat(client, payload(), META, not_before=not_before).record
    assert record.error_kind is None and not_before <= record.t_start < not_before + 0.1
    assert read_truth_log(log)[record.request_id]["t_received"] >= not_before


def test_connection_refused_is_connect() -> None:
    with make_client(f"http://127.0.0.1:{free_port()}") as client:
        result = stream_chat(client, payload(), META)
    assert result.record.error_kind == "connect" and result.record.http_status is None


def test_aborted_request_is_handed_over_as_interrupted(tmp_path: Path) -> None:
    """A Ctrl-C (here a timer signal) mid-stream: the partial record is kept, then it propagates."""
    config = GroundTruthConfig(ttft_ms=10, itl_ms=50)
    kept = []

    class Abort(BaseException):
        pass

    def abort(signum, frame):
        raise Abort

    previous = signal.signal(signal.SIGALRM, abort)
    try:
        with GroundTruthServer(config, tmp_path / "truth.jsonl") as server, make_client(server.base_url) as client:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(Abort):
                stream_chat(client, payload(max_tokens=20), META, on_abort=kept.append)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(kept) == 1
    record = kept[0].record
    assert record.interrupted and record.error_kind is None and 2 <= record.content_chunks < 20


def test_a_log_path_relative_to_the_caller_is_where_the_caller_means(tmp_path: Path, monkeypatch) -> None:
    """The server runs from the repository root; a relative log path still lands in the caller's folder."""
    monkeypatch.chdir(tmp_path)
    with GroundTruthServer(GroundTruthConfig(ttft_ms=1, itl_ms=1), Path("truth.jsonl")) as server, \
            make_client(server.base_url) as client:
        assert stream_chat(client, payload(max_tokens=2), META).record.ok
        # the server logs a request just after its last write, which the client may read first
        deadline = time.monotonic() + 2
        while not read_truth_log(tmp_path / "truth.jsonl") and time.monotonic() < deadline:
            time.sleep(0.01)
    assert read_truth_log(tmp_path / "truth.jsonl")


@pytest.mark.parametrize("per_chunk_counts", [True, False])
def test_a_request_cut_mid_stream_counts_its_tokens_whatever_the_chunking(tmp_path: Path, per_chunk_counts) -> None:
    """Three tokens a chunk; the second request is cut after two chunks (six tokens): with running
    counts it knows it got six; without, it keeps its text for the server's /tokenize."""
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, tokens_per_chunk=3, jitter=0.3, seed=4,
                               per_chunk_counts=per_chunk_counts, fault_cycle=["none", "disconnect"])
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server, make_client(server.base_url) as client:
        done, cut = (stream_chat(client, payload(max_tokens=10), META).record for _ in range(2))
    assert done.ok and done.completion_tokens == 10 and done.tokens_counted_by == "usage"
    assert done.content_chunks == 4 and done.partial_text is None and done.timings.predicted_n == 10
    assert (done.streamed_tokens, done.first_chunk_tokens) == ((10, 3) if per_chunk_counts else (10, None))
    assert cut.error_kind == "disconnect" and cut.content_chunks == 2 and cut.completion_tokens is None
    if per_chunk_counts:
        assert (cut.streamed_tokens, cut.first_chunk_tokens, cut.tokens_counted_by) == (6, 3, "per_chunk")
        assert cut.partial_text is None
    else:
        assert (cut.streamed_tokens, cut.first_chunk_tokens, cut.tokens_counted_by) == (None, None, "chunks")
        assert cut.partial_text == "t0 t1 t2 t3 t4 t5 "


def test_an_interrupted_request_keeps_its_running_count(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=5, itl_ms=40, tokens_per_chunk=2)
    kept = []

    class Abort(BaseException):
        pass

    def abort(signum, frame):
        raise Abort

    previous = signal.signal(signal.SIGALRM, abort)
    try:
        with GroundTruthServer(config, tmp_path / "truth.jsonl") as server, make_client(server.base_url) as client:
            assert stream_chat(client, payload(max_tokens=2), META).record.ok  # connected and warm
            signal.setitimer(signal.ITIMER_REAL, 0.25)
            with pytest.raises(Abort):
                stream_chat(client, payload(max_tokens=40), META, on_abort=kept.append)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    record = kept[0].record
    assert record.interrupted and record.completion_tokens is None and record.tokens_counted_by == "per_chunk"
    assert record.streamed_tokens == 2 * record.content_chunks and record.first_chunk_tokens == 2


def test_reused_prompt_tokens_come_from_cache_n_or_the_usage_details_and_the_reply_text_is_kept(
        tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    first = [{"role": "system", "content": "you are terse"}, {"role": "user", "content": "name three colours"}]
    config = GroundTruthConfig(ttft_ms=1, itl_ms=1, tokens=4, prompt_cache=True)
    with GroundTruthServer(config, log) as server, make_client(server.base_url) as client:
        one = stream_chat(client, {**payload(), "messages": first}, META, keep_reply=True)
        second = [*first, {"role": "assistant", "content": one.reply_text}, {"role": "user", "content": "more"}]
        two = stream_chat(client, {**payload(), "messages": second}, META)
        # a server that sends no running timings says it in the usage's details alone
        plain = {key: value for key, value in payload().items() if key != "timings_per_token"}
        three = stream_chat(client, {**plain, "messages": second}, META)
    assert one.reply_text == "t0 t1 t2 t3 " and two.reply_text is None, "kept only when asked"
    assert one.record.cached_tokens == 0 and one.record.prompt_tokens == 6
    # the first turn's prompt and reply (6 + 4 words) are reused; timings count only what was processed
    assert two.record.cached_tokens == 10 and two.record.prompt_tokens == 11 and two.record.timings.prompt_n == 1
    assert three.record.cached_tokens == 11 and three.record.prompt_tokens == 11
    truth = read_truth_log(log)
    assert [truth[r.record.request_id]["cached"] for r in (one, two, three)] == [0, 10, 11]
    with GroundTruthServer(GroundTruthConfig(ttft_ms=1, itl_ms=1, tokens=2), tmp_path / "plain.jsonl") as server, \
            make_client(server.base_url) as client:
        assert stream_chat(client, payload(), META).record.cached_tokens is None, "no cache said: none assumed"
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": 7}}, None) == 7
    assert cached_tokens({"prompt_tokens": 3}, {"prompt_n": 3}) is None
