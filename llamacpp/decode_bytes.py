"""The bytes one decode step reads, counted from a GGUF's tensor table (``core.rundir.DecodeBytes``).

What counts, and why:

- every weight tensor, once per step: a step multiplies each matrix by all its sequences'
  hidden states at once, so a batch shares one read;
- but not the lookup tables (``token_embd``, ``per_layer_token_embd``, ``position_embd``,
  ``token_types``): a lookup reads one row per sequence, counted as ``lookup_bytes``. When the
  output projection is tied to ``token_embd`` (the file has no ``output.weight``) that projection
  reads the table whole, so it counts as a weight as well;
- nor tensors the graph never runs: a layer that reuses an earlier layer's KV cache
  (``attention.shared_kv_layers``) computes no K or V, so its ``attn_k``, ``attn_v`` and
  ``attn_k_norm`` are skipped;
- the cache as values per token of context, K and V apart (their types are serving flags),
  full-context and sliding-window layers apart (a sliding layer reads at most the window).
  Every attending layer counts, a cache-sharing one too: its attention reads the shared cache again.

What is not modelled, said in ``notes`` where a model has it: mixture-of-experts tensors are
counted whole (a token reads only its experts: an upper bound on bytes); a sliding window without a
per-layer pattern counts every layer at full context (an upper bound); caches of other shapes
(compressed latent attention, recurrent state) are not recognised. Caches (L2) that keep small
tensors between steps are ignored: the roofline assumes every byte comes from memory.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gguf

from core.errors import LlamaCppError
from core.rundir import DecodeBytes, KvWidth
from llamacpp.gemma4_shapes import PRESETS, Gemma4Shape
from llamacpp.gemma4_tensors import gemma4_tensors, tensor_bytes, tensor_types
from llamacpp.synthetic_gemma4 import write_gemma4_gguf
from llamacpp.synthetic_models import SYNTHETIC_NAME_PREFIX

LOOKUP_TENSORS = ("token_embd.weight", "per_layer_token_embd.weight", "position_embd.weight", "token_types.weight")
TIED_TABLE = "token_embd.weight"
OUTPUT = "output.weight"
UNUSED_WITHOUT_OWN_CACHE = ("attn_k.weight", "attn_v.weight", "attn_k_norm.weight", "attn_k.bias", "attn_v.bias")


@dataclass(frozen=True)
class TensorRow:
    """One tensor of the table: its name, its bytes and how many rows a lookup can pick from."""

    name: str
    n_bytes: int
    rows: int


@dataclass(frozen=True)
class AttentionLayer:
    """One layer's attention as the cache sees it: values per token of context, K and V."""

    sliding: bool
    k_width: int
    v_width: int
    owns_cache: bool = True


def count_decode_bytes(
    tensors: list[TensorRow], layers: list[AttentionLayer], sliding_window: int | None, source: str,
    notes: list[str] | None = None,
) -> DecodeBytes:
    """The summary of one model from its tensor table and its attention layout (module docstring)."""
    names = {tensor.name for tensor in tensors}
    tied = TIED_TABLE in names and OUTPUT not in names
    skipped = {
        f"blk.{index}.{suffix}" for index, layer in enumerate(layers) if not layer.owns_cache
        for suffix in UNUSED_WITHOUT_OWN_CACHE
    }
    weights = lookups = 0
    for tensor in tensors:
        if tensor.name in LOOKUP_TENSORS:
            lookups += tensor.n_bytes // max(tensor.rows, 1)
            if tensor.name == TIED_TABLE and tied:
                weights += tensor.n_bytes
        elif tensor.name not in skipped:
            weights += tensor.n_bytes
    notes = list(notes or [])
    if any("_exps" in name for name in names):
        notes.append("mixture-of-experts: every expert's tensors counted, though a token reads only its own")
    window = sliding_window if sliding_window and any(layer.sliding for layer in layers) else None
    return DecodeBytes(
        weights_bytes=weights,
        lookup_bytes=lookups,
        k_values=KvWidth(
            full=sum(layer.k_width for layer in layers if not layer.sliding or window is None),
            sliding=sum(layer.k_width for layer in layers if layer.sliding and window is not None),
        ),
        v_values=KvWidth(
            full=sum(layer.v_width for layer in layers if not layer.sliding or window is None),
            sliding=sum(layer.v_width for layer in layers if layer.sliding and window is not None),
        ),
        sliding_window=window,
        tensor_count=len(tensors),
        tied_output=tied,
        source=source,
        notes=notes,
    )


def _per_layer(value: object, n_layer: int, default: int) -> list[int]:
    """A GGUF key that is one number for every layer or an array of one per layer."""
    if value is None:
        return [default] * n_layer
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)] * n_layer  # type: ignore[call-overload]


def _sliding_flags(pattern: object, n_layer: int) -> list[bool] | None:
    """Which layers slide: a per-layer array, or llama.cpp's rule for a period (every n-th is full)."""
    if isinstance(pattern, list):
        return [bool(flag) for flag in pattern]
    if isinstance(pattern, int):
        return [pattern == 0 or index % pattern < pattern - 1 for index in range(n_layer)]
    return None


def attention_layout(fields: dict[str, object]) -> tuple[list[AttentionLayer], int | None, list[str]]:
    """Layers, sliding window and notes from a GGUF's metadata (``{arch}.attention.*`` keys)."""
    arch = fields.get("general.architecture")

    def key(name: str) -> object:
        return fields.get(f"{arch}.{name}")

    n_layer = int(key("block_count") or 0)  # type: ignore[call-overload]
    n_embd = int(key("embedding_length") or 0)  # type: ignore[call-overload]
    heads = _per_layer(key("attention.head_count"), n_layer, 0)
    kv_heads = _per_layer(key("attention.head_count_kv"), n_layer, heads[0] if heads else 0)
    head_width = n_embd // heads[0] if heads and heads[0] else 0
    k_len = int(key("attention.key_length") or head_width)  # type: ignore[call-overload]
    v_len = int(key("attention.value_length") or head_width)  # type: ignore[call-overload]
    k_len_swa = int(key("attention.key_length_swa") or k_len)  # type: ignore[call-overload]
    v_len_swa = int(key("attention.value_length_swa") or v_len)  # type: ignore[call-overload]
    window = int(key("attention.sliding_window") or 0) or None  # type: ignore[call-overload]
    shared = int(key("attention.shared_kv_layers") or 0)  # type: ignore[call-overload]
    notes = []
    sliding = _sliding_flags(key("attention.sliding_window_pattern"), n_layer) if window else None
    if window and sliding is None:
        notes.append(
            f"sliding window of {window} tokens but no per-layer pattern in the file: every layer's cache "
            "counted at the full context (an upper bound)"
        )
    if key("attention.kv_lora_rank"):
        notes.append("compressed latent attention: the cache is counted as plain K and V heads, not its latent form")
    layers = []
    for index in range(n_layer):
        slides = bool(sliding and index < len(sliding) and sliding[index])
        width_k, width_v = (k_len_swa, v_len_swa) if slides else (k_len, v_len)
        layers.append(
            AttentionLayer(
                sliding=slides,
                k_width=kv_heads[index] * width_k,
                v_width=kv_heads[index] * width_v,
                owns_cache=index < n_layer - shared,
            )
        )
    return layers, window if sliding else None, notes


def gguf_reader(path: Path | str) -> gguf.GGUFReader:
    """The file's header as the gguf package reads it (the tensor data stays on disk); one line naming the file
    where it cannot. Slow for a large vocabulary (Gemma's 262k tokens: seconds), so read it once."""
    try:
        return gguf.GGUFReader(str(path))
    except (OSError, ValueError, KeyError) as error:  # KeyError: a tensor type this gguf lacks
        raise LlamaCppError(
            f"{path}: not a readable GGUF model ({error}); give the .gguf file the run served"
        ) from None


def gguf_decode_bytes(path: Path | str, reader: gguf.GGUFReader | None = None) -> DecodeBytes:
    """The summary of a GGUF file (``reader``: its header, already read)."""
    reader = reader or gguf_reader(path)
    fields = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("tokenizer.")}
    tensors = [
        TensorRow(
            name=tensor.name,
            n_bytes=int(tensor.n_bytes),
            rows=int(tensor.n_elements) // int(tensor.shape[0]) if len(tensor.shape) > 1 else 1,
        )
        for tensor in reader.tensors
    ]
    layers, window, notes = attention_layout(fields)
    return count_decode_bytes(tensors, layers, window, f"GGUF tensor table ({Path(path).name})", notes)


def _synthetic_layers(shape: Gemma4Shape) -> list[AttentionLayer]:
    first_shared = shape.n_layer - shape.n_kv_shared
    return [
        AttentionLayer(
            sliding=shape.is_swa(index),
            k_width=shape.n_head_kv * shape.head_dim(index),
            v_width=shape.n_head_kv * shape.head_dim(index),
            owns_cache=index < first_shared,
        )
        for index in range(shape.n_layer)
    ]


def synthetic_gemma4_decode_bytes(preset: str, quantized: bool) -> DecodeBytes:
    """The summary of a synthetic Gemma 4 target from the writer's own table, no file needed:
    the writer's F32/F16 file, or (``quantized``) llama-quantize's Q4_0 of it."""
    shape = PRESETS[preset].target
    specs = gemma4_tensors(shape)
    tensors = [
        TensorRow(spec.name, tensor_bytes(spec, kind), spec.shape[0] if len(spec.shape) > 1 else 1)
        for spec, kind in zip(specs, tensor_types(specs, quantized), strict=True)
    ]
    form = "Q4_0 (llama-quantize)" if quantized else "as written"
    source = f"synthetic writer's tensor table (rigbench-synthetic-{preset}, {form})"
    return count_decode_bytes(tensors, _synthetic_layers(shape), shape.sliding_window, source)


def synthetic_file_bytes(preset: str, quantized: bool, header_bytes: int, alignment: int = 32) -> int:
    """The size of that file: its header plus every tensor padded to the alignment."""
    specs = gemma4_tensors(PRESETS[preset].target)
    sizes = (tensor_bytes(spec, kind) for spec, kind in zip(specs, tensor_types(specs, quantized), strict=True))
    return header_bytes + sum(-(-size // alignment) * alignment for size in sizes)


def synthetic_preset(label: str | None) -> str | None:
    """The Gemma 4 preset a manifest's synthetic label names (``rigbench-synthetic-e2b`` -> ``e2b``)."""
    for preset in PRESETS:
        if label and f"{SYNTHETIC_NAME_PREFIX}-{preset})" in label:
            return preset
    return None


# llama-quantize writes its own header: the writer's keys plus a few of its own (quantization version)
QUANTIZE_HEADER_SLACK = 1024


@functools.cache
def synthetic_header_bytes(preset: str) -> int:
    """The writer's header for a preset (tensor table and vocabulary: 6.7 MB for E2B), written to measure it."""
    with tempfile.TemporaryDirectory() as folder:
        return write_gemma4_gguf(Path(folder) / "header.gguf", preset, header_only=True).stat().st_size


def synthetic_run_decode_bytes(label: str | None, size_bytes: int) -> DecodeBytes | None:
    """A synthetic Gemma 4 model's summary when its file is the writer's, or llama-quantize's Q4_0 of it;
    None for any other file. Why the size decides: the file stays on the rig, and the table of any
    other quantization would make a file megabytes apart. The writer's own file matches to the byte;
    a Q4_0 one within the few header bytes llama-quantize adds."""
    preset = synthetic_preset(label)
    if preset is None:
        return None
    header = synthetic_header_bytes(preset)
    if synthetic_file_bytes(preset, False, header) == size_bytes:
        return synthetic_gemma4_decode_bytes(preset, quantized=False)
    if 0 <= size_bytes - synthetic_file_bytes(preset, True, header) <= QUANTIZE_HEADER_SLACK:
        return synthetic_gemma4_decode_bytes(preset, quantized=True)
    return None
