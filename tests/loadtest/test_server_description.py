"""What a server says of itself: llama-server's /props, an OpenAI-style /v1/models, or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.errors import UsageError
from core.rundir.models import ServerDescription
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.server_description import check_reply_fits, describe_server
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
