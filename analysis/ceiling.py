"""The card's batched ceiling beside the served curve: what llama-batched-bench decodes with N
sequences at once against what the server delivered to N users.

Why: the served aggregate alone does not say how much of the card a server leaves unused;
llama-batched-bench runs the same model with N sequences decoding together and no server, HTTP
or scheduling in the way, so served ÷ batched at each step is the share of the card's own
batched speed the server reaches. A result counts for a run when it is a llama-batched-bench
report (``core.llama_bench.BenchReport``) in the run's folder or the two above it (a study keeps
its bench files beside its runs: same machine, same lease), of the same model file, with the
same KV layout (``-kvu`` or one stream per slot), or one named with ``rigbench report
--ceiling FILE``. Only steps whose user count the bench measured are compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from tabulate import tabulate

from analysis.figures import RunFigures
from analysis.load import LoadedRun
from core.errors import AnalysisError
from core.llama_bench import BenchReport
from core.wording import counted

UNIFIED_FLAGS = ("-kvu", "--kv-unified")
SEARCH_DEPTH = 3  # the run's folder, its parent and the one above (OUT/runs/<run> in a study)


def sequences_at(users: int, slots: int | None) -> int:
    """The sequences a server can decode together at a step of ``users`` users: every user, up to its slots (a user
    past them waits, and adds nothing to a decode call)."""
    return min(users, slots) if slots else users


@dataclass
class BatchedCeiling:
    path: Path
    model_file: str | None  # the name of the GGUF it ran (-m)
    unified: bool
    decode_tok_s: dict[int, float]  # sequences -> llama-batched-bench's decode tok/s
    command: list[str]  # how llama-batched-bench was run (prompt and generated tokens, flags)

    def at(self, users: int, slots: int | None) -> float | None:
        """The decode tok/s for the sequences a step of ``users`` users decodes together (``sequences_at``); None
        where the bench did not measure that count."""
        return self.decode_tok_s.get(sequences_at(users, slots))


def served_slots(run: LoadedRun) -> int | None:
    """The slots the run's server (every replica together) had, as its manifest read them; None: unknown."""
    server = run.manifest.server
    return None if server is None else server.parallel_slots


def _model_file(command: list[str]) -> str | None:
    for flag in ("-m", "--model"):
        if flag in command[:-1]:
            return Path(command[command.index(flag) + 1]).name
    return None


def read_ceiling(path: Path) -> BatchedCeiling | None:
    """A llama-batched-bench report, or None for another JSON file (a llama-bench report, say)."""
    try:
        report = BenchReport.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return None
    if not report.command or not Path(report.command[0]).name.startswith("llama-batched-bench"):
        return None
    decode = {int(key[3:]): value for key, value in report.summary.items() if key.startswith("tg@")}
    if not decode:
        return None
    return BatchedCeiling(path, _model_file(report.command), any(flag in report.command for flag in UNIFIED_FLAGS),
                          decode, report.command)


def explicit_ceiling(path: Path) -> BatchedCeiling:
    """``--ceiling FILE``: refused in one line when it is not a llama-batched-bench report."""
    ceiling = read_ceiling(Path(path))
    if ceiling is None:
        raise AnalysisError(f"--ceiling {path}: not a llama-batched-bench report (rigbench's BenchReport JSON "
                            "with tg@N figures)")
    return ceiling


def ceiling_for(run: LoadedRun, named: list[BatchedCeiling] | None = None) -> BatchedCeiling | None:
    """The batched ceiling that matches the run's model file and KV layout, if one is known."""
    manifest = run.manifest
    if manifest.model is None or manifest.server is None:
        return None
    unified = any(flag in manifest.server.args for flag in UNIFIED_FLAGS)
    folders = [run.path.resolve(), *run.path.resolve().parents][:SEARCH_DEPTH]
    found = list(named or [])
    for folder in folders:
        found += [c for c in map(read_ceiling, sorted(folder.glob("batched-bench-*.json"))) if c is not None]
    for ceiling in found:
        if ceiling.model_file == manifest.model.name and ceiling.unified == unified:
            return ceiling
    return None


def ceiling_section(figures: RunFigures, ceiling: BatchedCeiling | None, header: str) -> list[str]:
    """Markdown: served aggregate ÷ batched decode at each step the bench measured; nothing when
    no ceiling matches or the run is an open loop (its steps are rates, not sequence counts)."""
    if ceiling is None or figures.open_loop:
        return []
    rows = []
    slots = served_slots(figures.run)
    capped = False
    for step in figures.steps:
        batched = ceiling.at(step.users, slots)
        served = step.aggregate_tok_s.value
        if batched is None or served is None:
            continue
        sequences = sequences_at(step.users, slots)
        capped = capped or sequences < step.users
        rows.append([step.users, f"{served:,.1f}", f"{batched:,.1f}" + (f" ({sequences})" if sequences < step.users
                                                                       else ""), f"{served / batched:.2f}"])
    if not rows:
        return []
    layout = "unified KV" if ceiling.unified else "one KV stream per slot"
    note = (f" Past the server's {counted(slots, 'slot')} the users beyond {'it' if slots == 1 else 'them'} wait, "
            "so a step is set against as many "
            "sequences as slots (in brackets)." if capped else "")
    return [
        "### Served against the card's batched ceiling",
        "",
        f"llama-batched-bench on the same model file and KV layout ({layout}), from `{ceiling.path.name}`: "
        f"N sequences decoding together with no server in the way.{note}",
        "",
        tabulate(rows, headers=[header, "served aggregate tok/s", "batched decode tok/s", "served ÷ batched"],
                 tablefmt="github", disable_numparse=True),
        "",
    ]
