"""Exact output tokens in a window from each chunk's arrival time, for runs kept with ``--timeline``.

Without timelines a request's tokens are spread evenly over its decode span, which is exact
for a request inside the window and right on average at its edges while tokens arrive at an
even pace (a real server's decode steps). A server or client that falls behind delivers in
bursts (a backlog caught up), and the spread then misplaces the straddling requests' tokens:
with the arrival times kept, each chunk's tokens count where they arrived. A chunk's tokens are
the request's per-chunk counts where the stream carried them (the first chunk's
``first_chunk_tokens``, the rest shared evenly by the others), else one token a chunk.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from core.rundir import RunDir
from core.rundir.jsonl import forms, iter_lines


class ChunkArrivals:
    """Every timed chunk of a run, in arrival order, with the running sum of its tokens."""

    def __init__(self, times: np.ndarray, tokens: np.ndarray, request_ids: set[str]):
        order = np.argsort(times, kind="stable")
        self.times = times[order]
        self.cumulative = np.concatenate([[0.0], np.cumsum(tokens[order])])
        self.request_ids = request_ids

    @classmethod
    def from_runs(cls, paths: list[Path], frame: pd.DataFrame) -> ChunkArrivals | None:
        """The timelines of every run in ``paths`` (one run, or a resumed sweep's chain) for the records in
        ``frame`` (with ``output_tokens``), or None where none of them has any."""
        folders = [folder for path in paths if (folder := Path(path) / RunDir.TIMELINES).is_dir()]
        if not folders:
            return None
        chunks: dict[str, list[float]] = {}
        shards = [folder / name for folder in folders
                  for name in sorted({path.name.removesuffix(".gz") for path in folder.glob("*.jsonl*")})]
        for form in (form for shard in shards for form in forms(shard)):  # plain or packed (compact)
            for _, line, _ in iter_lines(form):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a killed writer: that request falls back to its spread
                chunks[entry["request_id"]] = entry["chunks"]
        times, tokens, ids = [], [], set()
        # only the records with a timeline, in the frame's order (a timed run may hold a million records)
        with_timeline = frame["request_id"].isin(chunks.keys()).to_numpy()
        kept = frame.loc[with_timeline, ["request_id", "output_tokens", "first_chunk_tokens"]]
        for request_id, total, first in zip(
            kept["request_id"], kept["output_tokens"], kept["first_chunk_tokens"], strict=True
        ):
            arrived = chunks.get(request_id)
            if not arrived or not np.isfinite(total) or len(arrived) > max(total, 1):
                continue  # no timeline, or more chunks than tokens: not a count this can place
            weights = np.ones(len(arrived))
            if len(arrived) > 1:
                head = first if np.isfinite(first) else 1.0
                weights[0] = head
                weights[1:] = (total - head) / (len(arrived) - 1)
            else:
                weights[0] = total
            times.append(np.asarray(arrived, dtype=float))
            tokens.append(weights)
            ids.add(request_id)
        if not ids:
            return None
        return cls(np.concatenate(times), np.concatenate(tokens), ids)

    def tokens_in(self, start: float, end: float) -> float:
        """Tokens that arrived in [start, end)."""
        low, high = np.searchsorted(self.times, [start, end], side="left")
        return float(self.cumulative[high] - self.cumulative[low])
