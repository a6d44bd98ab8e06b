"""The card's bandwidth roofline per step: how fast decode could go if reading memory were all it did.

A decode step reads every weight once, whatever the number of sequences it decodes, plus each
sequence's embedding rows and its KV cache up to its context (``core.rundir.DecodeBytes`` says
which bytes, counted from the model's tensor table). At the card's peak memory bandwidth:

- one-sequence roof (tok/s) = bandwidth / (weights + rows + KV at the mean context);
- batch roof (tok/s) = B x bandwidth / (weights + B x (rows + KV at the mean context)).

The mean context is the prompt plus the tokens generated so far, averaged over every token the
step's measured requests generated (a sliding-window layer reads at most its window). B is the
sequences in flight: a closed loop's users, at most the server's slots; an open loop's mean
count of requests decoding inside the window, at most the slots. Median per-user tok/s is read
against the one-sequence roof, aggregate tok/s against the batch roof.

What the roof leaves out: compute (a ceiling of its own at large batches), activations, the
sampler, kernel launch gaps and the server's own work: what a step spends beyond reading memory
is what the fraction shows. A drafter lets one read of the weights verify several tokens, so a
run with one can pass its roof. The bandwidth is the datasheet peak (``core.gpus``); a CPU
machine's is not known here, and a run without a GPU has no roofline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gguf
import numpy as np
import pandas as pd
from tabulate import tabulate

from analysis.figures import RunFigures
from analysis.step import StepFigures
from core.gpus import find_gpu
from core.instance_types import INSTANCE_TYPES
from core.rundir import DecodeBytes, RunManifest

BOUND = 0.7  # at or above this share of the roof a step is read as bandwidth-bound
PARTLY = 0.4  # between PARTLY and BOUND: partly bandwidth-bound
CACHE_TYPE_FLAGS = {"k": ("-ctk", "--cache-type-k"), "v": ("-ctv", "--cache-type-v")}
DEFAULT_CACHE_TYPE = "f16"


@dataclass(frozen=True)
class CardBandwidth:
    gb_s: float
    gpu: str
    source: str

    @property
    def bytes_per_second(self) -> float:
        return self.gb_s * 1e9


@dataclass(frozen=True)
class StepRoofline:
    figures: StepFigures
    batch: float
    mean_context: float
    bytes_one: float  # one sequence's bytes per token
    bytes_step: float  # one step's bytes for the whole batch
    roof_one: float
    roof_batch: float
    per_user: float | None
    aggregate: float | None

    @property
    def per_user_fraction(self) -> float | None:
        return None if self.per_user is None else self.per_user / self.roof_one

    @property
    def aggregate_fraction(self) -> float | None:
        return None if self.aggregate is None else self.aggregate / self.roof_batch


@dataclass
class RunRoofline:
    """A run's roofline, or why it is left out (``left_out``)."""

    bandwidth: CardBandwidth | None = None
    decode: DecodeBytes | None = None
    cache_types: tuple[str, str] = (DEFAULT_CACHE_TYPE, DEFAULT_CACHE_TYPE)
    steps: list[StepRoofline] = field(default_factory=list)
    left_out: str | None = None
    drafter: bool = False

    def step(self, index: int) -> StepRoofline | None:
        return next((step for step in self.steps if step.figures.index == index), None)


def card_bandwidth(manifest: RunManifest) -> tuple[CardBandwidth | None, str]:
    """The card's peak from the instance table or the GPU table (``core.gpus``), or why it is unknown."""
    rig = manifest.rig
    known_type = INSTANCE_TYPES.get(rig.instance_type or "")
    if known_type is not None and known_type.gpu_memory_bandwidth_gb_s is not None:
        source = f"instance type {known_type.name}: {known_type.gpu_name} datasheet peak"
        return CardBandwidth(known_type.gpu_memory_bandwidth_gb_s, known_type.gpu_name, source), ""
    gpu = find_gpu(rig.machine.gpu_name)
    if gpu is not None:
        return CardBandwidth(gpu.memory_bandwidth_gb_s, gpu.name, f"GPU {gpu.name} (manifest): datasheet peak"), ""
    if rig.machine.gpu_name:
        return None, (
            f"the run's GPU {rig.machine.gpu_name!r} is not in core/gpus.py, so its memory bandwidth is unknown; "
            "add it there with its datasheet peak"
        )
    return None, "the run recorded no GPU (a CPU machine): its memory bandwidth is not known here"


def cache_types(args: list[str]) -> tuple[str, str]:
    """The K and V cache types the server was started with (``f16`` unless ``-ctk``/``-ctv`` say)."""
    found = {"k": DEFAULT_CACHE_TYPE, "v": DEFAULT_CACHE_TYPE}
    for index, token in enumerate(args[:-1]):
        for which, flags in CACHE_TYPE_FLAGS.items():
            if token in flags:
                found[which] = args[index + 1].lower()
    return found["k"], found["v"]


def bytes_per_value(cache_type: str) -> float | None:
    """Bytes one cache value takes at a ggml type (``q8_0``: 34 bytes per 32 values); None if unknown."""
    try:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[cache_type.upper()]]
    except KeyError:
        return None
    return size / block


def sliding_sum(first: np.ndarray, count: np.ndarray, window: int) -> np.ndarray:
    """Sum of min(c, window) for c from ``first`` to ``first + count - 1``: the positions a sliding layer reads."""
    last = first + count - 1
    below = (first + last) * count / 2
    straddle = (first + window) * (window - first + 1) / 2 + (last - window) * window
    return np.where(last <= window, below, np.where(first >= window, count * window, straddle))


def mean_contexts(records: pd.DataFrame, step: StepFigures, window: int | None) -> tuple[float, float] | None:
    """(mean context, mean sliding-window context) over every token the step's measured requests
    generated; None when no such request counted its prompt tokens."""
    rows = records[(records["step"] == step.index) & (records["phase"] == "measure") & records["error_kind"].isna()]
    prompt = rows["prompt_tokens"].to_numpy(dtype=float)
    prompt = np.where(np.isnan(prompt), rows["timings_prompt_n"].to_numpy(dtype=float), prompt)
    tokens = rows["completion_tokens"].to_numpy(dtype=float)
    tokens = np.where(np.isnan(tokens), rows["timings_predicted_n"].to_numpy(dtype=float), tokens)
    known = ~np.isnan(prompt) & ~np.isnan(tokens) & (tokens > 0)
    if not known.any():
        return None
    prompt, tokens = prompt[known], tokens[known]
    total = tokens.sum()
    full = (tokens * prompt + tokens * (tokens - 1) / 2).sum() / total
    sliding = sliding_sum(prompt, tokens, window).sum() / total if window else 0.0
    return float(full), float(sliding)


def in_flight(records: pd.DataFrame, step: StepFigures) -> float:
    """Mean requests decoding inside the step's window: their decode spans' overlap / the window."""
    first, last = records["t_first_token"].to_numpy(), records["t_last_token"].to_numpy()
    overlap = np.clip(np.minimum(last, step.window_end) - np.maximum(first, step.window_start), 0.0, None)
    return float(np.nansum(overlap) / step.window_seconds)


def step_batch(records: pd.DataFrame, step: StepFigures, slots: int | None) -> float:
    """B: a closed loop's users (every user has a request in flight), an open loop's mean in flight;
    never more than the server's slots."""
    batch = in_flight(records, step) if step.open_loop else float(step.users)
    if slots:
        batch = min(batch, float(slots))
    return max(batch, 1.0)


def per_user_rate(step: StepFigures) -> float | None:
    return step.per_user_tok_s.value


def run_roofline(figures: RunFigures, decode: DecodeBytes | None) -> RunRoofline:
    """Every step's roofline, or the run's with ``left_out`` saying why there is none."""
    manifest = figures.run.manifest
    drafter = manifest.drafter is not None
    bandwidth, unknown = card_bandwidth(manifest)
    if bandwidth is None:
        return RunRoofline(left_out=unknown, drafter=drafter)
    if decode is None:
        if manifest.model is None:
            why = "the manifest records no model, so the bytes a token reads are unknown"
        else:
            why = (
                f"the manifest records no decode bytes for model {manifest.model.name} "
                f"({manifest.model.sha256[:12]}); give its GGUF with --gguf FILE"
            )
        return RunRoofline(bandwidth=bandwidth, left_out=why, drafter=drafter)
    types = cache_types(manifest.server.args if manifest.server is not None else [])
    sizes = [bytes_per_value(kind) for kind in types]
    if None in sizes:
        unknown_type = types[sizes.index(None)]
        return RunRoofline(bandwidth, decode, types, left_out=f"cache type {unknown_type!r} (-ctk/-ctv) is not a "
                           "ggml type this analysis knows", drafter=drafter)
    k_size, v_size = sizes
    assert k_size is not None and v_size is not None
    roofline = RunRoofline(bandwidth, decode, types, drafter=drafter)
    slots = manifest.server.parallel_slots if manifest.server is not None else None
    records = figures.run.records
    for step in figures.steps:
        contexts = mean_contexts(records, step, decode.sliding_window)
        if contexts is None:
            continue
        full, sliding = contexts
        kv = k_size * (decode.k_values.full * full + decode.k_values.sliding * sliding) + v_size * (
            decode.v_values.full * full + decode.v_values.sliding * sliding
        )
        per_sequence = decode.lookup_bytes + kv
        batch = step_batch(records, step, slots)
        bytes_one = decode.weights_bytes + per_sequence
        bytes_step = decode.weights_bytes + batch * per_sequence
        roofline.steps.append(
            StepRoofline(
                figures=step,
                batch=batch,
                mean_context=full,
                bytes_one=bytes_one,
                bytes_step=bytes_step,
                roof_one=bandwidth.bytes_per_second / bytes_one,
                roof_batch=batch * bandwidth.bytes_per_second / bytes_step,
                per_user=per_user_rate(step),
                aggregate=step.aggregate_tok_s.value,
            )
        )
    if not roofline.steps:
        roofline.left_out = "no measured request counted its prompt tokens, so the context each step read is unknown"
    return roofline


def _bound(share: float) -> str:
    if share >= BOUND:
        return "bandwidth-bound: only faster memory, or fewer bytes (a smaller quantization or cache type), helps"
    if share >= PARTLY:
        return "partly bandwidth-bound"
    return ""


def reading(step: StepRoofline, drafter: bool = False) -> str:
    """One line on what limits the step, from its share of the roof."""
    one, batch = step.per_user_fraction, step.aggregate_fraction
    single = step.batch <= 1.0
    share = one if single else batch
    if share is None:
        return "no measured tok/s to read against the roof"
    who = "one user" if single else f"{_count(step.batch)} sequences"
    limit = "the card's bandwidth limit" if single else "the batch's bandwidth limit"
    opening = f"{who} at {share:.0%} of {limit}"
    if share > 1.0:
        why = "drafted tokens share one read of the weights" if drafter else (
            "fewer bytes were read than counted (an on-chip cache held some, or see the notes)"
        )
        return f"{opening}: above the roof, {why}"
    bound = _bound(share)
    if bound:
        return f"{opening}: {bound}"
    if single:
        return f"{opening}: latency-bound, a smaller card may serve it as fast"
    return f"{opening}: not memory-bound (the server's batching, compute or the CPU limit it); a card with less " \
        "bandwidth may keep up"


def _count(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _mb(value: float) -> str:
    return f"{value / 1e6:,.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def describe_bytes(roofline: RunRoofline) -> str:
    """The bytes a token reads, in one sentence, with where the count came from."""
    decode = roofline.decode
    assert decode is not None
    k_type, v_type = roofline.cache_types
    k_size, v_size = bytes_per_value(k_type) or 0.0, bytes_per_value(v_type) or 0.0
    full = k_size * decode.k_values.full + v_size * decode.v_values.full
    text = (
        f"weights read once per step {_mb(decode.weights_bytes)} MB"
        f"{' (the output projection reads token_embd whole: tied)' if decode.tied_output else ''}; "
        f"embedding rows {decode.lookup_bytes / 1e3:,.1f} kB per sequence and token; "
        f"KV cache ({k_type} K, {v_type} V) {full / 1e3:,.1f} kB per token of context"
    )
    if decode.sliding_window:
        sliding = k_size * decode.k_values.sliding + v_size * decode.v_values.sliding
        text += f" plus {sliding / 1e3:,.1f} kB per token up to the {decode.sliding_window}-token sliding window"
    return f"{text}; from the {decode.source}, {decode.tensor_count} tensors."


def roofline_table(roofline: RunRoofline, load_header: str) -> str:
    rows = [
        [
            step.figures.load_label.split()[0],
            _count(step.batch),
            f"{step.mean_context:,.0f}",
            _mb(step.bytes_one),
            _rate(step.roof_one),
            _rate(step.per_user),
            _share(step.per_user_fraction),
            _mb(step.bytes_step),
            _rate(step.roof_batch),
            _rate(step.aggregate),
            _share(step.aggregate_fraction),
            reading(step, roofline.drafter),
        ]
        for step in roofline.steps
    ]
    headers = [
        load_header, "batch B", "mean context", "MB per token, one sequence", "roof, one sequence tok/s",
        "per-user tok/s", "of roof", "MB per step, batch", "roof, batch tok/s", "aggregate tok/s", "of roof", "reading",
    ]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def roofline_section(roofline: RunRoofline | None, load_header: str) -> list[str]:
    """The report's lines for one run (no blank line at the end): the card, the bytes, the per-step
    table, or why it is left out."""
    lines = ["### Bandwidth roofline", ""]
    if roofline is None or roofline.left_out is not None:
        why = roofline.left_out if roofline is not None else "not computed"
        return [*lines, f"Left out: {why}."]
    assert roofline.bandwidth is not None and roofline.decode is not None
    bandwidth = roofline.bandwidth
    lines += [
        f"Card: {bandwidth.gpu}, {bandwidth.gb_s:,.0f} GB/s peak memory bandwidth ({bandwidth.source}). "
        f"A decode token reads: {describe_bytes(roofline)}",
        "",
        roofline_table(roofline, load_header),
        "",
        "Roof, one sequence = bandwidth / bytes one sequence reads per token; roof, batch = B x bandwidth / "
        "(weights + B x each sequence's rows and KV), at the step's mean context. Median per-user tok/s is read "
        "against the first, aggregate tok/s against the second. Memory traffic only: compute, the sampler and the "
        f"server's own work are what a step spends beyond it. At {BOUND:.0%} of a roof or more a step reads as "
        f"bandwidth-bound, under {PARTLY:.0%} as limited by something else.",
    ]
    notes = list(roofline.decode.notes)
    if roofline.drafter:
        notes.append("the run served a drafter: the roof counts the target alone, one token per read of its weights")
    return lines + ["", *(f"Simplification: {note}." for note in notes)] if notes else lines
