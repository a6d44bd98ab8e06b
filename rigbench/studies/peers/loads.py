"""A load the peers study offers every tool alike, its syntax, and the truth server it runs against.

A closed loop of N users streaming at a fixed rate each, or Poisson arrivals at a share of a
queueing truth server's capacity; every reply is ``REPLY_TOKENS`` long whatever a tool asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loadtest.ground_truth import GroundTruthConfig

MODEL = "ground-truth"
REPLY_TOKENS = 128
TTFT_MS = 50.0
DEFAULT_LOADS = "64x100,64x100:k3:j0.5,128x100:k3,128x200,256x200,32x100:p0.8"


@dataclass(frozen=True)
class Load:
    """One load: a closed loop of ``users`` streams at ``tok_s`` each, ``k`` tokens per chunk; or,
    with ``share``, Poisson arrivals at that share of the capacity of a truth server that streams
    at most ``users`` replies at once and queues the rest (so the queue is in the truth's TTFT)."""

    users: int
    tok_s: float
    k: int = 1
    jitter: float = 0.0
    share: float | None = None

    @property
    def itl_ms(self) -> float:
        return 1000.0 / self.tok_s

    @property
    def capacity_req_s(self) -> float:
        """Replies a server of ``users`` slots finishes per second, one reply taking its first
        token's wait and then one interval per further token."""
        return self.users / ((TTFT_MS + (REPLY_TOKENS - 1) * self.itl_ms) / 1000.0)

    @property
    def rate(self) -> float | None:
        """Requests/s of an open-loop load, rounded as the tools are given it."""
        return None if self.share is None else round(self.share * self.capacity_req_s, 2)

    @property
    def name(self) -> str:
        tail = f" K={self.k}" + (f" jitter ±{self.jitter:g}" if self.jitter else "")
        if self.share is not None:
            return f"Poisson {self.rate:g} req/s ({self.share:.0%} of {self.users} slots x {self.tok_s:g} tok/s{tail})"
        return f"{self.users} x {self.tok_s:g} tok/s{tail}"

    @property
    def slug(self) -> str:
        slug = f"{self.users}x{self.tok_s:g}-k{self.k}" + (f"-j{self.jitter:g}" if self.jitter else "")
        return slug + (f"-p{self.share:g}" if self.share is not None else "")


def parse_loads(text: str) -> list[Load]:
    """``USERSxTOK_S[:kK][:jJITTER][:pSHARE]`` items, comma-separated: ``64x100,64x100:k3:j0.5``;
    ``32x100:p0.8`` is Poisson arrivals at 80% of a 32-slot server's capacity."""
    loads = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        head, *options = item.split(":")
        match = re.fullmatch(r"(\d+)x(\d+(?:\.\d+)?)", head)
        if not match:
            raise ValueError(f"load {item!r}: expected USERSxTOK_S, e.g. 64x100")
        k, jitter, share = 1, 0.0, None
        for option in options:
            if option.startswith("k") and option[1:].isdigit():
                k = int(option[1:])
            elif option.startswith("j"):
                jitter = float(option[1:])
            elif option.startswith("p"):
                share = float(option[1:])
            else:
                raise ValueError(f"load {item!r}: unknown option {option!r} (kK, jJITTER or pSHARE)")
        if int(match.group(1)) < 1 or float(match.group(2)) <= 0 or k < 1 or not 0 <= jitter < 1:
            raise ValueError(f"load {item!r}: users >= 1, tok/s > 0, k >= 1, 0 <= jitter < 1")
        if share is not None and not 0 < share <= 2:
            raise ValueError(f"load {item!r}: 0 < SHARE <= 2 (of the server's capacity)")
        loads.append(Load(int(match.group(1)), float(match.group(2)), k, jitter, share))
    if not loads:
        raise ValueError("no loads given")
    return loads


@dataclass(frozen=True)
class Durations:
    """How long each tool drives a load: its warm-up, then its measured window."""

    warmup: float  # rigbench's warm-up and guidellm's warm-up, both excluded from their figures
    measure: float

    @property
    def seconds(self) -> float:
        """The load time of each tool: rigbench's warm-up + measure, the peers' duration."""
        return self.warmup + self.measure


def truth_config(load: Load) -> GroundTruthConfig:
    """The truth server for one run of a load: fixed reply length, one slot per user (queued for Poisson)."""
    return GroundTruthConfig(
        ttft_ms=TTFT_MS,
        itl_ms=load.itl_ms,
        tokens=REPLY_TOKENS,  # fixed whatever a tool calls the field (guidellm sends max_completion_tokens)
        model=MODEL,
        slots=load.users,
        tokens_per_chunk=load.k,
        jitter=load.jitter,
        seed=1,
        per_chunk_counts=True,
        queue=load.share is not None,
    )
