"""The real pinned llama-server serves the tiny synthetic model and streams exact token counts."""

from __future__ import annotations

import json
import subprocess

import httpx
import numpy as np
import pytest
from gguf import GGUFReader

from llamacpp.synthetic_models import banned_token_ids, vocabulary


def test_tiny_model_is_small_random_and_consistent(tiny_model):
    assert tiny_model.stat().st_size < 5 * 1024 * 1024
    reader = GGUFReader(str(tiny_model))
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    assert tensors["blk.0.attn_q.weight"].std() > 0.01
    assert len(np.unique(tensors["token_embd.weight"][:, 1:])) > 1000
    tokens, _, _ = vocabulary(512)
    assert len(banned_token_ids(tokens)) == 3 + 256 - 95


@pytest.mark.integration
def test_build_manifest_and_binaries(llama_build):
    assert llama_build.backend in ("cpu", "cuda")
    assert llama_build.source.startswith("sha256:b0a2feb6")
    version = subprocess.run([llama_build.binary("llama-server"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0, version.stderr


@pytest.mark.integration
@pytest.mark.parametrize("max_tokens", [1, 17, 64])
def test_stream_usage_matches_content_chunks(llama_server, max_tokens):
    body = {
        "messages": [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "cache_prompt": False,
    }
    chunks, usage, timings, done = 0, None, None, False
    with httpx.stream("POST", f"{llama_server.base_url}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                done = True
                continue
            event = json.loads(data)
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    chunks += 1
            usage = event.get("usage") or usage
            timings = event.get("timings") or timings
    assert done
    assert usage["completion_tokens"] == max_tokens == chunks
    assert timings["predicted_n"] == max_tokens
    assert usage["prompt_tokens"] == timings["prompt_n"] > 0
