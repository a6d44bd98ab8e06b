"""Write valid GGUF models with random weights, for tests and for rigs without a hub.

Random weights produce random text, which is all a throughput benchmark needs, provided two
things hold: every generated token must be visible text (so one token = one streamed
chunk), and the reply length must be fixed (requests use ``ignore_eos``). The first is
arranged by construction: hidden dimension 0 of every token embedding is a positive
constant that no layer writes to, and the output rows of tokens that must never be sampled
(control tokens, and byte tokens that are not printable ASCII) carry a large negative weight
on that dimension, so their logits sit far below every other token's whatever the input.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from core.whole_files import write_whole

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
ANCHOR_VALUE = 4.0  # embedding value of the anchor dimension (0) for every token
BANNED_WEIGHT = -100.0  # output weight on the anchor dimension for never-sampled tokens


@dataclass(frozen=True)
class LlamaShape:
    """Dimensions of a llama-architecture model."""

    n_vocab: int = 512
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 4096
    rope_freq_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def parameter_count(self) -> int:
        per_layer = (
            2 * self.n_embd
            + self.n_embd * self.n_embd * 2
            + 2 * self.n_embd * self.n_head_kv * self.head_dim
            + 3 * self.n_embd * self.n_ff
        )
        return 2 * self.n_vocab * self.n_embd + self.n_embd + self.n_layer * per_layer


PRESETS: dict[str, LlamaShape] = {
    # Under 5 MB: loads and streams quickly on 2 CPU cores.
    "tiny": LlamaShape(),
    # A bigger CPU model, for sweeps where the server should be the bottleneck.
    "small": LlamaShape(n_vocab=8192, n_embd=256, n_layer=4, n_head=8, n_head_kv=4, n_ff=768, n_ctx=8192),
    # 212 MB of F16 weights, past a CPU's caches: every graph evaluation reads them from memory, so
    # one micro-batch of four tokens costs well under four of one (the slot-layout probe on a CPU).
    "wide": LlamaShape(n_vocab=8192, n_embd=1024, n_layer=8, n_head=16, n_head_kv=8, n_ff=2816, n_ctx=8192),
    # A GPU probe: ~2.05 B parameters with Gemma's 262,144-token vocabulary, whose sampling cost shows.
    "probe-2b": LlamaShape(
        n_vocab=262144, n_embd=2048, n_layer=20, n_head=16, n_head_kv=8, n_ff=8192, n_ctx=131072
    ),
}


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style tokens, scores and types: specials, 256 byte tokens, then pieces."""
    if n_vocab < len(SPECIAL_TOKENS) + 256 + 100:
        raise ValueError(f"n_vocab must be at least {len(SPECIAL_TOKENS) + 356}, got {n_vocab}")
    token_type = gguf.TokenType
    tokens = list(SPECIAL_TOKENS)
    types = [int(token_type.UNKNOWN), int(token_type.CONTROL), int(token_type.CONTROL)]
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [int(token_type.BYTE)] * 256
    pieces: list[str] = ["▁"] + [ch for ch in string.ascii_letters + string.digits + string.punctuation]
    words = [f"▁{a}{b}" for a in string.ascii_lowercase for b in string.ascii_lowercase]
    pieces += words
    counter = 0
    while len(tokens) + len(pieces) < n_vocab:
        pieces.append(f"▁w{counter}")
        counter += 1
    pieces = pieces[: n_vocab - len(tokens)]
    tokens += pieces
    types += [int(token_type.NORMAL)] * len(pieces)
    scores = [0.0] * (len(SPECIAL_TOKENS) + 256) + [-float(index) for index in range(len(pieces))]
    return tokens, scores, types


def banned_token_ids(tokens: list[str]) -> np.ndarray:
    """Ids that must never be generated: control/unknown tokens and non-printable bytes."""
    banned = list(range(len(SPECIAL_TOKENS)))
    for index, token in enumerate(tokens[len(SPECIAL_TOKENS) : len(SPECIAL_TOKENS) + 256]):
        byte = int(token[3:5], 16)
        if not (0x20 <= byte < 0x7F):
            banned.append(len(SPECIAL_TOKENS) + index)
    return np.array(banned)


def random_weights(shape: LlamaShape, seed: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
    """Tensors in llama.cpp's naming, numpy shape (rows=out, cols=in)."""
    rng = np.random.default_rng(seed)
    tokens, _, _ = vocabulary(shape.n_vocab)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(dtype)

    embd = rng.standard_normal((shape.n_vocab, shape.n_embd), dtype=np.float32)
    embd[:, 0] = ANCHOR_VALUE
    output = rng.standard_normal((shape.n_vocab, shape.n_embd), dtype=np.float32)
    output[:, 0] = 0.0
    output[banned_token_ids(tokens), 0] = BANNED_WEIGHT
    weights: dict[str, np.ndarray] = {
        "token_embd.weight": embd.astype(dtype),
        "output_norm.weight": np.ones(shape.n_embd, dtype=np.float32),
        "output.weight": output.astype(dtype),
    }
    kv_width = shape.n_head_kv * shape.head_dim
    for layer in range(shape.n_layer):
        prefix = f"blk.{layer}."
        attn_output = matrix(shape.n_embd, shape.n_embd)
        attn_output[0, :] = 0  # nothing writes to the anchor dimension
        ffn_down = matrix(shape.n_embd, shape.n_ff)
        ffn_down[0, :] = 0
        weights.update(
            {
                prefix + "attn_norm.weight": np.ones(shape.n_embd, dtype=np.float32),
                prefix + "attn_q.weight": matrix(shape.n_embd, shape.n_embd),
                prefix + "attn_k.weight": matrix(kv_width, shape.n_embd),
                prefix + "attn_v.weight": matrix(kv_width, shape.n_embd),
                prefix + "attn_output.weight": attn_output,
                prefix + "ffn_norm.weight": np.ones(shape.n_embd, dtype=np.float32),
                prefix + "ffn_gate.weight": matrix(shape.n_ff, shape.n_embd),
                prefix + "ffn_up.weight": matrix(shape.n_ff, shape.n_embd),
                prefix + "ffn_down.weight": ffn_down,
            }
        )
    return weights


def write_llama_gguf(path: Path | str, shape: LlamaShape, seed: int = 0, name: str = "rigbench-synthetic") -> Path:
    """Write a llama-architecture GGUF (F32 for small models, F16 for large ones)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    large = shape.parameter_count() > 50_000_000
    dtype = np.float16 if large else np.float32
    tokens, scores, types = vocabulary(shape.n_vocab)
    writer = gguf.GGUFWriter(str(path.with_suffix(".part")), "llama")
    writer.add_name(name)
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_freq_base)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(shape.n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if large else gguf.LlamaFileType.ALL_F32)
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
    for tensor_name, array in random_weights(shape, seed, dtype).items():
        if array.ndim == 1:
            array = array.astype(np.float32)
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path.with_suffix(".part").rename(path)
    return path


def write_synthetic_model(path: Path | str, preset: str = "tiny", seed: int = 0, **overrides: int) -> Path:
    """Write a preset (optionally with some dimensions overridden) unless an identical file exists.

    The file name is the caller's; identity is checked through a sidecar that records the
    shape and seed, so a cached file is reused only when it is the same model.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown synthetic preset {preset!r}; known: {', '.join(PRESETS)}")
    shape = replace(PRESETS[preset], **overrides)
    path = Path(path)
    identity = f"{shape}|seed={seed}"
    sidecar = path.with_name(path.name + ".identity")
    if path.exists() and sidecar.exists() and sidecar.read_text() == identity:
        return path
    write_llama_gguf(path, shape, seed, name=f"rigbench-synthetic-{preset}")
    write_whole(sidecar, identity)
    return path


SYNTHETIC_NAME_PREFIX = "rigbench-synthetic"


def synthetic_label(path: Path | str, reader: gguf.GGUFReader | None = None) -> str | None:
    """How a run manifest should label a model file this project wrote, or None for a real one.

    Why: a synthetic model served through ``--model PATH`` would otherwise look like a real
    checkpoint in the manifest, and its random text and fixed reply lengths must be named in
    every report made from it. The files carry ``general.name`` = rigbench-synthetic-… (``reader``: the
    file's header, already read.)
    """
    if reader is None:
        try:
            reader = gguf.GGUFReader(str(path))
        except (OSError, ValueError):
            return None
    name_field = reader.get_field("general.name")
    arch_field = reader.get_field("general.architecture")
    if name_field is None:
        return None
    name = name_field.contents()
    if not isinstance(name, str) or not name.startswith(SYNTHETIC_NAME_PREFIX):
        return None
    arch = arch_field.contents() if arch_field is not None else "unknown"
    return f"synthetic random weights ({arch} architecture, {name}); random text, fixed reply length"
