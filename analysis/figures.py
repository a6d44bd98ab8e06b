"""Per-step figures of a run, from the measured window only.

Definitions (the report repeats them):

- A step's *measured records* are its records with ``phase == "measure"``; latency and
  per-user figures use the successful ones (no ``error_kind``, not ``interrupted``).
- A step is closed loop (N users, each sending back to back) or open loop (requests arriving at
  an offered rate in requests/s on a seeded schedule, whatever the server's state); one run is
  one kind. Open-loop steps are labelled and plotted by their rate.
- A request's latency counts from its *origin*: ``t_start`` in a closed loop; in an open loop
  its scheduled start ``t_intended``, so queueing inside the load generator (a request sent
  late because the generator fell behind) shows in the latency instead of hiding (no
  coordinated omission). TTFT = ``t_first_token - origin``; end-to-end = ``t_end - origin``.
  Start lag = ``t_start - t_intended`` (open loop only; p50, p99 and max over the step's measured
  records); sent req/s = measured records whose ``t_start`` falls in the window / window length,
  beside the offered rate.
- A request's output-token count is the server's final ``completion_tokens`` (usage), else
  ``timings.predicted_n`` (both "usage"), else ``streamed_tokens`` (the per-chunk counts the
  server streamed, "per_chunk", or the server's ``/tokenize`` of the streamed text after the run,
  "tokenize"), else its content chunks ("chunks", exact only for a server that sends one token
  per chunk). The report counts the requests of each method.
- ITL per chunk = ``(t_last_token - t_first_token) / (content_chunks - 1)``, a request's mean gap
  between content-chunk arrivals (what a reader of the stream sees); TPOT per token =
  ``(t_last_token - t_first_token) / (tokens - first_chunk_tokens)``, the mean decode time of one
  token (``first_chunk_tokens`` when the server counted it, else the request's mean tokens per chunk,
  which is 1 for a server that sends one token a chunk). They agree when the server sends one
  token per chunk; with 3 tokens per chunk at 10 ms a token, ITL reads 30 ms and TPOT 10 ms.
  Percentiles are taken over requests' means, numpy's linear interpolation (Hyndman-Fan type 7).
- Client per-user decode tok/s = ``(tokens - first_chunk_tokens) / (t_last_token - t_first_token)``
  (the first chunk belongs to TTFT); server per-user tok/s = ``timings.predicted_per_second``.
- Aggregate output tok/s = output tokens generated inside ``[measure_start, measure_end)`` /
  window length. A request of the step whose stream an edge of the window fell inside counts the
  chunks it kept as arrived inside (``window_chunks``, made from each chunk's arrival time as the
  request ended): their tokens by the server's running counts (``window_tokens``), else its tokens
  spread over its chunks. Any other request that streamed tokens (another step's) has them spread
  evenly over its decode span ``[t_first_token, t_last_token]`` and only the part inside the window
  counts; so warm-up requests still decoding in the window count for the tokens they made in it,
  and a request longer than the window still counts. ``edge_attribution`` says how many edge
  requests were counted which way. A request stopped by the harness
  (``interrupted``, e.g. still streaming when the sweep ended) or cut by an error counts the
  tokens it streamed by the same order (``streamed_tokens``, else its content chunks: a counted
  warning, since a server that packs several tokens per chunk is then undercounted). A run kept
  with ``--timeline`` counts each chunk's tokens where it arrived instead (``analysis.timelines``:
  exact even when a saturated server or client delivers in bursts). Its interval comes from the
  rates of 10 equal sub-windows.
- Completed in window = successful requests whose ``t_end`` falls inside the window (completed
  req/s divides it by the window); fewer than a closed-loop step's users means the window is
  shorter than a request (a counted warning).
- The load that ran: requests in flight = every request's time between ``t_start`` and ``t_end``
  inside the window, summed, / window length (Little's law); load reached = in flight / users on
  a closed-loop step, sent req/s / offered rate on an open-loop one; on a sessions step a request holds its
  user until the user's next one starts, its last until the load ends (think time is load too). Under 95%
  the step is named in the warnings; under 50% the sweep fails the run (``core.load_reached``).
- Geometric mean over prompt categories of each category's mean per-request tok/s (server
  timings, else client), the seeds' single-number figure.
- Drafter acceptance = sum(draft_n_accepted) / sum(draft_n); tokens per decode step =
  sum(predicted_n) / (sum(predicted_n) - sum(draft_n_accepted)) (each target step yields one
  token plus the accepted drafts).
- Two cross-checks of aggregate tok/s from the server's side. Server counter tok/s = the rise of
  llama-server's ``llamacpp:tokens_predicted_total`` between the telemetry snapshots at the
  window's start and end / the time between them (absent without ``--metrics``). The server adds
  a request's tokens to the counter when the request ends, so the counter moves in whole
  requests: its granularity, given beside it, is ± the median tokens of the step's successful
  requests (``max_tokens`` when none finished) / the time between the snapshots; it is not
  exact. Server timings tok/s = each successful request's ``timings.predicted_n`` tokens spread
  evenly over its ``timings.predicted_ms``, placed on the client's clock to end at its
  ``t_last_token``, summed inside the window / window length: per token, from the server's own
  decode times (cut requests carry no timings and are missing from it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import intervals
from analysis.energy import GpuTrace, StepEnergy, gpu_traces, idle_power_w, step_energy
from analysis.goodput import StepGoodput, step_goodput
from analysis.intervals import Estimate, number
from analysis.load import TOKEN_METHODS, LoadedRun, token_methods
from analysis.sessions import StepSessions, step_sessions
from analysis.step import StepFigures
from analysis.timelines import ChunkArrivals
from core import wording
from core.errors import AnalysisError
from core.lists import seconds_per_step
from core.load_reached import (
    MARK_BELOW,
    SESSION_BUSY,
    describe_shortfall,
    load_reached,
    mean_in_flight,
    sent_rate,
    session_users,
    user_held_until,
)
from core.rundir import RunManifest, StepWindow, TelemetrySnapshot
from core.rundir.hardware import CpuEnergySample, read_cpu_energy_samples, read_gpu_samples
from core.rundir.models import SLO_FIGURES

SUB_WINDOWS = 10
TOKENS_COUNTER = "llamacpp:tokens_predicted_total"
DECODE_COUNTER = "llamacpp:n_decode_total"
PERCENTILES = (0.5, 0.9, 0.99)


@dataclass
class RunFigures:
    run: LoadedRun
    steps: list[StepFigures]
    warnings: list[str] = field(default_factory=list)
    token_methods: dict[str, int] = field(default_factory=dict)  # requests of the whole run per method
    decode_calls_per_s: dict[int, float] = field(default_factory=dict)  # step index -> llama-server decode calls/s
    gpu_traces: dict[int, GpuTrace] = field(default_factory=dict)  # the run's GPU samples, read once (hardware/)
    idle_power_w: float | None = None  # all GPUs' power before the load began, where the run sampled it

    @property
    def open_loop(self) -> bool:
        return any(step.rate is not None for step in self.steps)


def add_request_metrics(records: pd.DataFrame) -> pd.DataFrame:
    """Per-request derived columns (seconds and tok/s), added to ``records`` and returned; NaN where
    a record cannot give one. They are computed from the record's own columns only, so adding
    them again gives the same."""
    frame = records
    ok = frame["error_kind"].isna().to_numpy() & ~frame["interrupted"].to_numpy()
    t_start = frame["t_start"].to_numpy()
    t_intended = frame["t_intended"].to_numpy()
    origin = np.where(np.isnan(t_intended), t_start, t_intended)
    t_first = frame["t_first_token"].to_numpy()
    t_last = frame["t_last_token"].to_numpy()
    span = t_last - t_first
    chunks = frame["content_chunks"].to_numpy()
    tokens = frame["completion_tokens"].to_numpy()
    tokens = np.where(np.isnan(tokens), frame["timings_predicted_n"].to_numpy(), tokens)
    tokens = np.where(np.isnan(tokens), frame["streamed_tokens"].to_numpy(), tokens)
    frame["tokens_from_chunks"] = np.isnan(tokens) & ok
    tokens = np.where(np.isnan(tokens), chunks, tokens)
    first_chunk = frame["first_chunk_tokens"].to_numpy()
    # without the server's count of the first chunk, its expected share: the request's mean tokens a chunk
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_chunk = np.where(chunks > 0, tokens / chunks, 1.0)
    decode_tokens = tokens - np.where(np.isnan(first_chunk), mean_chunk, first_chunk)
    frame["token_method"] = token_methods(frame)
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["ok"] = ok
        frame["ttft_s"] = t_first - origin
        frame["e2e_s"] = frame["t_end"].to_numpy() - origin
        frame["start_lag_s"] = t_start - t_intended
        frame["itl_s"] = np.where(chunks > 1, span / (chunks - 1), np.nan)
        frame["tpot_s"] = np.where(decode_tokens > 0, span / decode_tokens, np.nan)
        frame["client_tok_s"] = np.where((decode_tokens > 0) & (span > 0), decode_tokens / span, np.nan)
        frame["server_tok_s"] = frame["timings_predicted_per_second"].to_numpy()
        # partial requests (interrupted, or cut by an error) made the tokens they streamed
        frame["output_tokens"] = np.nan_to_num(tokens, nan=0.0)
    return frame


class Requests:
    """A run's requests (records with ``add_request_metrics``' columns) as numpy arrays.

    Why: each step's figures select their rows from every request of the run; a DataFrame
    filtered per step copies every column each time, a million records over several steps.
    Here each column is taken out of the frame once, when first asked for, and a step selects
    rows of the few it reads, in the frame's order (so sums and orders are the frame's own)."""

    def __init__(self, frame: pd.DataFrame, timed: set[str] | None = None):
        self.frame = frame
        self._columns: dict[str, np.ndarray] = {}
        self.measure = (frame["phase"] == "measure").to_numpy()
        self.method = frame["token_method"].cat.codes.to_numpy()
        # requests whose chunks' arrival times are kept (``analysis.timelines``), counted by those
        self.timed = frame["request_id"].isin(timed).to_numpy() if timed else None
        with np.errstate(invalid="ignore"):
            self.t_decode = self["t_last_token"] - self["timings_predicted_ms"] / 1000.0
        self.has_timings = self["ok"] & ~np.isnan(self["timings_predicted_n"]) & ~np.isnan(self.t_decode)
        # conversations' turns hold their user through its think time (core.load_reached; ``hold_users``)
        self.sessions = "conversation" in frame and bool(frame["conversation"].notna().any())
        self.user_until = self["t_end"]

    def hold_users(self, load_end: float) -> None:
        """A sessions run's requests hold their user until its next request, the last until ``load_end``."""
        if self.sessions:
            users = session_users(self.frame["conversation"].to_numpy(dtype=object))
            self.user_until = user_held_until(users, self["t_start"], self["t_end"], load_end)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._columns:
            self._columns[name] = self.frame[name].to_numpy()
        return self._columns[name]


def tokens_in_window(t_first: np.ndarray, t_last: np.ndarray, tokens: np.ndarray, start: float, end: float) -> float:
    """Output tokens generated inside [start, end): each request's tokens spread evenly over
    its span [t_first, t_last]; a single-instant span counts wholly if the instant is inside."""
    span = t_last - t_first
    overlap = np.clip(np.minimum(t_last, end) - np.maximum(t_first, start), 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(span > 0, overlap / span, ((t_last >= start) & (t_last < end)).astype(float))
    return float(np.nansum(tokens * share))


def server_timings_tok_s(requests: Requests, start: float, end: float) -> float | None:
    """Tokens/s inside [start, end) from the servers' own decode times: each successful request's
    ``predicted_n`` spread over ``predicted_ms`` ending at its client ``t_last_token``; None when
    no successful request near the window carries timings."""
    t_last = requests["t_last_token"]
    with np.errstate(invalid="ignore"):
        timed = requests.has_timings & (t_last >= start) & (requests.t_decode < end)
    if not timed.any():
        return None
    tokens = requests["timings_predicted_n"][timed]
    return tokens_in_window(requests.t_decode[timed], t_last[timed], tokens, start, end) / (end - start)


def _decoding_in(requests: Requests, start: float, end: float) -> np.ndarray:
    """Requests with output tokens whose decode span reaches into [start, end)."""
    with np.errstate(invalid="ignore"):
        return (
            (requests["t_last_token"] >= start) & (requests["t_first_token"] < end) & (requests["output_tokens"] > 0)
        )


def aggregate_throughput(
    requests: Requests, start: float, end: float, arrivals: ChunkArrivals | None = None, step: int | None = None
) -> tuple[float, Estimate, dict[str, int]]:
    """(tokens in the window, tok/s with a sub-window interval, edge requests by how they were counted).

    Requests with a timeline count each chunk where it arrived (``analysis.timelines``); a request of
    step ``step`` that kept its chunks inside the window (``loadtest.window_share``) counts those, by the
    server's running counts where it streamed them, else as its share of the request's chunks; the others
    are spread over their span. ``step`` None: the window is not the one the records counted for (a
    step closed off its schedule), so no record's own count is used."""
    near = _decoding_in(requests, start, end)
    timed = np.zeros(len(near), dtype=bool)
    if arrivals is not None and requests.timed is not None:
        timed = near & requests.timed
        near &= ~requests.timed
    window_chunks, window_tokens = requests["window_chunks"], requests["window_tokens"]
    counted = near & ~np.isnan(window_chunks) & (requests["step"] == step) if step is not None else near & False
    by_counts = counted & ~np.isnan(window_tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        own = np.where(by_counts, window_tokens, window_chunks * requests["output_tokens"] / requests["content_chunks"])
    t_first, t_last, tokens = requests["t_first_token"], requests["t_last_token"], requests["output_tokens"]

    def tokens_between(a: float, b: float) -> float:
        """Spread over their span (the counted requests too: their counts hold for the whole window only)."""
        spread = tokens_in_window(t_first[near], t_last[near], tokens[near], a, b)
        return spread + (arrivals.tokens_in(a, b) if arrivals is not None else 0.0)

    spread_total = tokens_between(start, end)
    total = spread_total + float(np.sum(own[counted])) - tokens_in_window(
        t_first[counted], t_last[counted], tokens[counted], start, end)
    length = end - start
    edges = np.linspace(start, end, SUB_WINDOWS + 1)
    spread = intervals.mean([tokens_between(a, b) / (b - a) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    shift = (total - spread_total) / length  # the interval moves with what the counts changed
    estimate = intervals.bounded(Estimate(  # moved down, it can cross 0: no rate is negative
        total / length,
        None if spread.low is None else spread.low + shift,
        None if spread.high is None else spread.high + shift,
        SUB_WINDOWS,
        f"bootstrap over {SUB_WINDOWS} sub-windows",
    ))
    with np.errstate(invalid="ignore"):
        across = (t_first < start) | (t_last >= end)
    edge = {
        "timeline": int((timed & across).sum()),
        "running_counts": int(by_counts.sum()),
        "chunks": int((counted & ~by_counts).sum()),
        "span": int((near & ~counted & across).sum()),
    }
    return total, estimate, edge


def _percentiles(values: np.ndarray) -> dict[str, Estimate]:
    estimates = intervals.quantiles(values, PERCENTILES)
    return {f"p{round(q * 100)}": estimate for q, estimate in zip(PERCENTILES, estimates, strict=True)}


def geomean_rate_column(server_tok_s: np.ndarray) -> str:
    """The per-request rate the seeds' geometric mean is taken over: the server's own timings when
    every successful record (``server_tok_s`` holds theirs) has them (as the seed articles read
    llama-server's timings), else the client's measure. What a user sees per user is
    ``StepFigures.per_user_tok_s``, the client's first."""
    return "server_tok_s" if len(server_tok_s) and not np.isnan(server_tok_s).any() else "client_tok_s"


def category_groups(measured_ok: pd.DataFrame, column: str) -> dict[str, np.ndarray]:
    groups = {}
    for name, group in measured_ok.groupby("category", observed=True)[column]:
        values = group.to_numpy()
        groups[str(name)] = values[np.isfinite(values)]
    return groups


def _lag_figures(lags: np.ndarray) -> dict[str, float | None]:
    """p50, p99 and max of open-loop start lags (empty on a closed-loop step)."""
    lags = lags[np.isfinite(lags)]
    if not len(lags):
        return {}
    return {"p50": float(np.quantile(lags, 0.5)), "p99": float(np.quantile(lags, 0.99)), "max": float(lags.max())}


NOTHING_BEHIND = "none: every request running in the window failed, or none ran"


def stopped(requests: Requests) -> np.ndarray:
    """Requests the harness stopped (the sweep's end, Ctrl-C) while they streamed well: no error of theirs."""
    return requests["interrupted"] & requests.frame["error_kind"].isna().to_numpy()


def healthy(requests: Requests) -> np.ndarray:
    """Requests that ended well or were still going well when the harness stopped them: what a rate can stand on."""
    return requests["ok"] | stopped(requests)


def outcomes(requests: Requests, chosen: np.ndarray) -> dict[str, int]:
    """How the ``chosen`` requests ended: ``ok``, each error kind, ``interrupted`` (stopped by the harness)."""
    counts = {"ok": int((chosen & requests["ok"]).sum()), "interrupted": int((chosen & stopped(requests)).sum())}
    kinds = requests.frame["error_kind"][chosen].value_counts()
    counts.update({str(kind): int(count) for kind, count in kinds.items() if count})
    return {kind: count for kind, count in counts.items() if count}


def method_counts(codes: np.ndarray) -> dict[str, int]:
    """Requests per token-counting method (``token_method``'s codes), every method named (0 where none used it)."""
    counts = np.bincount(codes, minlength=len(TOKEN_METHODS))
    return {method: int(count) for method, count in zip(TOKEN_METHODS, counts, strict=True)}


def step_figures(
    requests: Requests,
    window: StepWindow,
    telemetry: list[TelemetrySnapshot],
    max_tokens: int | None = None,
    arrivals: ChunkArrivals | None = None,
    on_schedule: bool = False,
    slo: Mapping[str, float] | None = None,
) -> StepFigures:
    """The figures of one step whose measured window closed; ``on_schedule``: the window is the one its
    schedule set, the one the records counted their chunks for (``window_on_schedule``); ``slo``: the
    service-level targets its goodput is judged by (``analysis.goodput``; none: no goodput)."""
    index, rate, start = window.index, window.rate, window.measure_start
    end = window.measure_end
    if end is None:
        raise AnalysisError(f"step {index} has no closed measured window")
    ok = requests["ok"]
    measured = (requests["step"] == index) & requests.measure
    measured_ok = measured & ok
    frame = requests.frame
    errors = {str(k): int(v) for k, v in frame["error_kind"][measured].value_counts().items() if v}
    total, aggregate, edge_attribution = aggregate_throughput(
        requests, start, end, arrivals, index if on_schedule else None)
    t_end = requests["t_end"]
    with np.errstate(invalid="ignore"):
        running = (requests["t_start"] < end) & (t_end >= start)  # ran in the window, whenever they started
    before = running & (requests["t_start"] < start)
    if not (running & healthy(requests)).any():  # only failures streamed into it, or nothing ran: no rate stands
        aggregate = intervals.empty(0, NOTHING_BEHIND)
    completed = int((ok & (t_end >= start) & (t_end < end)).sum())
    near_cut = _decoding_in(requests, start, end) & ~ok
    server = requests["server_tok_s"][measured_ok]
    rate_column = geomean_rate_column(server)
    rates = pd.DataFrame(
        {"category": frame["category"].array[measured_ok], rate_column: requests[rate_column][measured_ok]}
    )
    draft_n, accepted = requests["timings_draft_n"][measured_ok], requests["timings_draft_n_accepted"][measured_ok]
    predicted = requests["timings_predicted_n"][measured_ok]
    with np.errstate(invalid="ignore"):
        drafted = ~np.isnan(draft_n) & ~np.isnan(accepted) & ~np.isnan(predicted) & (draft_n > 0)
    draft_n, accepted, predicted = draft_n[drafted], accepted[drafted], predicted[drafted]
    steps_taken = predicted.sum() - accepted.sum()
    sent = sent_rate(requests["t_start"][measured], start, end) if rate is not None else None
    in_flight = mean_in_flight(requests["t_start"], t_end, start, end)
    busy = mean_in_flight(requests["t_start"], requests.user_until, start, end) if requests.sessions else in_flight
    chunks_code = TOKEN_METHODS.index("chunks")
    return StepFigures(
        index=index,
        users=window.users,
        context_tokens=window.context_tokens,
        window_start=start,
        window_end=end,
        window_seconds=end - start,
        requests=int(measured.sum()),
        ok=int(measured_ok.sum()),
        errors=errors,
        interrupted=int((measured & stopped(requests)).sum()),
        running_at_start=outcomes(requests, before),
        output_tokens=total,
        aggregate_tok_s=aggregate,
        request_rate=completed / (end - start),
        server_tok_s=intervals.median(server),
        server_tok_s_mean=intervals.mean(server),
        client_tok_s=intervals.median(requests["client_tok_s"][measured_ok]),
        geomean_tok_s=intervals.geomean_of_means(list(category_groups(rates, rate_column).values())),
        ttft_s=_percentiles(requests["ttft_s"][measured_ok]),
        itl_s=_percentiles(requests["itl_s"][measured_ok]),
        e2e_s=_percentiles(requests["e2e_s"][measured_ok]),
        draft_acceptance=intervals.ratio_of_sums(accepted, draft_n, share=True),
        tokens_per_decode_step=float(predicted.sum() / steps_taken) if steps_taken > 0 else None,
        server_counter_tok_s=counter_tok_s(telemetry, index),
        server_counter_granularity_tok_s=counter_granularity(requests, telemetry, index, max_tokens),
        completed_in_window=completed,
        tpot_s=_percentiles(requests["tpot_s"][measured_ok]),
        rate=rate,
        sent_rate=sent,
        start_lag_s=_lag_figures(requests["start_lag_s"][measured]),
        server_timings_tok_s=server_timings_tok_s(requests, start, end),
        token_methods=method_counts(requests.method[measured]),
        cut_counted_by_chunks=int((near_cut & (requests.method == chunks_code)).sum()),
        mean_in_flight=in_flight,
        load_reached=load_reached(window.users, rate, busy, sent),
        edge_attribution=edge_attribution,
        users_started=window.users_started,
        goodput=measured_goodput(requests, measured, slo, end - start) if slo else None,
    )


def measured_goodput(requests: Requests, measured: np.ndarray, slo: Mapping[str, float],
                     window_seconds: float) -> StepGoodput:
    """The step's goodput over its measured requests, the same ones its latency figures use."""
    frame = requests.frame
    conversations = frame["conversation"].to_numpy(dtype=object)[measured] if "conversation" in frame else None
    return step_goodput({figure: requests[f"{figure}_s"][measured] for figure in SLO_FIGURES},
                        requests["ok"][measured], requests["interrupted"][measured],
                        requests["output_tokens"][measured], slo, window_seconds, conversations)


def measured_sessions(requests: Requests, index: int) -> StepSessions:
    """The step's conversations, reuse and TTFT by turn over its measured records (``analysis.sessions``)."""
    measured = (requests["step"] == index) & requests.measure
    return step_sessions(requests["conversation"][measured], requests["turn"][measured], requests["ok"][measured],
                         requests["prompt_tokens"][measured], requests["cached_tokens"][measured],
                         requests["ttft_s"][measured])


def counter_spans(
    telemetry: list[TelemetrySnapshot], index: int, counter: str
) -> list[tuple[TelemetrySnapshot, TelemetrySnapshot]] | None:
    """Each server's (every replica's) measure and end snapshots of the step that carry the counter;
    None unless every server that was read has both, in order: a rate summed over some replicas
    would look like the rig's and be short of it."""
    at: dict[int | None, dict[str, TelemetrySnapshot]] = {}
    for snap in telemetry:
        if snap.step == index:
            at.setdefault(snap.replica, {})
            if snap.error is None and counter in snap.metrics:
                at[snap.replica][snap.boundary] = snap
    spans = []
    for boundaries in at.values():
        start, end = boundaries.get("measure"), boundaries.get("end")
        if start is None or end is None or end.taken_at <= start.taken_at:
            return None
        spans.append((start, end))
    return spans or None


def counter_span(
    telemetry: list[TelemetrySnapshot], index: int, counter: str
) -> tuple[TelemetrySnapshot, TelemetrySnapshot] | None:
    """The step's measure and end snapshots that carry the counter (the first server's, where every
    replica has them), if recorded in order."""
    spans = counter_spans(telemetry, index, counter)
    return spans[0] if spans else None


def counter_rate(telemetry: list[TelemetrySnapshot], index: int, counter: str, *,
                 per_server: bool = False) -> float | None:
    """A server counter's rate (per second) over the step's measured window, if recorded: the sum over
    the replicas (the rig's), or with ``per_server`` their mean (what one server did)."""
    spans = counter_spans(telemetry, index, counter)
    if spans is None:
        return None
    rates = [(end.metrics[counter] - start.metrics[counter]) / (end.taken_at - start.taken_at) for start, end in spans]
    return sum(rates) / len(rates) if per_server else sum(rates)


def decode_call_rates(telemetry: list[TelemetrySnapshot], indices: Iterable[int]) -> dict[int, float]:
    """Step index -> llama-server's decode calls per second over the step's measured window (prompt
    calls included), for the steps whose snapshots carry the counter; with replicas, one server's
    (their mean). One call decodes a token for every busy slot of its server, so 1000 / rate is the
    time one call took: what grows with each added user."""
    rates = {}
    for index in indices:
        rate = counter_rate(telemetry, index, DECODE_COUNTER, per_server=True)
        if rate:
            rates[index] = rate
    return rates


def counter_granularity(
    requests: Requests, telemetry: list[TelemetrySnapshot], index: int, max_tokens: int | None = None
) -> float | None:
    """How far the token counter's rate can move for one request finishing either side of a
    snapshot: the median tokens of the step's successful measured requests (none finished in
    it: of its successful requests of any phase, else ``max_tokens``) / the snapshots' span."""
    span = counter_span(telemetry, index, TOKENS_COUNTER)
    if span is None:
        return None
    in_step = requests["ok"] & (requests["step"] == index)
    output_tokens = requests.frame["output_tokens"]
    tokens = output_tokens[in_step & requests.measure]
    if not len(tokens):
        tokens = output_tokens[in_step]
    typical = float(tokens.median()) if len(tokens) else max_tokens
    if not typical:
        return None
    return typical / (span[1].taken_at - span[0].taken_at)


def counter_tok_s(telemetry: list[TelemetrySnapshot], index: int) -> float | None:
    """Tokens/s from the server's own counter over the step's measured window, if recorded."""
    return counter_rate(telemetry, index, TOKENS_COUNTER)


def typical_request_seconds(records: pd.DataFrame, max_tokens: int | None) -> float | None:
    """How long one request of this step takes: the median end-to-end of successful ones, else
    (none finished) a partial request's time to its last chunk scaled up to ``max_tokens`` (not of one that
    timed out: its pace before it stalled says nothing of how long a request takes)."""
    finished = records["e2e_s"][records["ok"]].dropna()
    if len(finished):
        return float(finished.median())
    partial = records[(records["content_chunks"] > 0) & records["t_last_token"].notna()
                      & (records["error_kind"] != "timeout").to_numpy()]
    if not len(partial) or not max_tokens:
        return None
    scale = np.maximum(1.0, max_tokens / partial["content_chunks"].to_numpy())
    return float(np.median((partial["t_last_token"] - partial["t_start"]).to_numpy() * scale))


# What a failed request's kind says happened (the kinds are loadtest.streaming's); the line names it, not a guess
CAUSES = {
    "timeout": "streams stalled past the read timeout",
    "connect": "connections were refused (is the server still running?)",
    "disconnect": "the server closed streams before they finished",
    "server_error": "the server ended streams with an error event",
    "malformed_sse": "the server sent events that are not OpenAI-style JSON",
    "bad_model": "the server did not know the model name",
    "client_error": "rigbench's own request code failed",
}


def cause(kind: str, read_timeout: float | None = None) -> str:
    """What happened to requests that ended as ``kind``."""
    if kind == "timeout" and read_timeout is not None:
        return f"streams stalled past the read timeout ({read_timeout:g} s, --read-timeout)"
    if kind in CAUSES:
        return CAUSES[kind]
    return f"the server answered HTTP {kind[5:]}" if kind.startswith("http_") else f"requests failed ({kind})"


def failures(figures: StepFigures) -> dict[str, int]:
    """The failed requests that ran in the step's window, by kind: those started in it and those running into it."""
    counts = dict(figures.errors)
    for kind, count in figures.running_at_start.items():
        if kind not in ("ok", "interrupted"):
            counts[kind] = counts.get(kind, 0) + count
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def counted(counts: Mapping[str, int]) -> str:
    """``timeout 4, http_503 1``."""
    return ", ".join(f"{kind} {count}" for kind, count in counts.items())


def failures_said(counts: Mapping[str, int], read_timeout: float | None = None) -> str:
    """``timeout 4: streams stalled past the read timeout (10 s, --read-timeout)``, the most common kind's cause
    named (``timeout 4, http_503 1, most timeout: ...`` with several)."""
    top = next(iter(counts))
    most = f", most {top}" if len(counts) > 1 else ""
    return f"{counted(counts)}{most}: {cause(top, read_timeout)}"


def short_window_warning(frame: pd.DataFrame, figures: StepFigures, max_tokens: int | None,
                         read_timeout: float | None = None) -> str:
    """The step's window held fewer finished requests than users, and why, from what happened: every request
    running in it failed (its figures are absent), some failed, the window is shorter than a request, or the
    users were not all sending."""
    name = f"step {figures.index} ({wording.counted(figures.users, 'user')})"
    window = f"{figures.window_seconds:.1f} s window"
    failed = failures(figures)
    if figures.aggregate_tok_s.value is None:  # nothing healthy ran in the window: every request in it failed
        if not failed:
            return (f"{name}: no request ran in its {window}, so the step has no aggregate, latency or per-user "
                    "figure: the users were not sending (see the load that ran)")
        return (f"{name}: every request running in its {window} failed ({failures_said(failed, read_timeout)}), "
                "so the step has no aggregate, latency or per-user figure; a longer window would not help")
    seconds = typical_request_seconds(frame[frame["step"] == figures.index], max_tokens)
    opening = f"{name}: only {wording.counted(figures.completed_in_window, 'request')} completed inside its " \
              f"{window}, fewer than its users"
    if failed and (seconds is None or 2 * seconds <= figures.window_seconds):
        # a request fits the window twice over (or none shows how long one takes): the failures are the cause
        taken = f" though one takes ~{seconds:.1f} s" if seconds else ""
        return f"{opening}{taken}: requests running in it failed ({failures_said(failed, read_timeout)})"
    if seconds is not None and 2 * seconds <= figures.window_seconds:
        started = figures.users_started
        why = (f"only {started} of its {wording.counted(figures.users, 'user')} were running when it opened"
               if started is not None and started < figures.users else "the users were not all sending "
               "(see the load that ran)")
        return f"{opening} though one takes ~{seconds:.1f} s: not a window too short: {why}"
    granularity = figures.server_counter_granularity_tok_s
    counter = figures.server_counter_tok_s
    beside = f"{number(counter)} tok/s" if counter is not None else "not recorded"
    if counter is not None:  # llama-server adds a request's tokens to its counter when the request ends
        beside += " (it counts finished requests only, so it reads low here"
        beside += f"; it moves by ~{number(granularity)} tok/s per request)" if granularity else ")"
    also = f"; besides, requests running in it failed ({failures_said(failed, read_timeout)})" if failed else ""
    taken, advice = (f" (one takes ~{seconds:.1f} s)", f"measure at least ~{np.ceil(2 * seconds):.0f} s") if seconds \
        else ("", "measure longer")
    return (
        f"{opening}: window shorter than a request{taken}: {advice}. Aggregate "
        f"{number(figures.aggregate_tok_s.value)} tok/s counts partial requests' streamed tokens; server counter "
        f"{beside}{also}"
    )


REFUSALS = ("connect", "http_503", "http_429")  # answers after which a user backs off before it sends again


def shortfall_cause(figures: StepFigures) -> str:
    """Why a closed-loop step held fewer requests in flight than users, from what its records show."""
    started = figures.users_started
    if started is not None and started < figures.users:
        return f"only {started} of its {wording.counted(figures.users, 'user')} were running when the window opened"
    refused = {kind: count for kind, count in failures(figures).items() if kind in REFUSALS}
    if refused:
        return f"users backed off after the server refused requests ({counted(refused)}) instead of sending"
    return "users were not all started, or waited between requests instead of sending"


SCHEDULE_TOLERANCE_S = 1e-3


def window_on_schedule(manifest: RunManifest, window: StepWindow) -> bool:
    """The step's measured window is as long as its schedule says (not closed early by a stop)."""
    load = manifest.load
    if load is None or window.measure_end is None:
        return False
    windows = seconds_per_step(load.measure_seconds, load.step_count, kind="rate" if load.open_loop else "user")
    length = window.measure_end - window.measure_start
    return window.index < len(windows) and abs(length - windows[window.index]) < SCHEDULE_TOLERANCE_S


def window_energy(requests: Requests, figures: StepFigures, traces: dict[int, GpuTrace],
                  cpu_samples: list[CpuEnergySample]) -> StepEnergy | None:
    """The step's energy over its window, per output token against the tokens its aggregate counted; the
    interval's sub-windows are the aggregate's, their tokens spread over each request's span."""
    start, end = figures.window_start, figures.window_end
    near = _decoding_in(requests, start, end)
    edges = np.linspace(start, end, SUB_WINDOWS + 1)
    t_first, t_last, tokens = (requests[name][near] for name in ("t_first_token", "t_last_token", "output_tokens"))
    sub_tokens = [tokens_in_window(t_first, t_last, tokens, a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    # no aggregate, no energy per token either: the tokens would be those of failed requests alone
    tokens = figures.output_tokens if figures.aggregate_tok_s.value is not None else 0.0
    return step_energy(traces, cpu_samples, start, end, tokens, sub_tokens)


def run_figures(run: LoadedRun, slo: Mapping[str, float] | None = None) -> RunFigures:
    """Figures of every step with a complete measured window; the rest become warnings. Each step's goodput
    is judged by ``slo`` when given (targets named after the run), else by the run's own targets."""
    warnings = list(run.warnings)
    manifest = run.manifest
    if manifest.status != "complete":
        detail = f" ({manifest.status_detail})" if manifest.status_detail else ""
        warnings.append(f"run status is {manifest.status}{detail}: figures cover the steps whose window closed")
    # added to the run's own records: the comparison (``analysis.compare``) reads them there
    frame = add_request_metrics(run.records)
    uncounted = int(frame["tokens_from_chunks"].sum())
    if uncounted:
        warnings.append(
            f"{wording.counted(uncounted, 'successful record')} {'carries' if uncounted == 1 else 'carry'} no token "
            "count (usage or timings); their streamed content chunks were counted as tokens"
        )
    arrivals = ChunkArrivals.from_runs(run.folders, frame)
    requests = Requests(frame, arrivals.request_ids if arrivals is not None else None)
    ends = [window.measure_end for window in manifest.steps if window.measure_end is not None]
    requests.hold_users(max(ends, default=float("inf")))
    known_steps = [window.index for window in manifest.steps]
    stray = int((~np.isin(requests["step"], known_steps)).sum())
    if stray:
        warnings.append(f"{wording.counted(stray, 'record')} tagged with a step the manifest does not list; ignored")
    repeated = sorted({index for index in known_steps if known_steps.count(index) > 1})
    if repeated:
        raise AnalysisError(
            f"{run.path}: the manifest lists step(s) {', '.join(map(str, repeated))} more than once, so which "
            "window holds its records is unknown; `rigbench check` names it as damage: re-run the load test"
        )
    steps = []
    max_tokens = manifest.load.max_tokens if manifest.load else None
    read_timeout = manifest.load.read_timeout_seconds if manifest.load else None
    targets = slo if slo is not None else (manifest.load.slo if manifest.load else None)
    traces = gpu_traces([sample for folder in run.folders for sample in read_gpu_samples(folder)])
    cpu_samples = [sample for folder in run.folders for sample in read_cpu_energy_samples(folder)]
    for window in manifest.steps:
        name = f"step {window.index} ({window.rate:g} req/s)" if window.rate is not None else (
            f"step {window.index} ({wording.counted(window.users, 'user')})"
        )
        if window.measure_end is None or window.measure_end <= window.measure_start:
            warnings.append(f"{name} has no closed measured window; left out")
            continue
        figures = step_figures(requests, window, run.telemetry, max_tokens, arrivals,
                               window_on_schedule(manifest, window), targets)
        if window.rate is None and figures.completed_in_window < window.users:
            warnings.append(short_window_warning(frame, figures, max_tokens, read_timeout))
        if traces or cpu_samples:
            figures.energy = window_energy(requests, figures, traces, cpu_samples)
        if manifest.load is not None and manifest.load.sessions is not None:
            figures.sessions = measured_sessions(requests, window.index)
        if figures.cut_counted_by_chunks:
            warnings.append(
                f"{name}: aggregate tok/s counts {wording.counted(figures.cut_counted_by_chunks, 'cut request')} "
                f"by {'its' if figures.cut_counted_by_chunks == 1 else 'their'} content chunks (no per-chunk or "
                "/tokenize count): it undercounts a server that packs several tokens per chunk"
            )
        if figures.load_reached is not None and figures.load_reached < MARK_BELOW:
            why = ("the load generator fell behind (latency still counts from the intended starts)"
                   if window.rate is not None else shortfall_cause(figures))
            busy = (figures.load_reached * window.users, SESSION_BUSY) if requests.sessions and window.rate is None \
                else (figures.mean_in_flight, "requests in flight")
            warnings.append(describe_shortfall(name, figures.load_reached, busy[0], figures.sent_rate, window.rate,
                                               busy[1]) + f": {why}")
        steps.append(figures)
    if not steps:
        raise AnalysisError(
            f"{run.path}: no step has a measured window (manifest lists "
            f"{wording.counted(len(manifest.steps), 'step')}, status {manifest.status}); the sweep stopped before a "
            "measure phase ended: re-run the load test"
        )
    load_began = min((window.started_at for window in manifest.steps), default=None)
    return RunFigures(run, steps, warnings, token_methods=method_counts(requests.method),
                      decode_calls_per_s=decode_call_rates(run.telemetry, [step.index for step in steps]),
                      gpu_traces=traces,
                      idle_power_w=idle_power_w(traces, load_began) if traces and load_began else None)
