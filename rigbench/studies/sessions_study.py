"""Chat sessions against one-shot load on the same server, and the most conversations it can serve.

Why: the published method (and rigbench's default) sends one-shot prompts with the prompt cache
off, which compares cards fairly but is not what a chat service sees. Here one served model takes
both loads in turn: the one-shot sweep, then conversations (turns resend the history behind a
shared system prompt, users think between turns, the prompt cache on), so the report can set
TTFT and tok/s by turn and the share of prompt tokens the server reused beside the one-shot
figures. The same conversations then run on the stock build (its own slot choice) beside the
project's lowest-free-slot patch, since which slot a turn lands on decides what it reuses, and
without ``--swa-full``, since Gemma's sliding-window layers then keep too little to reuse a shared
prefix; a capacity search finds the most conversation users that still meet a latency target.

Every load is a ``rigbench sweep`` child process against the served profile (the same command a
user types); the README is written from the runs' summary.json files and the search's record.
``repeats`` (``--repeats N``) is given to the one-shot and sessions sweeps: each arm's load runs N times, one
series, so the spread between runs of every arm is measured (``rigbench report`` on a load's runs gives it).
The arms are not interleaved across builds: each arm serves its own build once, and a sweep's repeats run
against the one server it is given. The capacity search runs once (a search is one probe per load).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from tabulate import tabulate

from analysis.summary import read_summary
from core.errors import StudyError
from core.profile import load_profile
from core.rundir import RunDir
from core.rundir.capacity_search import SEARCH_FILE, read_search
from core.whole_files import write_whole
from rigbench.local_rig import LocalRigOptions, prepare_server
from rigbench.own_command import rigbench_program
from rigbench.studies.real_gemma_report import typical_run

PROFILE = "gemma3-270m-many"
# The many-users line for a CPU: 8 slots of 2,048 tokens (a conversation's history fits), no GPU flags, and a
# full-size sliding-window cache: without it Gemma's SWA layers keep too little for llama-server to reuse a
# cached prefix that is not the whole of the slot's cache (a shared system prompt), so the study measures
# that line beside this one.
CPU_SERVER_ARGS = "-c 16384 --parallel 8 --no-jinja --chat-template gemma --metrics --slots --swa-full"
# (arm, slot patch, --swa-full, loads): the loads each arm's served model takes, in order
ARMS = (
    ("patched", True, True, ("one-shot", "sessions", "search")),
    ("stock", False, True, ("sessions",)),
    ("patched-no-swa-full", True, False, ("sessions",)),
)
SLOT_PATCH_BLOCK = '[llama_cpp]\npatches = ["server-lowest-free-slot"]\n'


@dataclass
class SessionsStudy:
    """The study's choices; ``scale`` multiplies every window (0.2: a quick look)."""

    out: Path
    steps: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    warmup: float = 5.0
    measure: float = 30.0
    max_tokens: int = 64
    turns: str = "2-4"
    think: str = "exponential:2"
    system_prompt_tokens: int = 256
    slo: str = "ttft_p90=1.5,tpot_p90=80ms"
    max_users: int = 16
    # a p90 target is judged only with at least 36 requests behind it (analysis.goodput): at one user a
    # conversation turn takes seconds on a CPU, so the search's probes measure longer than the sweeps
    search_measure: float = 120.0
    loads: tuple[str, ...] = ("one-shot", "sessions", "search")
    seed: int = 1
    backend: str = "cpu"
    scale: float = 1.0
    repeats: int = 1  # runs of each sweep's load, one series (rigbench sweep --repeats)
    console: Console = field(default_factory=Console)

    def log(self, line: str) -> None:
        self.console.print(line)
        with open(self.out / "study.log", "a") as handle:
            handle.write(line + "\n")

    def windows(self) -> list[str]:
        return ["--warmup", f"{self.warmup * self.scale:g}", "--measure", f"{self.measure * self.scale:g}"]

    def repeated(self) -> list[str]:
        """The sweeps' ``--repeats``, where more than one run of each load is asked for."""
        return ["--repeats", str(self.repeats)] if self.repeats > 1 else []

    def session_flags(self) -> list[str]:
        return ["--sessions", "--turns", self.turns, "--think", self.think, "--system-prompt-tokens",
                str(self.system_prompt_tokens), "--workload-seed", str(self.seed)]


def profile_file(study: SessionsStudy, arm: str, patched: bool, swa_full: bool) -> Path:
    """The many-users Gemma 3 270M profile with the CPU line, with or without the slot patch and the
    full-size sliding-window cache."""
    text = Path(load_profile(PROFILE).source_path or "").read_text()
    if SLOT_PATCH_BLOCK not in text:
        raise StudyError(f"{PROFILE} no longer carries the slot patch block this study varies")
    if not patched:
        text = text.replace(SLOT_PATCH_BLOCK, "")
    head, _, rest = text.partition('args = """')
    _, _, after = rest.partition('"""')
    if not after:
        raise StudyError(f"{PROFILE}: its [server] args are no longer one triple-quoted string")
    line = CPU_SERVER_ARGS if swa_full else CPU_SERVER_ARGS.replace(" --swa-full", "")
    text = f'{head}args = "{line}"{after}'
    text = text.replace("max_tokens = 128", f"max_tokens = {study.max_tokens}")
    path = study.out / f"{PROFILE}-cpu-{arm}.toml"
    write_whole(path, text)
    load_profile(path)  # still a valid profile
    return path


def sweep(study: SessionsStudy, url: str, profile: Path, runs: Path, *flags: str) -> None:
    """One ``rigbench sweep`` against the served profile; a failed sweep keeps its run and is logged."""
    command = [*rigbench_program(), "sweep", "--url", url, "--profile", str(profile), "--runs-dir", str(runs),
               "--no-progress", *study.windows(), *flags]
    study.log("$ " + shlex.join(command))
    done = subprocess.run(command, capture_output=True, text=True)
    study.log(done.stdout.strip())
    if done.returncode != 0:
        study.log(f"exit {done.returncode}: {done.stderr.strip()[-1500:]}")


def run_study(study: SessionsStudy) -> Path:
    """Both builds' sweeps and the search, then the README."""
    study.out.mkdir(parents=True, exist_ok=True)
    steps = ",".join(str(users) for users in study.steps)
    for arm, patched, swa_full, arm_loads in ARMS:
        loads = [load for load in arm_loads if load in study.loads]
        if not loads:
            continue
        profile = profile_file(study, arm, patched, swa_full)
        prepared = prepare_server(LocalRigOptions(profile=str(profile), backend=study.backend), study.console)
        runs = study.out / arm
        runs.mkdir(parents=True, exist_ok=True)
        prepared.server.log_path = runs / "llama-server.log"
        with prepared.server as server:
            study.log(f"{arm}: serving {profile.name} at {server.base_url}")
            for load in loads:
                if load == "one-shot":
                    sweep(study, server.base_url, profile, runs / load, "--steps", steps, *study.repeated())
                elif load == "sessions":
                    sweep(study, server.base_url, profile, runs / load, "--steps", steps, *study.session_flags(),
                          *study.repeated())
                else:
                    measure = ["--measure", f"{study.search_measure * study.scale:g}"]
                    sweep(study, server.base_url, profile, runs / load, "--find-max", "users", "--slo", study.slo,
                          "--max-load", str(study.max_users), *study.session_flags(), *measure)
    for folder in sorted(path for path in study.out.glob("*/*/*") if path.is_dir()):  # a run, or a search
        done = subprocess.run([*rigbench_program(), "report", str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            study.log(f"report {folder}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    readme = study.out / "README.md"
    write_whole(readme, study_readme(study))
    study.log(f"wrote {readme}")
    return readme


def _run_folder(folder: Path) -> Path | None:
    """The load's run: the first in the folder, or of the repeats of one series, the typical one
    (``typical_run``: closest to their mean aggregate at the largest step)."""
    found = sorted(path for path in folder.iterdir() if (path / "manifest.json").is_file()) if folder.is_dir() else []
    if len(found) < 2:
        return found[0] if found else None
    repeats = [RunDir(path).read_manifest().repeat for path in found]
    one_series = all(repeat is not None for repeat in repeats) and len({r.series for r in repeats if r}) == 1
    return typical_run(found) if one_series else found[0]


def _summary_steps(folder: Path) -> list:
    run = _run_folder(folder)
    if run is None or not (run / "summary.json").is_file():
        return []
    return read_summary(run / "summary.json").runs[0].steps


def _fmt(value: float | None, digits: int = 0, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def load_table(one_shot: list, sessions: list) -> str:
    """One-shot against sessions, step by step, on the same server."""
    by_users = {step.users: step for step in sessions}
    rows = []
    for step in one_shot:
        other = by_users.get(step.users)
        rows.append([
            step.users, _fmt(step.aggregate_tok_s.value), _fmt(step.ttft_s["p50"].value, 0, 1000),
            _fmt(step.ttft_s["p90"].value, 0, 1000),
            _fmt(other.aggregate_tok_s.value) if other else "-",
            _fmt(other.ttft_s["p50"].value, 0, 1000) if other else "-",
            _fmt(other.ttft_s["p90"].value, 0, 1000) if other else "-",
            _fmt(other.sessions.reuse_share.value, 2) if other and other.sessions else "-",
            _fmt(other.mean_in_flight, 1) if other else "-",
        ])
    headers = ["users", "one-shot tok/s", "TTFT p50 ms", "TTFT p90 ms", "sessions tok/s", "TTFT p50 ms",
               "TTFT p90 ms", "reuse share", "sessions: in flight"]
    return tabulate(rows, headers=headers, tablefmt="github")


def turn_table(sessions: list) -> str:
    """TTFT p50 / p90 (ms) by turn number, per step."""
    turns = sorted({turn.turn for step in sessions if step.sessions for turn in step.sessions.ttft_by_turn})
    rows = []
    for step in sessions:
        if step.sessions is None:
            continue
        by_turn = {turn.turn: turn for turn in step.sessions.ttft_by_turn}
        rows.append([step.users, step.sessions.conversations, step.sessions.turns] + [
            (f"{_fmt(by_turn[t].ttft_s['p50'].value, 0, 1000)} / {_fmt(by_turn[t].ttft_s['p90'].value, 0, 1000)} "
             f"({by_turn[t].requests})") if t in by_turn else "-" for t in turns])
    return tabulate(rows, headers=["users", "conversations", "turns", *[f"turn {t}" for t in turns]],
                    tablefmt="github")


def arms_table(arms: dict[str, list]) -> str:
    """The same conversations on each arm: reuse share, TTFT p90 and aggregate tok/s per step."""
    users = sorted({step.users for steps in arms.values() for step in steps})
    rows = []
    for count in users:
        row: list = [count]
        for steps in arms.values():
            step = next((s for s in steps if s.users == count), None)
            row.append("-" if step is None else (
                f"{_fmt(step.sessions.reuse_share.value, 2) if step.sessions else '-'} / "
                f"{_fmt(step.ttft_s['p90'].value, 0, 1000)} / {_fmt(step.aggregate_tok_s.value)}"))
        rows.append(row)
    headers = ["users", *[f"{arm}: reuse / TTFT p90 ms / tok/s" for arm in arms]]
    return tabulate(rows, headers=headers, tablefmt="github")


def search_table(folder: Path) -> tuple[str, str]:
    """The search's probes, and its result in one line."""
    searches = [path.parent for path in folder.glob(f"*/{SEARCH_FILE}")]
    if not searches:
        return "(no capacity search was recorded)", ""
    search = read_search(searches[0])
    rows = []
    for number, probe in enumerate(search.probes, 1):
        readings = "; ".join(
            f"{key} {_fmt(reading.value, 3)} s [{_fmt(reading.low, 3)}, {_fmt(reading.high, 3)}] {reading.verdict}"
            for key, reading in probe.targets.items())
        rows.append([number, f"{probe.load:g}", "yes" if probe.meets else "no", readings,
                     _fmt(probe.goodput_req_s, 2), _fmt(probe.aggregate_tok_s)])
    table = tabulate(rows, headers=["probe", "users", "meets", "targets", "goodput req/s", "tok/s"],
                     tablefmt="github")
    result = search.result
    line = "(the search did not finish)" if result is None else (
        f"largest meeting every target: {_fmt(result.largest_meeting)} users; smallest missing: "
        f"{_fmt(result.smallest_missing)} users; stopped: {result.reason} ({result.detail})")
    return table, line


def study_readme(study: SessionsStudy) -> str:
    one_shot = _summary_steps(study.out / "patched" / "one-shot")
    sessions = _summary_steps(study.out / "patched" / "sessions")
    arms = {arm: _summary_steps(study.out / arm / "sessions") for arm, *_ in ARMS}
    search, result = search_table(study.out / "patched" / "search")
    search_window = study.search_measure * study.scale
    settings = {"steps": study.steps, "warmup_s": study.warmup * study.scale, "measure_s": study.measure * study.scale,
                **({"repeats": study.repeats} if study.repeats > 1 else {}),
                "max_tokens": study.max_tokens, "turns": study.turns, "think": study.think,
                "system_prompt_tokens": study.system_prompt_tokens, "slo": study.slo, "seed": study.seed,
                "search_measure_s": search_window}
    return "\n".join([
        "# Chat sessions against one-shot load (generated by `rigbench study sessions`)",
        "",
        f"Settings: `{json.dumps(settings)}`; server line `{CPU_SERVER_ARGS}` ({PROFILE}'s model).",
        "",
        "## One-shot prompts and conversations on the same server (patched build)",
        "",
        load_table(one_shot, sessions),
        "",
        "## Conversations: TTFT p50 / p90 in ms by turn (requests)",
        "",
        turn_table(sessions),
        "",
        "## The same conversations on each arm (stock: llama-server's own slot choice; no-swa-full: Gemma's "
        "sliding-window layers keep only their window)",
        "",
        arms_table(arms),
        "",
        f"## The most conversation users meeting `{study.slo}`",
        "",
        search,
        "",
        result,
        "",
    ])
