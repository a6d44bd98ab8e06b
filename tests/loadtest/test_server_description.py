"""What a server says of itself: llama-server's /props, an OpenAI-style /v1/models, or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.errors import UsageError
from core.rundir.models import ServerDescription, SessionSettings
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.server_description import check_conversation_fits, check_reply_fits, describe_server
from rigbench.cli import app

pytestmark = pytest.mark.integration


def test_llama_server_describes_its_context_per_request_in_props(llama_server, tmp_path: Path) -> None:
    # the tiny profile: -c 4096 --parallel 4 -kvu (one unified cache: a request may use all of it)
    assert describe_server(llama_server.base_url) == ServerDescription(described_by=["/props"], context_tokens=4096)
    result = CliRunner().invoke(app, ["sweep", "--url", llama_server.base_url, "--steps", "1", "--measure", "1",
                                      "--max-tokens", "4000", "--context-tokens", "96", "--ignore-eos",
                                      "--no-progress", "--runs-dir", str(tmp_path / "runs")])
    assert isinstance(result.exception, UsageError), result.output
    assert str(result.exception).startswith(
        f"--max-tokens 4000 after --context-tokens 96: {llama_server.base_url} holds 4096 tokens per request "
        "(its /props n_ctx), prompt included; with --ignore-eos")
    assert not (tmp_path / "runs").exists()


def test_a_server_that_describes_nothing_is_described_by_nothing(tmp_path: Path) -> None:
    config = GroundTruthConfig(llama_endpoints=False)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        assert describe_server(server.base_url) == ServerDescription()
    # and nothing listening: nothing said, no error (the pre-flight check says what is wrong)
    assert describe_server(server.base_url, timeout=0.5) == ServerDescription()


def test_a_reply_that_fits_says_nothing() -> None:
    described = ServerDescription(described_by=["/props"], context_tokens=512)
    assert check_reply_fits("http://h:1", described, max_tokens=256, ignore_eos=True) is None
    assert check_reply_fits("http://h:1", ServerDescription(), max_tokens=10**6, ignore_eos=True) is None
    with pytest.raises(UsageError, match="^--max-tokens 512: http://h:1 holds 512 tokens"):
        check_reply_fits("http://h:1", described, max_tokens=512, ignore_eos=True)


def test_a_conversation_whose_history_may_outgrow_the_context_is_refused_or_warned() -> None:
    """The last turn of the longest conversation holds the system prompt, the document, every prompt and reply:
    refused where even the fewest tokens pass the context, warned where only the most do."""
    described = ServerDescription(described_by=["/props"], context_tokens=1024)
    sessions = SessionSettings(turns_min=2, turns_max=4, system_prompt_tokens=100)

    def fits(prompt: tuple[int, int], reply: tuple[int, int], context: int = 0) -> str | None:
        return check_conversation_fits("http://h:1", described, sessions=sessions, prompt_tokens=prompt,
                                       reply_tokens=reply, context_tokens=context,
                                       options="--sessions --turns 2-4 --output-length")

    assert fits((10, 100), (1, 130)) is None  # 100 + 4 x 230 = 1020
    assert fits((10, 100), (1, 130), context=10) == (
        "--sessions --turns 2-4 --output-length: the last turn of a 4-turn conversation holds 154 to 1030 tokens (a "
        "100-token system prompt, --context-tokens 10, 4 prompts of 10-100 tokens, 4 replies of 1-130), but "
        "http://h:1 holds 1024 tokens per request (its /props n_ctx); a conversation that runs that long fails at "
        "the context's edge and ends early")
    with pytest.raises(UsageError, match=r"holds 1100 tokens \(a 100-token system prompt, 4 of the prompt set's "
                                         r"prompts \(not counted\), 4 replies of 250\), but .*: every conversation "
                                         r"that long would end at the context's edge; lower --turns or the lengths"):
        fits((0, 0), (250, 250))  # --ignore-eos: every reply is max_tokens
    assert fits((0, 0), (0, 250)) is not None, "replies that may end sooner: a warning"
    assert check_conversation_fits("http://h:1", ServerDescription(), sessions=sessions, prompt_tokens=(1, 10**6),
                                   reply_tokens=(1, 1), context_tokens=0, options="x") is None
