"""Per-step figures of a run, from the measured window only.

Definitions (the report repeats them):

- A step's *measured records* are its records with ``phase == "measure"``; latency and
  per-user figures use the successful ones (no ``error_kind``, not ``interrupted``).
- TTFT = ``t_first_token - t_start``; end-to-end = ``t_end - t_start``; a request's mean ITL =
  ``(t_last_token - t_first_token) / (content_chunks - 1)``. ITL percentiles are taken over
  requests' mean ITLs. Percentiles are numpy's linear interpolation (Hyndman-Fan type 7).
- Client per-user decode tok/s = ``(completion_tokens - 1) / (t_last_token - t_first_token)``
  (the first token belongs to TTFT); server per-user tok/s = ``timings.predicted_per_second``.
  A request's token count is ``completion_tokens`` (usage), else ``timings.predicted_n``, else
  its content chunks (counted as a warning).
- Aggregate output tok/s = output tokens generated inside ``[measure_start, measure_end)`` /
  window length. The tokens of every request that streamed any are spread evenly over its
  decode span ``[t_first_token, t_last_token]`` and only the part inside the window counts,
  whatever step or phase the request is tagged with; so requests straddling either edge count
  pro rata, warm-up requests still decoding in the window count for the tokens they made in it,
  and a request longer than the window still counts. A successful request's count is its token
  count (above); a request stopped by the harness (``interrupted``, e.g. still streaming when the
  sweep ended) or cut by an error counts its content chunks, since llama-server sends one token
  per chunk (a drafter may pack more: then this undercounts). Its interval comes from the rates
  of 10 equal sub-windows.
- Completed in window = successful requests whose ``t_end`` falls inside the window; fewer than
  the step's users means the window is shorter than a request (a counted warning).
- Geometric mean over prompt categories of each category's mean per-request tok/s (server
  timings, else client), the seeds' single-number figure.
- Drafter acceptance = sum(draft_n_accepted) / sum(draft_n); tokens per decode step =
  sum(predicted_n) / (sum(predicted_n) - sum(draft_n_accepted)) (each target step yields one
  token plus the accepted drafts).
- Server counter tok/s = the rise of llama-server's ``llamacpp:tokens_predicted_total`` between
  the telemetry snapshots at the window's start and end / the time between them: a cross-check
  of aggregate tok/s from the server's side (absent without ``--metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import intervals
from analysis.intervals import Estimate
from analysis.load import LoadedRun
from core.errors import AnalysisError
from core.rundir import TelemetrySnapshot

SUB_WINDOWS = 10
TOKENS_COUNTER = "llamacpp:tokens_predicted_total"
PERCENTILES = (0.5, 0.9, 0.99)


@dataclass
class StepFigures:
    index: int
    users: int
    context_tokens: int
    window_start: float
    window_end: float
    requests: int
    ok: int
    errors: dict[str, int]
    output_tokens: float
    aggregate_tok_s: Estimate
    request_rate: float
    server_tok_s: Estimate
    server_tok_s_mean: Estimate
    client_tok_s: Estimate
    geomean_tok_s: Estimate
    ttft_s: dict[str, Estimate]
    itl_s: dict[str, Estimate]
    e2e_s: dict[str, Estimate]
    draft_acceptance: Estimate
    tokens_per_decode_step: float | None
    server_counter_tok_s: float | None = None
    completed_in_window: int = 0

    @property
    def window_seconds(self) -> float:
        return self.window_end - self.window_start

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        out: dict = {}
        for key, value in self.__dict__.items():
            if isinstance(value, Estimate):
                out[key] = value.to_dict()
            elif isinstance(value, dict) and value and isinstance(next(iter(value.values())), Estimate):
                out[key] = {k: v.to_dict() for k, v in value.items()}
            else:
                out[key] = value
        out["window_seconds"] = self.window_seconds
        return out


@dataclass
class RunFigures:
    run: LoadedRun
    steps: list[StepFigures]
    warnings: list[str] = field(default_factory=list)


def add_request_metrics(records: pd.DataFrame) -> pd.DataFrame:
    """Per-request derived columns (seconds and tok/s); NaN where a record cannot give one."""
    frame = records
    ok = frame["error_kind"].isna().to_numpy() & ~frame["interrupted"].to_numpy()
    t_start = frame["t_start"].to_numpy()
    t_first = frame["t_first_token"].to_numpy()
    t_last = frame["t_last_token"].to_numpy()
    span = t_last - t_first
    chunks = frame["content_chunks"].to_numpy()
    tokens = frame["completion_tokens"].to_numpy()
    tokens = np.where(np.isnan(tokens), frame["timings_predicted_n"].to_numpy(), tokens)
    frame["tokens_from_chunks"] = np.isnan(tokens) & ok
    tokens = np.where(np.isnan(tokens), chunks, tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["ok"] = ok
        frame["ttft_s"] = t_first - t_start
        frame["e2e_s"] = frame["t_end"].to_numpy() - t_start
        frame["itl_s"] = np.where(chunks > 1, span / (chunks - 1), np.nan)
        frame["client_tok_s"] = np.where((tokens > 1) & (span > 0), (tokens - 1) / span, np.nan)
        frame["server_tok_s"] = frame["timings_predicted_per_second"].to_numpy()
        # partial requests (interrupted, or cut by an error) made the tokens they streamed
        frame["output_tokens"] = np.where(ok, np.nan_to_num(tokens, nan=0.0), np.nan_to_num(chunks, nan=0.0))
    return frame


def tokens_in_window(frame: pd.DataFrame, start: float, end: float) -> float:
    """Output tokens generated inside [start, end): each request's tokens spread evenly over
    its decode span; a single-instant span counts wholly if the instant is inside."""
    t_first = frame["t_first_token"].to_numpy()
    t_last = frame["t_last_token"].to_numpy()
    tokens = frame["output_tokens"].to_numpy()
    span = t_last - t_first
    overlap = np.clip(np.minimum(t_last, end) - np.maximum(t_first, start), 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(span > 0, overlap / span, ((t_last >= start) & (t_last < end)).astype(float))
    return float(np.nansum(tokens * share))


def aggregate_throughput(frame: pd.DataFrame, start: float, end: float) -> tuple[float, Estimate]:
    """(tokens in the window, tok/s with a sub-window interval)."""
    near = frame[(frame["t_last_token"] >= start) & (frame["t_first_token"] < end) & (frame["output_tokens"] > 0)]
    total = tokens_in_window(near, start, end)
    length = end - start
    edges = np.linspace(start, end, SUB_WINDOWS + 1)
    rates = [tokens_in_window(near, a, b) / (b - a) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    spread = intervals.mean(rates)
    estimate = Estimate(
        total / length, spread.low, spread.high, SUB_WINDOWS, f"bootstrap over {SUB_WINDOWS} sub-windows"
    )
    return total, estimate


def _percentiles(values: np.ndarray) -> dict[str, Estimate]:
    return {f"p{round(q * 100)}": intervals.quantile(values, q) for q in PERCENTILES}


def per_user_rate_column(measured_ok: pd.DataFrame) -> str:
    """Server timings when every successful record has them, else the client's measure."""
    server = measured_ok["server_tok_s"]
    return "server_tok_s" if len(server) and server.notna().all() else "client_tok_s"


def category_groups(measured_ok: pd.DataFrame, column: str) -> dict[str, np.ndarray]:
    groups = {}
    for name, group in measured_ok.groupby("category", observed=True)[column]:
        values = group.to_numpy()
        groups[str(name)] = values[np.isfinite(values)]
    return groups


def step_figures(frame: pd.DataFrame, index: int, users: int, context: int, start: float, end: float) -> StepFigures:
    measured = frame[(frame["step"] == index) & (frame["phase"] == "measure")]
    measured_ok = measured[measured["ok"]]
    errors = {str(k): int(v) for k, v in measured["error_kind"].value_counts().items() if v}
    total, aggregate = aggregate_throughput(frame, start, end)
    t_end = frame["t_end"].to_numpy()
    completed = int((frame["ok"].to_numpy() & (t_end >= start) & (t_end < end)).sum())
    rate_column = per_user_rate_column(measured_ok)
    draft = measured_ok[["timings_draft_n", "timings_draft_n_accepted", "timings_predicted_n"]].dropna()
    draft = draft[draft["timings_draft_n"] > 0]
    steps_taken = draft["timings_predicted_n"].sum() - draft["timings_draft_n_accepted"].sum()
    return StepFigures(
        index=index,
        users=users,
        context_tokens=context,
        window_start=start,
        window_end=end,
        requests=len(measured),
        ok=len(measured_ok),
        errors=errors,
        output_tokens=total,
        aggregate_tok_s=aggregate,
        request_rate=completed / (end - start),
        server_tok_s=intervals.median(measured_ok["server_tok_s"].to_numpy()),
        server_tok_s_mean=intervals.mean(measured_ok["server_tok_s"].to_numpy()),
        client_tok_s=intervals.median(measured_ok["client_tok_s"].to_numpy()),
        geomean_tok_s=intervals.geomean_of_means(list(category_groups(measured_ok, rate_column).values())),
        ttft_s=_percentiles(measured_ok["ttft_s"].to_numpy()),
        itl_s=_percentiles(measured_ok["itl_s"].to_numpy()),
        e2e_s=_percentiles(measured_ok["e2e_s"].to_numpy()),
        draft_acceptance=intervals.ratio_of_sums(draft["timings_draft_n_accepted"], draft["timings_draft_n"]),
        tokens_per_decode_step=float(draft["timings_predicted_n"].sum() / steps_taken) if steps_taken > 0 else None,
        completed_in_window=completed,
    )


def counter_rate(telemetry: list[TelemetrySnapshot], index: int, counter: str) -> float | None:
    """A server counter's rate (per second) over the step's measured window, if recorded."""
    at = {
        snap.boundary: snap
        for snap in telemetry
        if snap.step == index and snap.error is None and counter in snap.metrics
    }
    start, end = at.get("measure"), at.get("end")
    if start is None or end is None or end.taken_at <= start.taken_at:
        return None
    return (end.metrics[counter] - start.metrics[counter]) / (end.taken_at - start.taken_at)


def counter_tok_s(telemetry: list[TelemetrySnapshot], index: int) -> float | None:
    """Tokens/s from the server's own counter over the step's measured window, if recorded."""
    return counter_rate(telemetry, index, TOKENS_COUNTER)


def typical_request_seconds(records: pd.DataFrame, max_tokens: int | None) -> float | None:
    """How long one request of this step takes: the median end-to-end of successful ones, else
    (none finished) a partial request's time to its last chunk scaled up to ``max_tokens``."""
    finished = records["e2e_s"][records["ok"]].dropna()
    if len(finished):
        return float(finished.median())
    partial = records[(records["content_chunks"] > 0) & records["t_last_token"].notna()]
    if not len(partial) or not max_tokens:
        return None
    scale = np.maximum(1.0, max_tokens / partial["content_chunks"].to_numpy())
    return float(np.median((partial["t_last_token"] - partial["t_start"]).to_numpy() * scale))


def short_window_warning(frame: pd.DataFrame, figures: StepFigures, max_tokens: int | None) -> str:
    """The step's window held fewer finished requests than users: per-request figures come from
    few or no requests, and the aggregate rests on partial ones."""
    seconds = typical_request_seconds(frame[frame["step"] == figures.index], max_tokens)
    advice = f"measure at least ~{np.ceil(2 * seconds):.0f} s" if seconds else "measure longer"
    counter = figures.server_counter_tok_s
    beside = f"{counter:.1f} tok/s" if counter is not None else "not recorded"
    if counter is not None:  # llama-server adds a request's tokens to its counter when the request ends
        beside += " (it counts finished requests only, so it reads low here)"
    return (
        f"step {figures.index} ({figures.users} users): only {figures.completed_in_window} request(s) completed "
        f"inside its {figures.window_seconds:.1f} s window, fewer than its users: window shorter than a request "
        f"(one takes ~{seconds:.1f} s): {advice}. Aggregate {figures.aggregate_tok_s.value:.1f} tok/s counts partial "
        f"requests' streamed chunks; server counter {beside}"
        if seconds
        else f"step {figures.index} ({figures.users} users): only {figures.completed_in_window} request(s) completed "
        f"inside its {figures.window_seconds:.1f} s window, fewer than its users: window shorter than a request: "
        f"{advice}. Aggregate {figures.aggregate_tok_s.value:.1f} tok/s; server counter {beside}"
    )


def run_figures(run: LoadedRun) -> RunFigures:
    """Figures of every step with a complete measured window; the rest become warnings."""
    warnings = list(run.warnings)
    manifest = run.manifest
    if manifest.status != "complete":
        detail = f" ({manifest.status_detail})" if manifest.status_detail else ""
        warnings.append(f"run status is {manifest.status}{detail}: figures cover the steps whose window closed")
    frame = add_request_metrics(run.records.copy())
    uncounted = int(frame["tokens_from_chunks"].sum())
    if uncounted:
        warnings.append(
            f"{uncounted} successful record(s) carry no token count (usage or timings); "
            "their streamed content chunks were counted as tokens"
        )
    known_steps = {window.index for window in manifest.steps}
    stray = int((~frame["step"].isin(known_steps)).sum())
    if stray:
        warnings.append(f"{stray} record(s) tagged with a step the manifest does not list; ignored")
    steps = []
    seen: set[int] = set()
    for window in manifest.steps:
        if window.index in seen:
            # Written by rigbench before the sweep controller kept each boundary once (a Locust
            # master with a long context could run two schedules): the first window stands.
            warnings.append(f"step {window.index} ({window.users} users) recorded twice; the first window is used")
            continue
        seen.add(window.index)
        if window.measure_end is None or window.measure_end <= window.measure_start:
            warnings.append(f"step {window.index} ({window.users} users) has no closed measured window; left out")
            continue
        figures = step_figures(
            frame, window.index, window.users, window.context_tokens, window.measure_start, window.measure_end
        )
        figures.server_counter_tok_s = counter_tok_s(run.telemetry, window.index)
        if figures.completed_in_window < window.users:
            warnings.append(short_window_warning(frame, figures, manifest.load.max_tokens if manifest.load else None))
        steps.append(figures)
    if not steps:
        raise AnalysisError(
            f"{run.path}: no step has a measured window (manifest lists {len(manifest.steps)} step(s), "
            f"status {manifest.status}); the sweep stopped before a measure phase ended: re-run the load test"
        )
    return RunFigures(run, steps, warnings)
