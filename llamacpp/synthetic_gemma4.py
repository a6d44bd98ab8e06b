"""Write Gemma 4-shaped GGUF models (``gemma4``) and MTP drafters (``gemma4-assistant``) with random weights.

Why: the profiles serve Gemma 4 E2B/E4B, and what a GPU spends per token depends on the tensor
shapes (per-layer embedding table, KV sharing, double-wide MLPs, softcapped 262,144-token
head), not on the values. These files have the real shapes, so llama-bench and llama-server
read the same bytes per token as the published files; only the text is random.

Shapes follow the pinned llama.cpp (``src/models/gemma4.cpp`` / ``gemma4-assistant.cpp`` and
``conversion/gemma.py``). The E2B/E4B dimensions reproduce the published sizes: the synthetic E2B
quantized by the pinned llama-quantize to Q4_0 measured 3,351,079,136 bytes (published file:
3,349,516,256, +0.05%), and E4B has the 7.52 B parameters llama.cpp's docs list. The drafter
dimensions are NOT published anywhere we could read; they are a labelled guess (``guesses``).

Visible text (one streamed chunk per token) uses the ``synthetic_models`` anchor idea adapted
to Gemma 4, whose output head is tied to ``token_embd``: dimension 0 of every embedding row is
+ANCHOR for sampleable tokens and -BANNED for control/non-printable tokens, and no layer writes
dimension 0 (its weight in every post-norm is 0). The last position's hidden state therefore
keeps a positive dimension 0 whenever its token is sampleable, so banned tokens sit at the
softcap floor (-30) far below every other token. "\\n" is a normal piece, so chat prompts (which
end in "\\n") never end on a banned token. Limitation: a raw ``/completion`` prompt whose last
token is banned (a control token, or a byte of a non-ASCII character) flips the sign and makes
banned tokens likely; send ASCII prompts. Only numpy and gguf are imported, so this runs on a bare
GPU machine from the repository root (``python -m llamacpp.synthetic_gemma4 --help``), with
``PYTHONPATH=<llama.cpp>/gguf-py`` where gguf is not installed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gguf
import numpy as np

from llamacpp.synthetic_models import CHATML_TEMPLATE, banned_token_ids, vocabulary

ANCHOR_VALUE = 1.0  # token_embd[:, 0] for sampleable tokens (times sqrt(n_embd) at the input)
BANNED_VALUE = -100.0  # token_embd[:, 0] for tokens that must never be sampled
POST_NORM_WEIGHT = 0.3  # small post-norm weights keep dimension 0 dominant after 35-42 layers
# The head is tied to token_embd, so a token's own input embedding favours repeating it; rows
# this small (relative to the layers' writes) leave sampling close to uniform over visible tokens.
EMBEDDING_SCALE = 0.02
FAVOURED_PIECE = "▁ab"  # the token ``favour`` biases (target) and always drafts (drafter)
DRAFTER_FAVOUR_WEIGHT = 10.0
NEWLINE_PIECE = "\n"


@dataclass(frozen=True)
class Gemma4Shape:
    """Dimensions of a dense ``gemma4`` model with per-layer embeddings (the E-series)."""

    n_vocab: int = 512
    n_embd: int = 128
    n_layer: int = 6
    n_head: int = 2
    n_head_kv: int = 1
    head_dim_swa: int = 32
    head_dim_full: int = 64
    n_ff: int = 256
    double_wide_shared_ffn: bool = True  # KV-shared layers have 2*n_ff (use_double_wide_mlp)
    n_kv_shared: int = 3
    n_embd_per_layer: int = 32
    full_every: int = 3  # layer i is full attention when i % full_every == full_every - 1
    sliding_window: int = 64
    n_ctx: int = 4096
    rope_base_full: float = 1_000_000.0
    rope_base_swa: float = 10_000.0
    partial_rotary_full: float = 0.25
    softcap: float = 30.0

    def is_swa(self, layer: int) -> bool:
        return layer % self.full_every != self.full_every - 1

    def n_ff_layer(self, layer: int) -> int:
        shared = layer >= self.n_layer - self.n_kv_shared
        return self.n_ff * 2 if shared and self.double_wide_shared_ffn else self.n_ff

    def head_dim(self, layer: int) -> int:
        return self.head_dim_swa if self.is_swa(layer) else self.head_dim_full

    def validate(self) -> None:
        """The constraints llama.cpp asserts at load time, as readable errors instead of aborts."""
        first_shared = self.n_layer - self.n_kv_shared
        if first_shared < 2:
            raise ValueError(f"need at least 2 non-shared layers, got {first_shared}")
        if self.is_swa(first_shared - 1) or not self.is_swa(first_shared - 2):
            raise ValueError("the last non-shared layer must be full attention and the one before sliding")
        if self.is_swa(self.n_layer - 1) or not self.is_swa(self.n_layer - 2):
            raise ValueError("the drafter shares the last (full) and second-to-last (sliding) layers' KV")


@dataclass(frozen=True)
class AssistantShape:
    """Dimensions of a ``gemma4-assistant`` MTP drafter; KV and heads come from its target."""

    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_ff: int = 128
    full_every: int = 2

    def is_swa(self, layer: int) -> bool:
        return layer % self.full_every != self.full_every - 1


@dataclass(frozen=True)
class Preset:
    target: Gemma4Shape
    drafter: AssistantShape
    notes: str = ""
    guesses: tuple[str, ...] = field(default_factory=tuple)


PRESETS: dict[str, Preset] = {
    # Same structure as E2B (PLE, KV sharing, double-wide MLP, mixed head dims), 1 MB: CPU tests.
    "tiny-gemma4": Preset(Gemma4Shape(), AssistantShape(), notes="test model, E2B structure"),
    # google/gemma-4-E2B-it text stack: 35 layers, 1536 wide, 8 q / 1 kv heads, heads 256 (sliding)
    # and 512 (full, every 5th), 20 KV-shared layers with 12,288-wide MLPs, PLE 256 per layer.
    "e2b": Preset(
        Gemma4Shape(
            n_vocab=262144, n_embd=1536, n_layer=35, n_head=8, n_head_kv=1, head_dim_swa=256, head_dim_full=512,
            n_ff=6144, double_wide_shared_ffn=True, n_kv_shared=20, n_embd_per_layer=256, full_every=5,
            sliding_window=512, n_ctx=131072,
        ),
        AssistantShape(n_embd=256, n_layer=4, n_head=8, n_ff=2048, full_every=4),
        notes="E2B: predicted Q4_0 size within 0.5% of the published 3,349,516,256 bytes",
        guesses=("drafter dimensions (n_embd, n_layer, n_head, n_ff) are not published; chosen small",),
    ),
    # google/gemma-4-E4B-it text stack: 42 layers, 2560 wide, 8 q / 2 kv heads, full every 6th,
    # 18 KV-shared layers, plain 10,240 MLPs: 7.52 B parameters, as llama.cpp's docs list.
    "e4b": Preset(
        Gemma4Shape(
            n_vocab=262144, n_embd=2560, n_layer=42, n_head=8, n_head_kv=2, head_dim_swa=256, head_dim_full=512,
            n_ff=10240, double_wide_shared_ffn=False, n_kv_shared=18, n_embd_per_layer=256, full_every=6,
            sliding_window=512, n_ctx=131072,
        ),
        AssistantShape(n_embd=256, n_layer=4, n_head=8, n_ff=2048, full_every=4),
        notes="E4B: 7.52 B parameters (llama.cpp docs/build-riscv64-spacemit.md lists 7.52 B)",
        guesses=(
            "full attention every 6th layer (forced by 18 shared layers and the KV reuse rule)",
            "drafter dimensions (n_embd, n_layer, n_head, n_ff) are not published; chosen small",
        ),
    ),
}


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: GGUF name, numpy shape (rows=out, cols=in) and how to fill it."""

    name: str
    shape: tuple[int, ...]
    fill: str  # how _filler makes its values: "random", "embedding", "post_norm", "ones", ...

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


def gemma4_vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """The shared synthetic vocabulary with "\\n" as a normal piece (chat prompts end in it)."""
    tokens, scores, types = vocabulary(n_vocab)
    tokens[-1] = NEWLINE_PIECE
    return tokens, scores, types


class _GeneratedTensor:
    """Quacks like the numpy array GGUFWriter.write_tensor_data expects, but fills rows in chunks.

    The E2B per-layer table is 2.3 G values; building it whole would need ~14 GB of RAM.
    """

    def __init__(self, shape: tuple[int, ...], dtype: type, make_rows: Callable[[int, int], np.ndarray]):
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize
        self._make_rows = make_rows

    def tofile(self, handle) -> None:
        rows = self.shape[0]
        cols = int(np.prod(self.shape[1:])) if len(self.shape) > 1 else 1
        step = max(1, (16 << 20) // max(cols, 1))
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            handle.write(np.ascontiguousarray(self._make_rows(start, stop), dtype=self.dtype).tobytes())


def favoured_token_id(tokens: list[str]) -> int:
    """The visible token that ``favour`` makes likely in the target and certain in the drafter."""
    return tokens.index(FAVOURED_PIECE)


class RandomPool:
    """Normal values drawn once and read at random offsets: ~10x faster than drawing every value.

    The E2B file holds 4.6 G values; drawing each one costs over a minute of the GPU machine's
    time, and which random values a throughput benchmark multiplies does not matter.
    """

    def __init__(self, rng: np.random.Generator, size: int):
        self.rng = rng
        self.size = max(1, size)
        values = rng.standard_normal(self.size, dtype=np.float32)
        self.values = np.concatenate([values, values])

    def take(self, count: int) -> np.ndarray:
        if count > self.size:
            return self.rng.standard_normal(count, dtype=np.float32)
        start = int(self.rng.integers(self.size))
        return self.values[start : start + count]


def _pool_for(specs: list[TensorSpec], rng: np.random.Generator) -> RandomPool:
    largest = max(spec.n_elements for spec in specs)
    return RandomPool(rng, min(largest, 1 << 24) + 7)


def _filler(spec: TensorSpec, pool: RandomPool, banned: np.ndarray, shape: Gemma4Shape,
            favoured: int | None = None, favour: float = 0.0):
    """A row generator for one tensor; see the module docstring for why dimension 0 is special."""
    cols = spec.shape[1] if len(spec.shape) > 1 else 1

    def random_rows(start: int, stop: int) -> np.ndarray:
        values = pool.take((stop - start) * cols).reshape(stop - start, cols)
        return values * np.float32(1.0 / np.sqrt(cols))

    if spec.fill == "random":
        return random_rows
    if spec.fill == "embedding":  # target token_embd (also its output head)
        anchor = np.full(spec.shape[0], ANCHOR_VALUE, dtype=np.float32)
        anchor[banned] = BANNED_VALUE
        if favoured is not None:
            anchor[favoured] += favour

        def embedding_rows(start: int, stop: int) -> np.ndarray:
            rows = random_rows(start, stop) * np.float32(EMBEDDING_SCALE)
            rows[:, 0] = anchor[start:stop]
            return rows

        return embedding_rows
    if spec.fill == "drafter_embedding":  # drafter token_embd = its output head
        def drafter_rows(start: int, stop: int) -> np.ndarray:
            rows = random_rows(start, stop)
            rows[:, 0] = 0.0
            if favoured is not None and favour > 0 and start <= favoured < stop:
                rows[favoured - start, 0] = DRAFTER_FAVOUR_WEIGHT
            return rows

        return drafter_rows
    if spec.fill == "pre_projection":  # drafter dim 0 copies the target embedding's anchor (> 0)
        def pre_projection_rows(start: int, stop: int) -> np.ndarray:
            rows = random_rows(start, stop)
            if start == 0:
                rows[0, :] = 0.0
                rows[0, 0] = 1.0
            return rows

        return pre_projection_rows
    if spec.fill == "rope_freqs":
        n_rot = int(shape.head_dim_full * shape.partial_rotary_full / 2)
        values = np.array([1.0] * n_rot + [1e30] * (spec.shape[0] - n_rot), dtype=np.float32)
        return lambda start, stop: values[start:stop]
    if spec.fill == "post_norm":
        values = np.full(spec.shape[0], POST_NORM_WEIGHT, dtype=np.float32)
        values[0] = 0.0  # nothing writes to the anchor dimension
        return lambda start, stop: values[start:stop]
    values = np.ones(spec.shape[0], dtype=np.float32)  # "ones", "scalar_one"
    return lambda start, stop: values[start:stop]


def _write(path: Path, arch: str, specs: list[TensorSpec], add_metadata: Callable[[gguf.GGUFWriter], None],
           make_filler: Callable[[TensorSpec], Callable[[int, int], np.ndarray]], big_dtype: type,
           header_only: bool = False) -> Path:
    """Stream the GGUF to PATH.part and rename it; ``header_only`` stops before the tensor data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(part), arch)
    add_metadata(writer)
    tensors: list[_GeneratedTensor] = []
    for spec in specs:
        dtype = np.float32 if len(spec.shape) == 1 else big_dtype
        tensor = _GeneratedTensor(spec.shape, dtype, make_filler(spec))
        writer.add_tensor_info(spec.name, spec.shape, tensor.dtype, tensor.nbytes)
        tensors.append(tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in [] if header_only else tensors:
        writer.write_tensor_data(tensor)  # type: ignore[arg-type]
    writer.close()
    part.rename(path)
    return path


def _add_vocab(writer: gguf.GGUFWriter, n_vocab: int) -> None:
    tokens, scores, types = gemma4_vocabulary(n_vocab)
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)


def _add_attention_keys(writer: gguf.GGUFWriter, target: Gemma4Shape, n_head: int, swa: list[bool]) -> None:
    writer.add_context_length(target.n_ctx)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(target.n_head_kv)
    writer.add_key_length(target.head_dim_full)
    writer.add_value_length(target.head_dim_full)
    writer.add_key_length_swa(target.head_dim_swa)
    writer.add_value_length_swa(target.head_dim_swa)
    writer.add_rope_dimension_count(target.head_dim_full)  # proportional rope: rope_freqs masks 3/4
    writer.add_rope_dimension_count_swa(target.head_dim_swa)
    writer.add_rope_freq_base(target.rope_base_full)
    writer.add_rope_freq_base_swa(target.rope_base_swa)
    writer.add_sliding_window(target.sliding_window)
    writer.add_sliding_window_pattern(swa)
    writer.add_layer_norm_rms_eps(1e-6)


def _big_dtype(n_params: int) -> type:
    return np.float16 if n_params > 50_000_000 else np.float32


def write_gemma4_gguf(path: Path | str, preset: str = "tiny-gemma4", seed: int = 0,
                      shape: Gemma4Shape | None = None, favour: float = 0.0, header_only: bool = False) -> Path:
    """Write the target model (F32 when tiny, F16 when large: quantize it with llama-quantize).

    ``favour`` > 0 raises the logit of one visible token (FAVOURED_PIECE), so the text repeats it
    more often; with the drafter (which always drafts that token when written with favour > 0)
    this sets the draft acceptance rate. Measured on CPU at E2B / E4B widths and depths with
    llama-server's default sampling (temp 0.8, top-k 40, min-p 0.05), --spec-draft-n-max 2:
    favour 0 -> 0.00 / 0.00, 0.1 -> 0.07 / 0.06, 0.2 -> 0.22 / 0.19, 0.25 -> 0.26 / 0.39,
    0.27 -> 0.33 / -, 0.3 -> 1.00 / 1.00 (min-p then drops every other token). Greedy sampling
    accepts everything for any favour > 0. Re-measure under other sampling settings.
    """
    shape = shape or PRESETS[preset].target
    shape.validate()
    specs = gemma4_tensors(shape)
    n_params = parameter_count(specs)
    big_dtype = _big_dtype(n_params)
    rng = np.random.default_rng(seed)
    tokens, _, _ = gemma4_vocabulary(shape.n_vocab)
    banned = banned_token_ids(tokens)

    def metadata(writer: gguf.GGUFWriter) -> None:
        writer.add_name(f"rigbench-synthetic-{preset}")
        writer.add_embedding_length(shape.n_embd)
        writer.add_block_count(shape.n_layer)
        ffn = [shape.n_ff_layer(i) for i in range(shape.n_layer)]
        writer.add_feed_forward_length(ffn if len(set(ffn)) > 1 else ffn[0])
        _add_attention_keys(writer, shape, shape.n_head, [shape.is_swa(i) for i in range(shape.n_layer)])
        writer.add_shared_kv_layers(shape.n_kv_shared)
        writer.add_embedding_length_per_layer_input(shape.n_embd_per_layer)
        writer.add_final_logit_softcapping(shape.softcap)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if big_dtype is np.float16 else gguf.LlamaFileType.ALL_F32)
        _add_vocab(writer, shape.n_vocab)

    favoured = favoured_token_id(tokens)
    pool = _pool_for(specs, rng)
    return _write(Path(path), "gemma4", specs, metadata,
                  lambda spec: _filler(spec, pool, banned, shape, favoured, favour), big_dtype, header_only)


def write_gemma4_assistant_gguf(path: Path | str, preset: str = "tiny-gemma4", seed: int = 1,
                                target: Gemma4Shape | None = None, drafter: AssistantShape | None = None,
                                favour: float = 0.0, header_only: bool = False) -> Path:
    """Write the MTP drafter for a preset's target (``-md FILE --spec-type draft-mtp``).

    With ``favour`` > 0 it always drafts FAVOURED_PIECE (its dimension 0 copies the target
    embedding's positive anchor); with 0 its drafts are random and almost never accepted.
    """
    target = target or PRESETS[preset].target
    drafter = drafter or PRESETS[preset].drafter
    specs = assistant_tensors(drafter, target)
    big_dtype = _big_dtype(parameter_count(specs))
    rng = np.random.default_rng(seed)

    def metadata(writer: gguf.GGUFWriter) -> None:
        writer.add_name(f"rigbench-synthetic-{preset}-assistant")
        writer.add_embedding_length(drafter.n_embd)
        writer.add_embedding_length_out(target.n_embd)
        writer.add_block_count(drafter.n_layer)
        writer.add_nextn_predict_layers(drafter.n_layer)
        writer.add_feed_forward_length(drafter.n_ff)
        _add_attention_keys(writer, target, drafter.n_head, [drafter.is_swa(i) for i in range(drafter.n_layer)])
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if big_dtype is np.float16 else gguf.LlamaFileType.ALL_F32)
        _add_vocab(writer, target.n_vocab)

    tokens, _, _ = gemma4_vocabulary(target.n_vocab)
    no_bans = np.array([], dtype=int)
    pool = _pool_for(specs, rng)
    return _write(Path(path), "gemma4-assistant", specs, metadata,
                  lambda spec: _filler(spec, pool, no_bans, target, favoured_token_id(tokens), favour), big_dtype,
                  header_only)


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
    big = _big_dtype(parameter_count(specs))
    types = []
    for spec in specs:
        source = q.F32 if len(spec.shape) == 1 or big is np.float32 else q.F16
        types.append(quantized_type(spec, source) if quantized else source)
    return types


def tensor_bytes(spec: TensorSpec, kind: gguf.GGMLQuantizationType) -> int:
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return spec.n_elements // block * size


def predicted_q4_0_bytes(specs: list[TensorSpec], header_bytes: int, source_big: type = np.float16,
                         alignment: int = 32) -> int:
    """Size of llama-quantize's Q4_0 output: the F16 file's header plus each aligned quantized tensor."""
    total = header_bytes
    for spec in specs:
        source = gguf.GGMLQuantizationType.F32 if len(spec.shape) == 1 or source_big is np.float32 \
            else gguf.GGMLQuantizationType.F16
        nbytes = tensor_bytes(spec, quantized_type(spec, source))
        total += -(-nbytes // alignment) * alignment
    return total


def preset_summary(name: str) -> dict:
    """What a run manifest should say about a synthetic model: dims, parameter counts, guesses."""
    preset = PRESETS[name]
    return {
        "preset": name,
        "architecture": "gemma4",
        "drafter_architecture": "gemma4-assistant",
        "synthetic": True,
        "target": asdict(preset.target),
        "drafter": asdict(preset.drafter),
        "target_parameters": parameter_count(gemma4_tensors(preset.target)),
        "drafter_parameters": parameter_count(assistant_tensors(preset.drafter, preset.target)),
        "notes": preset.notes,
        "guesses": list(preset.guesses),
    }


def _quantize(binary: Path, source: Path, out: Path, threads: int) -> None:
    """Run llama-quantize Q4_0 (its own rules decide which tensors stay F32/F16/Q6_K), then drop the F16."""
    subprocess.run([str(binary), str(source), str(out), "Q4_0", str(threads)], check=True,
                   stdout=subprocess.DEVNULL)
    source.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a synthetic Gemma 4 GGUF (F16 for e2b/e4b).")
    parser.add_argument("--preset", choices=list(PRESETS), default="tiny-gemma4")
    parser.add_argument("--out", type=Path, help="target model file")
    parser.add_argument("--drafter", type=Path, help="also write the gemma4-assistant drafter here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--favour", type=float, default=0.0,
                        help="bias one visible token (sets draft acceptance: 0 = ~none, 1 = ~all)")
    parser.add_argument("--drafter-favour", type=float,
                        help="the drafter's own favour (default: --favour); 0 against a favoured target "
                             "gives a drafter whose guesses are almost never kept")
    parser.add_argument("--llama-quantize", type=Path,
                        help="quantize to Q4_0 with this binary: OUT and DRAFTER are then Q4_0 files")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.out is None and args.drafter is None:
        parser.error("give --out (target), --drafter, or both")
    drafter_favour = args.favour if args.drafter_favour is None else args.drafter_favour
    jobs = []
    if args.out:
        jobs.append((args.out, lambda path: write_gemma4_gguf(path, args.preset, args.seed, favour=args.favour)))
    if args.drafter:
        jobs.append((args.drafter, lambda path: write_gemma4_assistant_gguf(
            path, args.preset, args.seed + 1, favour=drafter_favour)))
    for out, write in jobs:
        if args.llama_quantize:
            source = write(out.with_name(out.name + ".f16.gguf"))
            _quantize(args.llama_quantize, source, out, args.threads)
        else:
            write(out)
        print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
