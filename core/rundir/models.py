"""The run directory's models: one definition of every file's content, with its schema version.

Loadtest writes these, analysis reads them, provision adds what the rig knows; the JSON Schema
in ``run-v1.schema.json`` is generated from them (``rigbench schema``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from core.lists import SWEEP_DRAIN_SECONDS, SWEEP_MAX_ERROR_RATE, SWEEP_READ_TIMEOUT_S
from core.network import server_url
from core.rundir.hardware import HardwareInfo
from core.strict import Strict
from core.wording import counted

SCHEMA_VERSION = 1
# how an instance is bought: one spelling for the run record and the price list
Market = Literal["on-demand", "spot"]
RunStatus = Literal["running", "complete", "interrupted", "failed"]
Phase = Literal["warmup", "measure"]
# How a request's output tokens were counted, most exact first: the server's final ``usage``; the
# per-chunk counts the server streamed (llama-server's ``timings_per_token``, vLLM's
# ``continuous_usage_stats``); the server's ``/tokenize`` of the streamed text, after the run; chunks.
TokenCountMethod = Literal["usage", "per_chunk", "tokenize", "chunks"]


class MachineInfo(Strict):
    hostname: str = ""
    cpu_model: str = ""
    cpu_cores: int = 0
    memory_gib: float = 0.0
    gpu_name: str | None = None
    gpu_memory_mib: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None


class RigInfo(Strict):
    """Where the server ran; prices are what was known at run time, with their source."""

    kind: Literal["local", "aws"] = "local"
    instance_type: str | None = None
    region: str | None = None
    availability_zone: str | None = None
    market: Market | None = None
    price_per_hour: float | None = None
    price_source: str | None = None
    launch_time: str | None = None
    machine: MachineInfo = Field(default_factory=MachineInfo)


class PatchInfo(Strict):
    """A patch applied to the llama.cpp source before it was built."""

    name: str = Field(description="the patch file's name")
    sha256: str


class BuildInfo(Strict):
    source: str
    backend: str
    cuda_arch: str | None = None
    cmake_options: list[str] = Field(default_factory=list)
    patches: list[PatchInfo] = Field(default_factory=list, description="applied to the source, in order")
    build_seconds: float | None = None
    key: str | None = None


class KvWidth(Strict):
    """Cache values (K, or V) one token of context adds, summed over the layers whose attention
    reads them; a layer that reuses an earlier layer's cache reads it again, so it counts too."""

    full: int = Field(ge=0, description="over layers attending to the whole context")
    sliding: int = Field(ge=0, description="over sliding-window layers: read up to the window only")


class DecodeBytes(Strict):
    """What one decode step of a model reads from memory, counted from its GGUF tensor table.

    Kept beside the model because the model file stays on the rig: the card's roofline is
    computed from this summary later, on any machine. Cache values are counts, not bytes, since
    the cache's type (``-ctk``/``-ctv``) is a serving setting, read from the server's arguments.
    """

    weights_bytes: int = Field(ge=0, description="weights one step reads once, shared by every sequence it decodes")
    lookup_bytes: int = Field(ge=0, description="embedding rows looked up per sequence and token")
    k_values: KvWidth
    v_values: KvWidth
    sliding_window: int | None = Field(default=None, description="tokens a sliding-window layer attends to")
    tensor_count: int = Field(ge=0)
    tied_output: bool = Field(description="the output projection reads token_embd whole (no output.weight)")
    source: str = Field(description="what the table was read from: the GGUF, or a synthetic writer's table")
    notes: list[str] = Field(default_factory=list, description="simplifications that apply to this model")


class ModelInfo(Strict):
    name: str
    sha256: str
    size_bytes: int
    repo: str | None = None
    synthetic: bool = False
    label: str | None = None
    decode_bytes: DecodeBytes | None = None
    source: str | None = Field(None, description="where the bytes came from: pypi:PACKAGE==VERSION, or "
                                "hf:REPO@COMMIT/FILE for a hub download; None when not known")
    terms: str | None = Field(None, description="the licence or terms of use the model comes under, as its "
                               "source names them; None when the source names none")


SlotsFrom = Literal["server", "profile", "flags"]


class ServerDescription(Strict):
    """What a server said of itself before the load: llama-server's ``/props``, an OpenAI-style
    server's ``/v1/models`` (vLLM's ``max_model_len``). Only what it said is kept."""

    described_by: list[str] = Field(default_factory=list, description="the endpoints that answered")
    context_tokens: int | None = Field(None, gt=0, description="tokens one request may hold, prompt and reply")


class ReplicaInfo(Strict):
    """One of several llama-server processes the load was spread over (``core.replicas``)."""

    index: int
    url: str
    slots: int
    gpu: int | None = None
    cpus: list[int] = Field(default_factory=list)


class MpsInfo(Strict):
    """CUDA's Multi-Process Service for the run's replicas (``core.mps``): whether it ran and why, and which daemon."""

    ran: bool
    reason: str = Field(description="the setting and what decided it, one line")
    started_here: bool = Field(False, description="rigbench started the daemon (and stopped it after); false: "
                               "it was already answering at these folders, or did not run")
    control: str | None = Field(None, description="the control program's path")
    version: str | None = Field(None, description="the control program's version: the driver's, which ships it")
    pipe_dir: str | None = Field(None, description="CUDA_MPS_PIPE_DIRECTORY every replica was given")
    log_dir: str | None = Field(None, description="CUDA_MPS_LOG_DIRECTORY")


class ServerInfo(Strict):
    """The server a run's load went to. Its slot count is read, not guessed: from the server's own
    ``/slots``, else from the llama-server flags rigbench served it with or the profile that names
    them; ``None`` when none of these said (a server that is not llama-server, given by URL)."""

    args: list[str]
    host: str
    port: int
    scheme: Literal["http", "https"] = Field("http", description="how the server was reached (runs from before "
                                             "it was recorded: http)")
    parallel_slots: int | None = None
    slots_from: SlotsFrom | None = None
    endpoint: str = "/v1/chat/completions"
    model_name: str | None = Field(None, description="the model name every request carried")
    description: ServerDescription | None = None
    replicas: list[ReplicaInfo] = Field(default_factory=list, description="the replicas user i goes to (i mod N); "
                                        "empty for one server")
    mps: MpsInfo | None = Field(None, description="CUDA's Multi-Process Service for the replicas; None: not "
                                "recorded (a server given by URL, or a run from before it was)")

    @property
    def url(self) -> str:
        """The server's root URL, as it was reached (an IPv6 host in brackets)."""
        return server_url(self.scheme, self.host, self.port)


# Where a request setting came from: its flag, the rig profile, the server (the model it lists), or
# rigbench's default (no flag, no profile, the server said nothing).
SettingOrigin = Literal["flag", "file", "profile", "server", "rigbench"]


class RequestOrigins(Strict):
    """Where each setting the run's requests carried came from: what was given and what was assumed."""

    model_name: SettingOrigin
    max_tokens: SettingOrigin
    temperature: SettingOrigin
    ignore_eos: SettingOrigin
    cache_prompt: SettingOrigin


Arrival = Literal["poisson", "constant", "gamma"]
LengthKind = Literal["fixed", "uniform", "normal", "lognormal"]
ThinkKind = Literal["constant", "exponential"]
# The latency figures a service-level target may name (seconds), each at a percentile.
SLO_FIGURES = ("ttft", "tpot", "itl", "e2e")
SLO_PERCENTILES = ("p50", "p90", "p95", "p99")


def slo_keys() -> tuple[str, ...]:
    """``ttft_p50`` ... ``e2e_p99``: every figure a target may name."""
    return tuple(f"{figure}_{percentile}" for figure in SLO_FIGURES for percentile in SLO_PERCENTILES)


class LengthDistribution(Strict):
    """Token counts drawn for each request from a seeded distribution and clipped to
    [``minimum``, ``maximum``]: ``fixed`` (``value``), ``uniform`` (over the bounds), ``normal``
    (``mean``, ``sd``), ``lognormal`` (``median``, ``sigma`` of the log). Real chat prompts and
    replies are long-tailed; one fixed length hides what the tail does to the batch."""

    kind: LengthKind
    value: int | None = Field(None, ge=1)
    mean: float | None = Field(None, gt=0)
    sd: float | None = Field(None, ge=0)
    median: float | None = Field(None, gt=0)
    sigma: float | None = Field(None, ge=0)
    minimum: int = Field(1, ge=1)
    maximum: int = Field(ge=1)

    @model_validator(mode="after")
    def _parameters_of_its_kind(self) -> LengthDistribution:
        needed = {"fixed": ("value",), "uniform": (), "normal": ("mean", "sd"), "lognormal": ("median", "sigma")}
        missing = [name for name in needed[self.kind] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.kind} length needs {', '.join(missing)}")
        if self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} is above maximum {self.maximum}")
        if self.kind == "fixed" and not self.minimum <= (self.value or 0) <= self.maximum:
            raise ValueError(f"fixed length {self.value} is outside [{self.minimum}, {self.maximum}]")
        return self


class SessionSettings(Strict):
    """Conversations instead of one-shot prompts: each user runs conversations of a seeded number
    of turns (uniform over [``turns_min``, ``turns_max``]), thinks between turns, and resends the
    history each turn behind one shared system prompt, as a chat client does."""

    turns_min: int = Field(1, ge=1)
    turns_max: int = Field(4, ge=1)
    think: ThinkKind = "exponential"
    think_seconds: float = Field(3.0, ge=0, description="the think time (constant) or its mean (exponential)")
    system_prompt_tokens: int = Field(0, ge=0, description="tokens of the system prompt every conversation shares")

    @model_validator(mode="after")
    def _turn_range(self) -> SessionSettings:
        if self.turns_min > self.turns_max:
            raise ValueError(f"turns_min {self.turns_min} is above turns_max {self.turns_max}")
        return self


class TraceSource(Strict):
    """A replayed JSONL trace (``loadtest.trace``): which file, exactly, and how fast."""

    path: str
    sha256: str
    rows: int = Field(ge=1)
    speed: float = Field(1.0, gt=0, description="the trace's arrival offsets are divided by this")


class LoadSettings(Strict):
    """A closed-loop sweep steps through ``user_steps`` (N users, each sending back to back);
    an open-loop one through ``rate_steps`` (requests per second arriving on a seeded schedule,
    whatever the server's state: queueing shows in the latency instead of slowing the load).
    Exactly one of the two lists is given."""

    user_steps: list[PositiveInt] = Field(default_factory=list)
    rate_steps: list[PositiveFloat] = Field(default_factory=list)
    arrival: Arrival = "poisson"
    arrival_seed: int = Field(0, ge=0)
    warmup_seconds: float = Field(ge=0)
    # one measured window for every step, or one per step (longer where requests are longer)
    measure_seconds: PositiveFloat | list[PositiveFloat]
    max_tokens: int = Field(ge=1)
    temperature: float = Field(0.0, ge=0)
    cache_prompt: bool = False
    ignore_eos: bool = False
    prompts: str = "mixed"
    context_tokens: int = Field(0, ge=0)
    processes: int = Field(1, ge=1)
    arm: str | None = None
    pin_slots: bool = Field(False, description="user i asks for server slot i (llama-server's id_slot): an "
                            "experiment's upper bound for the server's slot choice, not real traffic")
    drain_seconds: float = Field(SWEEP_DRAIN_SECONDS, ge=0, description="after the last measured window, how "
                                 "long requests in flight may run to their end before the sweep stops them "
                                 "(0: cut at once)")
    arrival_shape: float | None = Field(None, gt=0, description="gamma arrivals' shape k: gaps of mean 1/rate "
                                        "with a coefficient of variation 1/sqrt(k) (k < 1 is burstier than poisson)")
    sessions: SessionSettings | None = Field(None, description="conversations with think time (None: one-shot "
                                             "prompts sent back to back)")
    prompt_length: LengthDistribution | None = Field(None, description="prompt tokens per request, drawn (None: "
                                                     "the prompt set's own prompts)")
    output_length: LengthDistribution | None = Field(None, description="reply tokens per request, drawn, each "
                                                     "sent as its max_tokens with ignore_eos (None: max_tokens)")
    trace: TraceSource | None = Field(None, description="arrivals and lengths replayed from a trace file")
    workload_seed: int = Field(0, ge=0, description="seed of the turns, think times and drawn lengths")
    slo: dict[str, float] = Field(default_factory=dict, description="service-level targets in seconds by figure "
                                  "and percentile (e.g. ttft_p90): each step's goodput is judged against them")
    max_error_rate: float = Field(SWEEP_MAX_ERROR_RATE, ge=0, le=1, description="the share of a step's failed "
                                  "requests above which the sweep stops")
    # 10 s: a supervised llama-server that crashed is back (restarted, its model read from the page cache) in a
    # few seconds, and a server that is gone is still named within a third of a default 30 s window
    outage_seconds: float = Field(10.0, ge=0, description="how long the sweep waits for a server that refuses "
                                  "every request (refused connections, 502/503/504, 429) to answer again: the "
                                  "refusals are recorded and the sweep goes on; longer, it stops naming the "
                                  "outage (0: stop at once)")
    read_timeout_seconds: float = Field(SWEEP_READ_TIMEOUT_S, gt=0, description="seconds a stream may stall")
    timeline: bool = Field(False, description="also keep every chunk's arrival time")
    repeats: int = Field(1, ge=1, le=100, description="whole runs of the load, one after another, interleaved "
                         "across arms (A B A B): how far runs of the same thing land apart is measured, not assumed")

    @property
    def open_loop(self) -> bool:
        return bool(self.rate_steps)

    @property
    def step_count(self) -> int:
        return len(self.rate_steps) if self.rate_steps else len(self.user_steps)

    @model_validator(mode="after")
    def _one_kind_of_step_and_one_window_per_step(self) -> LoadSettings:
        if bool(self.user_steps) == bool(self.rate_steps):
            raise ValueError("give exactly one of user_steps (closed loop) and rate_steps (open loop)")
        if isinstance(self.measure_seconds, list) and len(self.measure_seconds) != self.step_count:
            kind = "rate" if self.open_loop else "user"
            windows = len(self.measure_seconds)
            raise ValueError(f"measure_seconds has {counted(windows, 'window')} for "
                             f"{counted(self.step_count, f'{kind} step')}")
        bad_slo = [key for key in self.slo if key not in slo_keys()]
        if bad_slo:
            raise ValueError(f"slo: unknown figure {bad_slo[0]!r}; expected one of {', '.join(slo_keys())}")
        if self.arrival == "gamma" and self.arrival_shape is None:
            raise ValueError("gamma arrivals need arrival_shape")
        if self.pin_slots and (self.open_loop or self.processes != 1):
            # users are numbered within one process, and an open loop has no users to number
            raise ValueError("pin_slots needs a closed loop (user steps) and one load process")
        if self.sessions is not None and self.open_loop:
            raise ValueError("sessions need a closed loop (user_steps): conversations are run by users")
        if self.arrival == "gamma" and (not self.open_loop or self.trace is not None):
            raise ValueError("gamma arrivals space an open loop's arrivals (rate_steps), not users or a trace's rows")
        if self.trace is not None and (self.prompt_length or self.output_length or self.user_steps
                                       or len(self.rate_steps) != 1):
            raise ValueError("a trace is one open-loop step with its own lengths: give it without user_steps, "
                             "more rate_steps, prompt_length or output_length")
        return self

    def remaining(self, first_step: int) -> LoadSettings:
        """The settings of the steps from ``first_step`` on (a resumed sweep)."""
        measure = self.measure_seconds
        if isinstance(measure, list):
            measure = measure[first_step:]
        return self.model_copy(
            update={
                "user_steps": self.user_steps[first_step:],
                "rate_steps": self.rate_steps[first_step:],
                "measure_seconds": measure,
            }
        )


class StepWindow(Strict):
    """One step of a sweep; analysis uses records from [measure_start, measure_end) only.
    An open-loop step has its arrival ``rate`` (requests per second) and ``users`` 0."""

    index: int
    users: int
    rate: float | None = None
    started_at: float
    measure_start: float
    measure_end: float | None = None
    context_tokens: int = 0
    users_started: int | None = Field(None, ge=0, description="users running in every load process when the "
                                      "measured window opened (a closed loop)")


class RepeatInfo(Strict):
    """Which repeat of which arm a run is. Runs of one command share a series; the runs of one arm in it
    are that arm's repeats, and how far they land apart is the spread a comparison between arms is judged
    by (``analysis.repeats``)."""

    series: str = Field(description="shared by every run of one command's arms and repeats")
    arm: str = Field(description="the arm's label: what differs between arms (a server, a flag); 'default' alone")
    index: int = Field(ge=1, description="this repeat, from 1")
    of: int = Field(ge=1, description="the repeats each arm runs")
    order: int = Field(ge=0, description="its place in the series' run order, from 0: arms interleaved, A1 B1 A2 B2")

    @model_validator(mode="after")
    def _index_within_repeats(self) -> RepeatInfo:
        if self.index > self.of:
            raise ValueError(f"repeat {self.index} of {self.of}")
        return self


class RunManifest(Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    status: RunStatus = "running"
    status_detail: str | None = None
    created_at: str
    ended_at: str | None = None
    profile: str
    rig: RigInfo = Field(default_factory=RigInfo)
    build: BuildInfo | None = None
    model: ModelInfo | None = None
    drafter: ModelInfo | None = None
    server: ServerInfo | None = None
    load: LoadSettings | None = None
    request_origins: RequestOrigins | None = None
    steps: list[StepWindow] = Field(default_factory=list)
    last_complete_step: int | None = None
    hardware: HardwareInfo | None = Field(None, description="what sampled the GPUs and CPU energy, what was "
                                          "missing, and the sampler's own cost (hardware/ in the run directory)")
    linked_runs: list[str] = Field(default_factory=list)
    repeat: RepeatInfo | None = Field(None, description="the series, arm and repeat this run is (None: a run "
                                      "made alone, one repeat)")
    resumed_from: str | None = None
    warnings: list[str] = Field(default_factory=list)


class ServerTimings(BaseModel):
    """llama-server's ``timings`` object from the final stream chunk (unknown keys kept)."""

    model_config = ConfigDict(extra="allow")

    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    predicted_per_second: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None


class RequestRecord(Strict):
    """One request, as raw as possible: timestamps (unix seconds) and the server's counts.

    The inter-token gaps are summarised by ``t_first_token``, ``t_last_token`` and
    ``content_chunks`` (mean ITL per chunk = span / (chunks - 1); mean TPOT per token = span /
    (tokens - first_chunk_tokens)); full arrival times go to the optional timeline shard so a
    million records stay quick to analyse.

    A request cut before its final ``usage`` (stopped by the harness, or by an error) counts the
    tokens it streamed: ``streamed_tokens`` from the server's per-chunk counts, or else its
    ``partial_text`` is kept so that the server's ``/tokenize`` can count it after the run
    (``token_counts.jsonl``). ``tokens_counted_by`` says which count the record's tokens are.
    A request streaming across an edge of its step's measured window keeps how many of its chunks
    (and, from the server's running counts, tokens) arrived inside it (``loadtest.window_share``).
    ``t_intended`` is an open-loop request's scheduled start: its latency counts from there, so a
    load generator that fell behind its arrival schedule cannot hide the queueing.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str
    shard: str
    replica: int | None = Field(None, description="the server replica it was sent to (user i to replica i mod N; "
                                "open-loop arrival n likewise); None with one server")
    step: int
    users: int
    phase: Phase
    category: str
    context_tokens: int = 0
    t_intended: float | None = None
    t_start: float
    t_first_token: float | None = None
    t_last_token: float | None = None
    t_end: float
    content_chunks: int = 0
    http_status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    streamed_tokens: int | None = None
    first_chunk_tokens: int | None = None
    tokens_counted_by: TokenCountMethod | None = None
    partial_text: str | None = None
    timings: ServerTimings | None = None
    interrupted: bool = False
    conversation: str | None = Field(None, description="the conversation it is a turn of (sessions); None for a "
                                     "one-shot prompt")
    turn: int | None = Field(None, ge=1, description="its turn in the conversation, from 1")
    cached_tokens: int | None = Field(None, ge=0, description="prompt tokens the server reused from its cache "
                                      "(llama-server's timings.cache_n, or usage.prompt_tokens_details."
                                      "cached_tokens); None where the server did not say")
    window_chunks: int | None = Field(None, ge=0, description="content chunks that arrived inside its step's "
                                      "measured window; kept only when an edge of the window fell inside its stream")
    window_tokens: int | None = Field(None, ge=0, description="output tokens among those chunks, by the server's "
                                      "running counts; None when it streams none")
    repeat: int | None = Field(None, ge=1, description="the repeat of its arm it was sent in (the run's "
                               "manifest.repeat.index); None in a run made alone")

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class TokenCount(Strict):
    """A cut request's tokens, counted after the run by the server's ``/tokenize`` of its
    ``partial_text`` (one line of ``token_counts.jsonl``): records stay as the client wrote them."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str
    streamed_tokens: int = Field(ge=0)
    tokens_counted_by: Literal["tokenize"] = "tokenize"


class TelemetrySnapshot(Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    taken_at: float
    step: int
    users: int
    boundary: Literal["start", "measure", "end"]
    metrics: dict[str, float] = Field(default_factory=dict)
    slots_total: int | None = None
    slots_busy: int | None = None
    error: str | None = None
    replica: int | None = Field(None, description="the replica it was read from (ServerInfo.replicas' order); "
                                "None with one server")


