"""Decode bytes from tensor tables, checked against sums made here from shapes and ggml type sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGUFReader

from core.gpus import find_gpu
from core.rundir import KvWidth
from llamacpp.decode_bytes import (
    gguf_decode_bytes,
    synthetic_gemma4_decode_bytes,
    synthetic_run_decode_bytes,
)
from llamacpp.synthetic_gemma4 import write_gemma4_gguf

ROOT = Path(__file__).resolve().parents[2]
H200_STUDY = ROOT / "runs" / "gpu-h200-profiles-2026-11-30"
F32, F16 = 4, 2
Q4_0 = 18 / 32  # bytes per value: 32 values in an 18-byte block
Q6_K = 210 / 256
F16_CACHE = 2
E2B_Q4_0_FILE_BYTES = 3_351_079_136  # the synthetic E2B after the pinned llama-quantize, as its runs record


def test_tiny_llama_fixture_reads_every_weight_once_and_one_embedding_row(tiny_model):
    # the tiny preset: vocabulary 512, width 64, 2 layers, 4 heads of 16, 2 KV heads, MLP 128; all F32
    vocab, embd, layers, kv, ff = 512, 64, 2, 2 * 16, 128
    per_layer = 2 * embd + embd * embd * 2 + 2 * kv * embd + 3 * ff * embd
    weights = (vocab * embd + embd + layers * per_layer) * F32  # output.weight + output_norm + the blocks
    counted = gguf_decode_bytes(tiny_model)
    assert counted.weights_bytes == weights
    assert counted.lookup_bytes == embd * F32  # one token_embd row, not the table
    assert not counted.tied_output  # this model has its own output.weight
    assert counted.k_values == counted.v_values == KvWidth(full=layers * kv, sliding=0)
    assert counted.sliding_window is None
    assert counted.tensor_count == len(GGUFReader(str(tiny_model)).tensors) == 3 + 9 * layers


def e2b_hand_sums() -> tuple[int, int]:
    """(weights read per step, lookup rows per token) of the E2B at Q4_0, from its published shape:
    35 layers 1536 wide, 8 query heads and 1 KV head of 256 (sliding) or 512 (every 5th: full), the last
    20 layers reuse earlier caches and have 12,288-wide MLPs, per-layer embeddings of 256, vocabulary
    262,144; llama-quantize keeps vectors F32 and per_layer_model_proj F16, makes the two tables Q6_K and
    the other matrices Q4_0."""
    vocab, embd, per_layer, n_layer = 262_144, 1536, 256, 35
    weights = vocab * embd * Q6_K  # token_embd, read whole by the tied output projection
    weights += per_layer * n_layer * embd * F16  # per_layer_model_proj
    weights += (per_layer + embd + 512 // 2) * F32  # per_layer_proj_norm, output_norm, rope_freqs
    for layer in range(n_layer):
        head = 512 if layer % 5 == 4 else 256
        ff = 12_288 if layer >= 15 else 6144
        matrices = 2 * 8 * head * embd + 3 * ff * embd + 2 * per_layer * embd  # q, output; MLP; inp_gate, proj
        vectors = 5 * embd + head + 1  # attn, post-attention, ffn, post-ffw and post norms; q_norm; output scale
        if layer < 15:  # a layer with its own cache: k, v and k_norm run
            matrices += 2 * head * embd
            vectors += head
        weights += matrices * Q4_0 + vectors * F32
    lookups = embd * Q6_K + per_layer * n_layer * Q6_K
    return int(weights), int(lookups)


def test_synthetic_e2b_q4_0_matches_sums_of_its_tensor_sizes():
    weights, lookups = e2b_hand_sums()
    counted = synthetic_gemma4_decode_bytes("e2b", quantized=True)
    assert counted.weights_bytes == weights
    assert counted.lookup_bytes == lookups
    assert counted.tied_output
    # every one of the 35 layers attends: 7 full ones (one 512-wide head), 28 sliding ones (256) over 512 tokens
    assert counted.k_values == counted.v_values == KvWidth(full=7 * 512, sliding=28 * 256)
    assert counted.sliding_window == 512
    # the per-layer table (1.9 GB) is looked up, not read: a token reads under half the file
    assert weights < 0.5 * E2B_Q4_0_FILE_BYTES


def test_gguf_header_and_synthetic_table_agree_on_a_written_gemma4(tmp_path):
    """The metadata path (sliding pattern, shared KV layers, head widths) gives the writer's own table."""
    path = write_gemma4_gguf(tmp_path / "tiny-gemma4.gguf", "tiny-gemma4")
    from_file = gguf_decode_bytes(path)
    from_table = synthetic_gemma4_decode_bytes("tiny-gemma4", quantized=False)
    assert from_file.model_dump(exclude={"source"}) == from_table.model_dump(exclude={"source"})
    assert from_file.sliding_window == 64 and from_file.tied_output


def test_a_committed_run_size_picks_the_q4_0_table_and_no_other():
    label = "synthetic random weights (gemma4 architecture, rigbench-synthetic-e2b); random text, fixed reply length"
    found = synthetic_run_decode_bytes(label, E2B_Q4_0_FILE_BYTES)
    assert found is not None and "Q4_0" in found.source
    assert synthetic_run_decode_bytes(label, E2B_Q4_0_FILE_BYTES + (1 << 20)) is None  # some other file
    assert synthetic_run_decode_bytes(label.replace("e2b)", "e2b-assistant)"), E2B_Q4_0_FILE_BYTES) is None


def bytes_per_token(context: float) -> float:
    counted = synthetic_gemma4_decode_bytes("e2b", quantized=True)
    window = counted.sliding_window or 0
    kv = (counted.k_values.full + counted.v_values.full) * context
    kv += (counted.k_values.sliding + counted.v_values.sliding) * min(context, window)
    return counted.weights_bytes + counted.lookup_bytes + kv * F16_CACHE


def test_llama_bench_tg128_never_reads_faster_than_the_card():
    bench = json.loads((H200_STUDY / "bench-e2b.json").read_text())
    gpu = find_gpu(bench["results"][0]["gpu_info"])
    assert gpu is not None and gpu.memory_bandwidth_gb_s == 4800
    tg128 = bench["summary"]["tg128"]
    implied = tg128 * bytes_per_token(context=64) / 1e9  # 128 tokens from an empty cache: 64 on average
    assert implied <= gpu.memory_bandwidth_gb_s
    assert implied == pytest.approx(tg128 * e2b_hand_sums()[0] / 1e9, rel=0.01)


def test_the_published_e2b_on_an_l4_stays_under_the_l4_peak_only_with_lookups_counted_as_rows():
    """An L4 served the published E2B Q4_0 at 133.4 tok/s for one user (the seed article); with the
    per-layer table counted whole that would need more bandwidth than the L4 has."""
    l4 = find_gpu("NVIDIA L4")
    assert l4 is not None
    per_token = bytes_per_token(context=1000)
    assert 133.4 * per_token / 1e9 <= l4.memory_bandwidth_gb_s
    per_layer_table = 262_144 * 256 * 35 * Q6_K
    assert 133.4 * (per_token + per_layer_table) / 1e9 > l4.memory_bandwidth_gb_s
