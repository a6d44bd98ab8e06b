"""Gemma 4-shaped synthetic models: real E2B/E4B inventories, and tiny ones the real llama-server serves."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest
from gguf import GGUFReader

from llamacpp.decode_bytes import synthetic_file_bytes
from llamacpp.gemma4_shapes import PRESETS, Gemma4Shape
from llamacpp.gemma4_tensors import assistant_tensors, gemma4_tensors, parameter_count, tensor_bytes, tensor_types
from llamacpp.quantize import quantize_file
from llamacpp.server import LocalServer
from llamacpp.synthetic_gemma4 import (
    ANCHOR_VALUE,
    BANNED_VALUE,
    gemma4_vocabulary,
    write_gemma4_assistant_gguf,
    write_gemma4_gguf,
    write_preset,
)
from llamacpp.synthetic_models import banned_token_ids, synthetic_label

PUBLISHED_E2B_Q4_0_BYTES = 3_349_516_256  # the published gemma-4-E2B-it-q4_0-exact.gguf
PUBLISHED_E4B_PARAMETERS = 7.52e9  # llama.cpp docs/build-riscv64-spacemit.md, gemma4 E4B row


def header_bytes(tmp_path: Path, preset: str) -> int:
    return write_gemma4_gguf(tmp_path / f"{preset}-header.gguf", preset, header_only=True).stat().st_size


def test_e2b_predicted_q4_0_size_matches_published_file(tmp_path):
    shape = PRESETS["e2b"].target
    specs = gemma4_tensors(shape)
    by_name = {spec.name: spec.shape for spec in specs}
    assert by_name["per_layer_token_embd.weight"] == (262144, 35 * 256)
    assert by_name["token_embd.weight"] == (262144, 1536)
    assert by_name["blk.4.attn_q.weight"] == (8 * 512, 1536)  # full attention layer: 512-wide heads
    assert by_name["blk.0.attn_k.weight"] == (256, 1536)  # sliding layer: one 256-wide KV head
    assert by_name["blk.14.ffn_up.weight"] == (6144, 1536)
    assert by_name["blk.15.ffn_up.weight"] == (12288, 1536)  # KV-shared layers: double-wide MLP
    assert "output.weight" not in by_name  # head tied to token_embd, as in the published file
    assert parameter_count(specs) == pytest.approx(4.647e9, rel=1e-3)
    predicted = synthetic_file_bytes("e2b", True, header_bytes(tmp_path, "e2b"))
    assert predicted == pytest.approx(PUBLISHED_E2B_Q4_0_BYTES, rel=0.02)


def test_e4b_parameter_count_matches_llama_cpp_docs(tmp_path):
    specs = gemma4_tensors(PRESETS["e4b"].target)
    assert parameter_count(specs) == pytest.approx(PUBLISHED_E4B_PARAMETERS, rel=0.005)
    predicted = synthetic_file_bytes("e4b", True, header_bytes(tmp_path, "e4b"))
    assert 4.5e9 < predicted < 5.5e9


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_satisfy_llama_cpp_kv_sharing_rules(preset):
    shape = PRESETS[preset].target
    shape.validate()
    drafter = assistant_tensors(PRESETS[preset].drafter, shape)
    names = {spec.name for spec in drafter}
    assert {"nextn.pre_projection.weight", "nextn.post_projection.weight", "token_embd.weight"} <= names
    assert not any("attn_k" in name or "attn_v" in name for name in names)  # drafter reads the target's KV


def test_validate_rejects_a_shape_llama_cpp_would_abort_on():
    with pytest.raises(ValueError, match="last non-shared layer"):
        replace(PRESETS["tiny-gemma4"].target, n_kv_shared=2).validate()


def test_tiny_model_embedding_anchors_visible_tokens(tmp_path):
    path = write_gemma4_gguf(tmp_path / "tiny.gguf")
    reader = GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "gemma4"
    embd = np.asarray(next(t for t in reader.tensors if t.name == "token_embd.weight").data)
    tokens, _, _ = gemma4_vocabulary(embd.shape[0])
    banned = banned_token_ids(tokens)
    assert "\n" in tokens and tokens.index("\n") not in banned
    assert np.all(embd[banned, 0] == BANNED_VALUE)
    assert np.all(np.delete(embd[:, 0], banned) == ANCHOR_VALUE)
    post = np.asarray(next(t for t in reader.tensors if t.name == "blk.0.post_ffw_norm.weight").data)
    assert post[0] == 0.0 and post[1] > 0.0


def stream_chat(base_url: str, max_tokens: int) -> tuple[int, dict, dict]:
    """Stream one ignore_eos chat reply: (content chunks, usage, timings of the final chunk)."""
    body = {
        "messages": [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "cache_prompt": False,
    }
    chunks, usage, timings = 0, {}, {}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            chunks += sum(1 for choice in event.get("choices", []) if choice.get("delta", {}).get("content"))
            usage = event.get("usage") or usage
            timings = event.get("timings") or timings
    return chunks, usage, timings


@pytest.mark.integration
@pytest.mark.parametrize("temperature_args", [[], ["--temp", "0"]])
def test_tiny_gemma4_streams_one_chunk_per_token(llama_server_binary, tmp_path, temperature_args):
    model = write_gemma4_gguf(tmp_path / "tiny.gguf")
    args = ["-m", str(model), "-c", "2048", "-t", "1", "--parallel", "1", *temperature_args]
    with LocalServer(llama_server_binary, args, log_path=tmp_path / "server.log") as server:
        chunks, usage, timings = stream_chat(server.base_url, 96)
    assert usage["completion_tokens"] == 96 == chunks == timings["predicted_n"]


@pytest.mark.integration
@pytest.mark.parametrize(("favour", "min_acceptance"), [(0.0, 0.0), (1.0, 0.9)])
def test_tiny_drafter_drafts_with_spec_type_draft_mtp(llama_server_binary, tmp_path, favour, min_acceptance):
    model = write_gemma4_gguf(tmp_path / "tiny.gguf", favour=favour)
    drafter = write_gemma4_assistant_gguf(tmp_path / "tiny-assistant.gguf", favour=favour)
    assert GGUFReader(str(drafter)).fields["general.architecture"].contents() == "gemma4-assistant"
    args = ["-m", str(model), "-md", str(drafter), "--spec-type", "draft-mtp", "--spec-draft-n-max", "2",
            "-c", "2048", "-t", "1", "--parallel", "1"]
    with LocalServer(llama_server_binary, args, log_path=tmp_path / "server.log") as server:
        chunks, usage, timings = stream_chat(server.base_url, 64)
    assert usage["completion_tokens"] == 64 == chunks
    assert timings["draft_n"] > 0
    assert timings["draft_n_accepted"] >= min_acceptance * timings["draft_n"]


@pytest.mark.integration
def test_llama_quantize_q4_0_size_matches_prediction_and_still_streams(llama_build, llama_server_binary, tmp_path):
    # dims that take every llama-quantize branch the real files take: Q6_K embeddings (rows of 256),
    # per_layer_model_proj kept at its source type, Q4_0 matrices, F32 norms
    shape = Gemma4Shape(n_embd=256, n_embd_per_layer=128, n_ff=512, head_dim_swa=64, head_dim_full=128, n_head=4,
                        n_vocab=1024)
    source = tmp_path / "f16.gguf"
    write_gemma4_gguf(source, "tiny-gemma4", shape=shape)
    header = write_gemma4_gguf(tmp_path / "header.gguf", "tiny-gemma4", shape=shape, header_only=True)
    quantized = tmp_path / "q4_0.gguf"
    quantize_file(llama_build.binary("llama-quantize"), source, quantized, "Q4_0", threads=2)
    types = {t.name: t.tensor_type.name for t in GGUFReader(str(quantized)).tensors}
    assert types["per_layer_token_embd.weight"] == types["token_embd.weight"] == "Q6_K"
    assert types["blk.0.ffn_down.weight"] == "Q4_0"
    specs = gemma4_tensors(shape)  # a tiny model's F32 file: as synthetic_file_bytes counts a preset's
    sizes = (tensor_bytes(spec, kind) for spec, kind in zip(specs, tensor_types(specs, quantized=True), strict=True))
    predicted = header.stat().st_size + sum(-(-size // 32) * 32 for size in sizes)
    assert quantized.stat().st_size == pytest.approx(predicted, rel=0.005)
    args = ["-m", str(quantized), "-c", "2048", "-t", "1", "--parallel", "1"]
    with LocalServer(llama_server_binary, args, log_path=tmp_path / "server.log") as server:
        chunks, usage, _ = stream_chat(server.base_url, 48)
    assert usage["completion_tokens"] == 48 == chunks


@pytest.mark.integration
@pytest.mark.parametrize("preset", ["e2b", "e4b"])
def test_real_layer_layout_loads_with_its_drafter(llama_server_binary, tmp_path, preset):
    """The E2B/E4B layer layout (35/42 layers, 20/18 KV-shared, 256/512 heads, swa pattern) at narrow widths."""
    target = replace(PRESETS[preset].target, n_vocab=1024, n_embd=128, n_head=2, n_ff=256)
    drafter = replace(PRESETS[preset].drafter, n_embd=64, n_ff=128)
    model = write_gemma4_gguf(tmp_path / "target.gguf", preset, shape=target)
    assistant = write_gemma4_assistant_gguf(tmp_path / "assistant.gguf", preset, target=target, drafter=drafter)
    args = ["-m", str(model), "-md", str(assistant), "--spec-type", "draft-mtp", "--spec-draft-n-max", "2",
            "-c", "4096", "-t", "1", "--parallel", "1"]
    log = tmp_path / "server.log"
    with LocalServer(llama_server_binary, args, log_path=log) as server:
        chunks, usage, timings = stream_chat(server.base_url, 32)
    assert usage["completion_tokens"] == 32 == chunks
    assert timings["draft_n"] > 0
    # the drafter's full-attention layer reads the target's last layer's KV, its sliding ones the layer before
    n_layer = target.n_layer
    assert f"sharing with layer {n_layer - 1}." in log.read_text()
    assert f"sharing with layer {n_layer - 2}." in log.read_text()


@pytest.mark.integration
def test_a_preset_written_and_quantized_keeps_only_its_q4_0_files(llama_build, tmp_path):
    out, drafter = tmp_path / "tiny-q4_0.gguf", tmp_path / "tiny-assistant-q4_0.gguf"
    written = write_preset("tiny-gemma4", target=out, drafter=drafter,
                           llama_quantize=llama_build.binary("llama-quantize"), threads=2)
    assert written == [out, drafter]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([out.name, drafter.name])  # F16 removed
    for path in (out, drafter):
        types = {t.name: t.tensor_type.name for t in GGUFReader(str(path)).tensors}
        assert types["blk.0.ffn_up.weight"] == "Q4_0"


def test_a_drafter_is_written_alone_with_its_own_favour(tmp_path):
    right, random = tmp_path / "right.gguf", tmp_path / "random.gguf"
    assert write_preset("tiny-gemma4", drafter=right, favour=0.3) == [right]
    assert write_preset("tiny-gemma4", drafter=random, favour=0.3, drafter_favour=0) == [random]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["random.gguf", "right.gguf"]  # no target written
    assert right.read_bytes() != random.read_bytes()
    assert "gemma4-assistant architecture" in synthetic_label(right)
    with pytest.raises(ValueError, match="a target path, a drafter path, or both"):
        write_preset("tiny-gemma4")
