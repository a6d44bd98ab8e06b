"""Every tensor of a synthetic ``gemma4`` model and its ``gemma4-assistant`` drafter, without writing one.

Why apart from the writer: a tensor table says what a file holds and what llama-quantize makes
of it (types, bytes, parameter counts) before any weight exists, which is what the decode-bytes
roofline and a run manifest's model summary need; the writer fills these same tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

from llamacpp.gemma4_shapes import AssistantShape, Gemma4Shape


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: GGUF name, numpy shape (rows=out, cols=in) and how to fill it."""

    name: str
    shape: tuple[int, ...]
    fill: str  # how the writer (synthetic_gemma4) fills it: "random", "embedding", "post_norm", "ones", ...

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))


def gemma4_tensors(shape: Gemma4Shape) -> list[TensorSpec]:
    """Every tensor of the target model, in the order llama.cpp creates them."""
    e, pl = shape.n_embd, shape.n_embd_per_layer
    pl_all = pl * shape.n_layer
    specs = [
        TensorSpec("token_embd.weight", (shape.n_vocab, e), "embedding"),
        TensorSpec("per_layer_token_embd.weight", (shape.n_vocab, pl_all), "random"),
        TensorSpec("per_layer_model_proj.weight", (pl_all, e), "random"),
        TensorSpec("per_layer_proj_norm.weight", (pl,), "ones"),
        TensorSpec("output_norm.weight", (e,), "ones"),
        TensorSpec("rope_freqs.weight", (shape.head_dim_full // 2,), "rope_freqs"),
    ]
    for i in range(shape.n_layer):
        hd, ff, p = shape.head_dim(i), shape.n_ff_layer(i), f"blk.{i}."
        specs += [
            TensorSpec(p + "attn_norm.weight", (e,), "ones"),
            TensorSpec(p + "attn_q.weight", (shape.n_head * hd, e), "random"),
            # KV-shared layers keep k/v in the published files (E4B's 7.52 B counts them) though unused
            TensorSpec(p + "attn_k.weight", (shape.n_head_kv * hd, e), "random"),
            TensorSpec(p + "attn_v.weight", (shape.n_head_kv * hd, e), "random"),
            TensorSpec(p + "attn_output.weight", (e, shape.n_head * hd), "random"),
            TensorSpec(p + "attn_q_norm.weight", (hd,), "ones"),
            TensorSpec(p + "attn_k_norm.weight", (hd,), "ones"),
            TensorSpec(p + "post_attention_norm.weight", (e,), "post_norm"),
            TensorSpec(p + "layer_output_scale.weight", (1,), "scalar_one"),
            TensorSpec(p + "ffn_norm.weight", (e,), "ones"),
            TensorSpec(p + "ffn_gate.weight", (ff, e), "random"),
            TensorSpec(p + "ffn_up.weight", (ff, e), "random"),
            TensorSpec(p + "ffn_down.weight", (e, ff), "random"),
            TensorSpec(p + "post_ffw_norm.weight", (e,), "post_norm"),
            TensorSpec(p + "inp_gate.weight", (pl, e), "random"),
            TensorSpec(p + "proj.weight", (e, pl), "random"),
            TensorSpec(p + "post_norm.weight", (e,), "post_norm"),
        ]
    return specs


def assistant_tensors(drafter: AssistantShape, target: Gemma4Shape) -> list[TensorSpec]:
    """Every tensor of the MTP drafter: it reads the target's token_embd and KV cache."""
    e, eb = drafter.n_embd, target.n_embd
    specs = [
        TensorSpec("token_embd.weight", (target.n_vocab, e), "drafter_embedding"),
        TensorSpec("output_norm.weight", (e,), "ones"),
        TensorSpec("nextn.post_projection.weight", (eb, e), "random"),
        TensorSpec("nextn.pre_projection.weight", (e, 2 * eb), "pre_projection"),
        TensorSpec("rope_freqs.weight", (target.head_dim_full // 2,), "rope_freqs"),
    ]
    for i in range(drafter.n_layer):
        hd = target.head_dim_swa if drafter.is_swa(i) else target.head_dim_full
        p = f"blk.{i}."
        specs += [
            TensorSpec(p + "attn_norm.weight", (e,), "ones"),
            TensorSpec(p + "attn_q.weight", (drafter.n_head * hd, e), "random"),
            TensorSpec(p + "attn_output.weight", (e, drafter.n_head * hd), "random"),
            TensorSpec(p + "attn_q_norm.weight", (hd,), "ones"),
            TensorSpec(p + "post_attention_norm.weight", (e,), "post_norm"),
            TensorSpec(p + "layer_output_scale.weight", (1,), "scalar_one"),
            TensorSpec(p + "ffn_norm.weight", (e,), "ones"),
            TensorSpec(p + "ffn_gate.weight", (drafter.n_ff, e), "random"),
            TensorSpec(p + "ffn_up.weight", (drafter.n_ff, e), "random"),
            TensorSpec(p + "ffn_down.weight", (e, drafter.n_ff), "random"),
            TensorSpec(p + "post_ffw_norm.weight", (e,), "post_norm"),
        ]
    return specs


def parameter_count(specs: list[TensorSpec]) -> int:
    return sum(spec.n_elements for spec in specs)


def matrix_dtype(n_params: int) -> type:
    """F16 matrices in a large model (quantize it with llama-quantize), F32 in a tiny one."""
    return np.float16 if n_params > 50_000_000 else np.float32


def quantized_type(spec: TensorSpec, source: gguf.GGMLQuantizationType) -> gguf.GGMLQuantizationType:
    """The type llama-quantize gives a tensor for Q4_0 in this architecture (src/llama-quant.cpp).

    1-D tensors and per_layer_model_proj keep their type; token_embd and per_layer_token_embd
    count as the (tied) output head: Q6_K, or Q8_0 when rows are not a multiple of 256; the
    rest is Q4_0, or F16 when rows are not a multiple of 32.
    """
    q = gguf.GGMLQuantizationType
    cols = spec.shape[-1]
    if len(spec.shape) < 2 or "per_layer_model_proj" in spec.name:
        return source
    if spec.name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return q.Q6_K if cols % 256 == 0 else q.Q8_0
    return q.Q4_0 if cols % 32 == 0 else q.F16


def tensor_types(specs: list[TensorSpec], quantized: bool = False) -> list[gguf.GGMLQuantizationType]:
    """Each tensor's type in the file this writer makes (F32; F16 matrices in a large model), or in
    llama-quantize's Q4_0 of that file: what a tensor table of either file says without reading it."""
    q = gguf.GGMLQuantizationType
    big = matrix_dtype(parameter_count(specs))
    types = []
    for spec in specs:
        source = q.F32 if len(spec.shape) == 1 or big is np.float32 else q.F16
        types.append(quantized_type(spec, source) if quantized else source)
    return types


def tensor_bytes(spec: TensorSpec, kind: gguf.GGMLQuantizationType) -> int:
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return spec.n_elements // block * size
