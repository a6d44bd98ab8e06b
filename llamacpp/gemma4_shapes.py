"""The dimensions of Gemma 4 E-series models (``gemma4``) and their MTP drafters (``gemma4-assistant``).

Why a table of its own: what a GPU spends per token depends on these shapes (per-layer
embedding table, KV sharing, double-wide MLPs, mixed head widths, the 262,144-token head), and
the synthetic writer, the tensor inventory and the decode-bytes roofline all read them; the
table needs nothing but the standard library.

Shapes follow the pinned llama.cpp (``src/models/gemma4.cpp`` / ``gemma4-assistant.cpp`` and
``conversion/gemma.py``). The E2B/E4B dimensions reproduce the published sizes: the synthetic E2B
quantized by the pinned llama-quantize to Q4_0 measured 3,351,079,136 bytes (published file:
3,349,516,256, +0.05%), and E4B has the 7.52 B parameters llama.cpp's docs list. The drafter
dimensions are NOT published anywhere we could read; they are a labelled guess (``guesses``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
