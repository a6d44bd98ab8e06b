"""Sessions sweeps (a real headless Locust process): conversations against the ground-truth server, which
knows each request's reusable prefix, and against the real llama-server with its prompt cache on."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from analysis.figures import run_figures
from analysis.load import load_run
from analysis.report import write_report
from core.rundir import LoadSettings, RequestRecord, RunDir, new_manifest, server_at
from core.rundir.models import SessionSettings
from core.workload import parse_length
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer, read_truth_log
from loadtest.lengths import CLOSED_LOOP_KEY, draw_lengths
from loadtest.long_context import context_for_tokens
from loadtest.sessions import conversation_plan
from loadtest.sweep import run_sweep

pytestmark = pytest.mark.integration
USER = re.compile(r"/u(\d+)/c(\d+)$")


def sessions_run(root: Path, url: str, settings: LoadSettings, slots: int) -> RunDir:
    return RunDir.create(root, new_manifest("sessions", "tiny", load=settings, server=server_at(url, slots=slots)))


def by_conversation(records: list[RequestRecord]) -> dict[str, list[RequestRecord]]:
    conversations: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r.t_start):
        conversations[record.conversation].append(record)  # type: ignore[index]
    return conversations


def test_conversations_resend_their_history_think_on_schedule_and_report_the_truths_reuse(tmp_path: Path) -> None:
    sessions = SessionSettings(turns_min=2, turns_max=4, think="exponential", think_seconds=0.25,
                               system_prompt_tokens=40)
    settings = LoadSettings(user_steps=[3], warmup_seconds=0.5, measure_seconds=3.0, max_tokens=6, cache_prompt=True,
                            sessions=sessions, workload_seed=11, drain_seconds=5.0)
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default", prompt_cache=True, detokenize=True)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        assert context_for_tokens(server.base_url, 40)[1] == 40
        run = sessions_run(tmp_path, server.base_url, settings, slots=4)
        manifest = run_sweep(run, server.base_url, progress=False)
    # users think ~90% of the time: the load that ran counts them busy (core.load_reached), so the run completes
    assert manifest.status == "complete", manifest.status_detail
    records = run.read_records()
    assert records and all(r.ok and r.conversation and r.turn for r in records)
    truth = read_truth_log(tmp_path / "truth.jsonl")
    assert [r.cached_tokens for r in records] == [truth[r.request_id]["cached"] for r in records]
    conversations = by_conversation(records)
    last_of_user: dict[int, int] = {}
    for name in conversations:
        user, number = map(int, USER.search(name).groups())  # type: ignore[union-attr]
        last_of_user[user] = max(last_of_user.get(user, -1), number)
    assert sorted(last_of_user) == [0, 1, 2] and len(conversations) >= 6
    for name, turns in conversations.items():
        user, number = map(int, USER.search(name).groups())  # type: ignore[union-attr]
        plan = conversation_plan(sessions, 11, user, number)
        assert [r.turn for r in turns] == list(range(1, len(turns) + 1)), f"{name}: turns in order, none missing"
        assert len(turns) <= plan.turns and (len(turns) == plan.turns or number == last_of_user[user]), name
        assert turns[0].prompt_tokens > 40, "the shared system prompt opens every conversation"
        for before, after in zip(turns, turns[1:], strict=False):
            held = before.prompt_tokens + before.completion_tokens  # type: ignore[operator]
            # the history grows: the next turn sends the last turn's prompt and reply, then a new prompt
            assert after.prompt_tokens > held and after.cached_tokens >= held, name
            think = plan.think_s[before.turn - 1]  # type: ignore[operator]
            assert -0.005 < after.t_start - before.t_end - think < 0.25, (name, after.turn, think)
    # only the first conversation the server received (not always the first the client started: users start
    # together) found no system prompt to reuse
    first_turns = [r for r in records if r.turn == 1]
    assert sum(r.cached_tokens < 40 for r in first_turns) <= 1, "the system prompt is reused across conversations"
    last_window = manifest.steps[-1]
    assert max(r.t_start for r in records) < last_window.measure_end, "no turn starts once the last window closed"

    (step,) = run_figures(load_run(run.path)).steps
    assert step.sessions is not None and step.load_reached > 0.9
    measured = [r for r in records if r.phase == "measure"]
    assert step.sessions.conversations == len({r.conversation for r in measured})
    assert step.sessions.turns == len(measured)
    assert step.sessions.cached_tokens == sum(r.cached_tokens for r in measured)  # type: ignore[misc]
    assert step.sessions.reuse_share.value == pytest.approx(
        step.sessions.cached_tokens / sum(r.prompt_tokens for r in measured))  # type: ignore[misc]
    assert [t.turn for t in step.sessions.ttft_by_turn][:2] == [1, 2]
    assert "### Conversations" in write_report([run.path], tmp_path / "report").read_text()


def test_drawn_lengths_shape_each_turns_new_message_and_reply(tmp_path: Path) -> None:
    """With --prompt-length and --output-length a turn's new message is cut to its drawn length and its reply
    runs to its drawn length, behind the whole history: the draws are the user's, request after request."""
    sessions = SessionSettings(turns_min=2, turns_max=3, think="constant", think_seconds=0.05)
    prompt, output = parse_length("uniform:5-30", "--prompt-length"), parse_length("uniform:3-8", "--output-length")
    settings = LoadSettings(user_steps=[2], warmup_seconds=0.5, measure_seconds=1.0, max_tokens=64, cache_prompt=True,
                            sessions=sessions, workload_seed=4, prompt_length=prompt, output_length=output,
                            drain_seconds=5.0)
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default", prompt_cache=True, detokenize=True)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        run = sessions_run(tmp_path, server.base_url, settings, slots=2)
        manifest = run_sweep(run, server.base_url, progress=False)
    assert manifest.status == "complete", manifest.status_detail
    records = [r for r in run.read_records() if not r.interrupted]
    by_user: dict[int, list[RequestRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r.t_start):
        by_user[int(USER.search(record.conversation).group(1))].append(record)  # type: ignore[arg-type, union-attr]
    assert sorted(by_user) == [0, 1]
    for user, sent in by_user.items():
        for number, record in enumerate(sent):  # every request of the user drew once, in order
            drawn = draw_lengths(prompt, output, 4, (CLOSED_LOOP_KEY, user, number))
            assert (record.context_tokens, record.completion_tokens) == (drawn.prompt_tokens, drawn.output_tokens)
            assert record.category == "drawn" and record.ok
    for turns in by_conversation(records).values():
        assert turns[0].prompt_tokens == turns[0].context_tokens, "the first turn: its drawn message alone"
        for before, after in zip(turns, turns[1:], strict=False):  # the server counts words: exact
            held = before.prompt_tokens + before.completion_tokens  # type: ignore[operator]
            assert after.prompt_tokens == held + after.context_tokens and after.cached_tokens >= held


def test_a_second_turn_reuses_the_first_turns_prompt_and_reply_on_llama_server(smollm2_server, tmp_path: Path) -> None:
    sessions = SessionSettings(turns_min=2, turns_max=2, think="constant", think_seconds=0.0)
    settings = LoadSettings(user_steps=[1], warmup_seconds=0.5, measure_seconds=3.0, max_tokens=16, cache_prompt=True,
                            sessions=sessions, drain_seconds=20.0)
    run = sessions_run(tmp_path, smollm2_server.base_url, settings, slots=2)
    manifest = run_sweep(run, smollm2_server.base_url, progress=False)
    assert manifest.status == "complete", manifest.status_detail
    records = [r for r in run.read_records() if not r.interrupted]
    pairs = [turns for turns in by_conversation(records).values() if len(turns) == 2]
    assert pairs, "no conversation had both turns"
    for first, second in pairs:
        held = first.prompt_tokens + first.completion_tokens  # type: ignore[operator]
        # the slot holds the first turn's prompt and reply but for the reply's last token (sampled, never
        # decoded): the reply's text, sent back, tokenizes to the tokens the model made
        assert first.cached_tokens is not None and held - 3 <= second.cached_tokens <= held, (  # type: ignore[operator]
            first.prompt_tokens, first.completion_tokens, second.cached_tokens)
        assert second.timings.prompt_n == second.prompt_tokens - second.cached_tokens  # type: ignore[union-attr]
