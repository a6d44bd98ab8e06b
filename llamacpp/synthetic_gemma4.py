"""Write Gemma 4-shaped GGUF models (``gemma4``) and MTP drafters (``gemma4-assistant``) with random weights.

Why: the profiles serve Gemma 4 E2B/E4B, and what a GPU spends per token depends on the tensor
shapes (``gemma4_shapes``, ``gemma4_tensors``), not on the values. These files have the real
shapes, so llama-bench and llama-server read the same bytes per token as the published files;
only the text is random.

Visible text (one streamed chunk per token) uses the ``synthetic_models`` anchor idea adapted
to Gemma 4, whose output head is tied to ``token_embd``: dimension 0 of every embedding row is
+ANCHOR for sampleable tokens and -BANNED for control/non-printable tokens, and no layer writes
dimension 0 (its weight in every post-norm is 0). The last position's hidden state therefore
keeps a positive dimension 0 whenever its token is sampleable, so banned tokens sit at the
softcap floor (-30) far below every other token. "\\n" is a normal piece, so chat prompts (which
end in "\\n") never end on a banned token. Limitation: a raw ``/completion`` prompt whose last
token is banned (a control token, or a byte of a non-ASCII character) flips the sign and makes
banned tokens likely; send ASCII prompts. Large presets are written F16; ``write_preset`` turns
them into Q4_0 with the pinned llama-quantize (``llamacpp.quantize``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from llamacpp.gemma4_shapes import PRESETS, AssistantShape, Gemma4Shape
from llamacpp.gemma4_tensors import TensorSpec, assistant_tensors, gemma4_tensors, matrix_dtype, parameter_count
from llamacpp.quantize import quantize_file
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
    big_dtype = matrix_dtype(n_params)
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
    big_dtype = matrix_dtype(parameter_count(specs))
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


def quantize_q4_0(binary: Path | str, source: Path, out: Path, *, threads: int | None = None,
                  log_path: Path | None = None) -> Path:
    """llama-quantize's Q4_0 of a written file (its own rules keep some tensors F32/F16/Q6_K); the source goes."""
    quantize_file(binary, source, out, "Q4_0", threads=threads, log_path=log_path)
    source.unlink()
    return out


def write_preset(preset: str, *, target: Path | None = None, drafter: Path | None = None, seed: int = 0,
                 favour: float = 0.0, drafter_favour: float | None = None,
                 llama_quantize: Path | str | None = None, threads: int | None = None) -> list[Path]:
    """A preset's target model, its drafter, or both: the files written, in that order.

    ``drafter_favour`` is the drafter's own favour (default: ``favour``); 0 against a favoured
    target gives a drafter whose guesses are almost never kept. With ``llama_quantize`` each
    file is Q4_0: written beside it first (F16 for e2b/e4b), quantized, and that copy removed.
    """
    if target is None and drafter is None:
        raise ValueError("write_preset needs a target path, a drafter path, or both")
    own_favour = favour if drafter_favour is None else drafter_favour
    jobs: list[tuple[Path, Callable[[Path], Path]]] = []
    if target is not None:
        jobs.append((target, lambda path: write_gemma4_gguf(path, preset, seed, favour=favour)))
    if drafter is not None:
        jobs.append((drafter, lambda path: write_gemma4_assistant_gguf(path, preset, seed + 1, favour=own_favour)))
    for out, write in jobs:
        if llama_quantize is None:
            write(out)
        else:
            quantize_q4_0(llama_quantize, write(out.with_name(out.name + ".f16.gguf")), out, threads=threads)
    return [out for out, _ in jobs]
