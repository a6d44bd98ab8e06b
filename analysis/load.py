"""Run directories into pandas, validated in bulk.

The records come from ``core.rundir.columns`` as one Arrow table (parsed from the shards and
checked column by column, or read from the run's columnar side file when that is up to date:
the damage policy and the side file's staleness rule are there); this module turns the table
into a DataFrame, merges the ``/tokenize`` counts, joins a resumed sweep's runs and reads the
telemetry. The manifest goes through pydantic (``RunDir.read_manifest``): it is one small file.

``token_counts.jsonl`` (optional; ``TokenCount`` lines, each validated by pydantic: the file
holds only the cut requests, so it is small) carries ``/tokenize`` counts of cut requests' streamed
text made after the run; they are merged into the records' ``streamed_tokens`` with
``tokens_counted_by = "tokenize"``, so the records on disk stay as the client wrote them. Every
record's ``tokens_counted_by`` is then set from the counts it carries (see ``token_methods``), so
the figures' one definition of a record's token count decides it, not the writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import ValidationError

from core.errors import RunDirError
from core.rundir import RunDir, RunManifest, TelemetrySnapshot
from core.rundir.columns import NUMBER_COLUMNS, TEXT_COLUMNS, TIMING_KEYS, read_record_table
from core.rundir.jsonl import GZIP_ERRORS, forms
from core.wording import counted

# RequestRecord's defaults for the number keys a record may leave out (the bulk reader sees them as nulls).
NUMBER_DEFAULTS = {"context_tokens": 0.0, "content_chunks": 0.0}
TOKEN_COUNTS = RunDir.TOKEN_COUNTS
# Every method a record's token count can come from, most exact first (core.rundir.TokenCountMethod).
TOKEN_METHODS = ("usage", "per_chunk", "tokenize", "chunks")


@dataclass
class LoadedRun:
    """One validated run: its manifest, one row per request record, telemetry and warnings."""

    path: Path
    manifest: RunManifest
    records: pd.DataFrame
    telemetry: list[TelemetrySnapshot] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)  # run ids joined, oldest first, for a resumed sweep

    @property
    def folders(self) -> list[Path]:
        """The run directories behind these records, oldest first: the chain's for a resumed sweep (side by side),
        else this one. Files a run writes beside its records (hardware samples, chunk timelines) are read from
        each, so a step measured before the sweep was cut keeps them."""
        return [self.path.parent / run_id for run_id in self.chain] if self.chain else [self.path]

    @property
    def label(self) -> str:
        """A short name for tables and plot legends: instance type, arm or drafter, run id."""
        manifest = self.manifest
        parts = [manifest.rig.instance_type or manifest.rig.kind]
        if manifest.load is not None and manifest.load.arm:
            parts.append(manifest.load.arm)
        elif manifest.drafter is not None:
            parts.append("drafter")
        parts.append(manifest.run_id)
        return " ".join(parts)


def table_to_frame(table: pa.Table) -> pd.DataFrame:
    """Arrow records to pandas: flat columns, categories for repeated strings, defaults filled.

    The columns are handed to pandas as they are (``copy=False``): a million records stay one
    pass over their memory instead of two."""
    columns: dict[str, object] = {}
    for key in TEXT_COLUMNS:
        columns[key] = table.column(key).to_pandas()
    for key in NUMBER_COLUMNS:
        array = table.column(key).to_numpy()
        if key in NUMBER_DEFAULTS:
            array = np.where(np.isnan(array), NUMBER_DEFAULTS[key], array)
        columns[key] = array.astype(np.int64) if key in ("step", "users") else array
    columns["interrupted"] = table.column("interrupted").fill_null(False).to_numpy()
    for key in TIMING_KEYS:
        columns[f"timings_{key}"] = table.column(f"timings_{key}").to_numpy()
    return pd.DataFrame(columns, copy=False)


def _expected_shards(manifest: RunManifest) -> int | None:
    return manifest.load.processes if manifest.load is not None else None


def load_run(path: Path | str) -> LoadedRun:
    """Read and validate one run directory; raises RunDirError with file and line on damage.

    A sweep continued with ``rigbench sweep --resume`` is several linked run directories; any
    one of them loads as the whole chain, joined into one sweep (``LoadedRun.chain`` names them)."""
    chain = resume_chain(Path(path))
    if len(chain) == 1:
        return load_one_run(path)
    return join_chain([load_one_run(link) for link in chain], requested=Path(path))


def _sibling_manifest(folder: Path, run_id: str) -> RunManifest | None:
    try:
        return RunDir(folder / run_id).read_manifest()
    except RunDirError:
        return None


def resume_chain(path: Path) -> list[Path]:
    """The run directories of a resumed sweep, oldest first: back through ``resumed_from``,
    forward through linked runs that name the current one as theirs. Runs sit side by side."""
    first = RunDir(path)
    if not first.manifest_path.exists():
        return [path]
    folder = path.parent
    manifest = first.read_manifest()
    chain = [path]
    seen = {path.name}
    back = manifest
    while back.resumed_from and back.resumed_from not in seen:
        earlier = _sibling_manifest(folder, back.resumed_from)
        if earlier is None:
            break
        chain.insert(0, folder / back.resumed_from)
        seen.add(back.resumed_from)
        back = earlier
    current = manifest
    while True:
        following = [
            (name, later)
            for name in current.linked_runs
            if name not in seen
            and (later := _sibling_manifest(folder, name)) is not None
            and later.resumed_from == current.run_id
        ]
        if not following:
            return chain
        name, current = following[0]
        chain.append(folder / name)
        seen.add(name)


def join_chain(parts: list[LoadedRun], requested: Path) -> LoadedRun:
    """One sweep from a resumed chain: each interrupted run keeps its complete steps (the step it
    was cut in ran again in the next run), renumbered to follow on; the last run keeps all."""
    frames, telemetry, steps, warnings, described = [], [], [], [], []
    for position, part in enumerate(parts):
        manifest = part.manifest
        last = position == len(parts) - 1
        complete = -1 if manifest.last_complete_step is None else manifest.last_complete_step
        kept = [w for w in manifest.steps if last or w.index <= complete]
        kept_index = {w.index for w in kept}
        offset = len(steps)
        records = part.records[part.records["step"].isin(kept_index)].copy()
        records["step"] = records["step"] + offset
        frames.append(records)
        telemetry += [t.model_copy(update={"step": t.step + offset}) for t in part.telemetry if t.step in kept_index]
        steps += [w.model_copy(update={"index": w.index + offset}) for w in kept]
        dropped = len(part.records) - len(records)
        warnings += [f"{manifest.run_id}: {w}" for w in part.warnings]
        span = f"steps {offset}-{offset + len(kept) - 1}" if kept else "no complete step"
        described.append(
            f"{manifest.run_id} ({span}, {manifest.status}"
            + (f"; {counted(dropped, 'record')} of its cut step left out" if dropped and not last else "")
            + ")"
        )
    final = parts[-1].manifest
    first = parts[0].manifest
    load = None
    if final.load is not None:
        if final.load.open_loop:
            load = final.load.model_copy(update={"rate_steps": [w.rate or 0.0 for w in steps]})
        else:
            load = final.load.model_copy(update={"user_steps": [w.users for w in steps]})
    joined_manifest = final.model_copy(
        update={
            "steps": steps,
            "load": load,
            "created_at": first.created_at,
            "last_complete_step": None
            if final.last_complete_step is None
            else len(steps) - len(final.steps) + final.last_complete_step,
            "warnings": [],
        }
    )
    warnings.insert(0, f"resumed sweep: {len(parts)} linked runs joined into one: " + " + ".join(described))
    records = pd.concat(frames, ignore_index=True)
    return LoadedRun(requested, joined_manifest, records, telemetry, warnings, chain=[p.manifest.run_id for p in parts])


def load_one_run(path: Path | str) -> LoadedRun:
    """Read and validate one run directory, on its own (no resume chain)."""
    run_dir = RunDir(path)
    if not run_dir.path.is_dir():
        raise RunDirError(f"{run_dir.path}: no such directory; pass a run directory such as runs/<run-id>")
    manifest = run_dir.read_manifest()
    loaded = read_record_table(run_dir, manifest)
    warnings = list(loaded.warnings)
    expected = _expected_shards(manifest)
    if expected is not None and len(loaded.shards) < expected:
        warnings.append(
            f"{counted(len(loaded.shards), 'record shard')} found, {expected} expected (load.processes): "
            "a load process wrote nothing or its shard is missing; figures cover the shards present"
        )
    records = table_to_frame(loaded.table)
    if not len(records):
        warnings.append("the run has no request records")
    if loaded.duplicates:
        warnings.append(f"{counted(loaded.duplicates, 'duplicate request_id')} across shards; each counted once")
    records = merge_token_counts(records, run_dir.path / TOKEN_COUNTS, warnings)
    try:
        telemetry = run_dir.read_telemetry()
    except (ValidationError, ValueError, *GZIP_ERRORS) as error:  # a packed file damaged or cut short too
        telemetry = []
        kept = " and ".join(form.name for form in forms(run_dir.path / RunDir.TELEMETRY))  # the form(s) on disk
        warnings.append(f"{kept} unreadable, ignored ({str(error).splitlines()[0]})")
    warnings.extend(f"manifest: {text}" for text in manifest.warnings)
    return LoadedRun(run_dir.path, manifest, records, telemetry, warnings)


def token_methods(records: pd.DataFrame) -> pd.Categorical:
    """How each record's output tokens are counted, in the order figures take them: the server's
    final count (``completion_tokens``, else ``timings.predicted_n``) is "usage"; else
    ``streamed_tokens``, "tokenize" when a ``/tokenize`` count was merged and "per_chunk" otherwise;
    else "chunks".
    Built from integer codes: a million-record run stays quick."""
    usage = records["completion_tokens"].notna().to_numpy() | records["timings_predicted_n"].notna().to_numpy()
    streamed = records["streamed_tokens"].notna().to_numpy()
    tokenized = (records["tokens_counted_by"] == "tokenize").to_numpy()
    codes = np.select([usage, streamed & tokenized, streamed], [0, 2, 1], 3).astype(np.int8)
    return pd.Categorical.from_codes(codes, categories=TOKEN_METHODS)


def read_token_counts(path: Path, warnings: list[str]) -> dict[str, int]:
    """request_id -> /tokenize count from the run's ``token_counts.jsonl`` (``path``), plain or packed
    (:meth:`RunDir.read_token_counts`: a cut last line and a request counted twice are warnings, any other bad line
    a RunDirError naming file:line); empty when there is none."""
    counts = RunDir(path.parent).read_token_counts(warnings)
    return {request_id: count.streamed_tokens for request_id, count in counts.items()}


def merge_token_counts(records: pd.DataFrame, path: Path, warnings: list[str]) -> pd.DataFrame:
    """Records with ``token_counts.jsonl`` merged in and ``tokens_counted_by`` filled for every record.

    A /tokenize count stands in for a record's chunks only: a record that carries the server's
    usage or per-chunk counts keeps them (more exact), and a count for a request the records do not
    hold is ignored; both are counted warnings."""
    counts = read_token_counts(path, warnings)
    if counts:
        by_id = pd.Series(counts, dtype=np.float64)
        tokenize = records["request_id"].map(by_id).to_numpy()
        before = token_methods(records)
        exact = np.isin(np.asarray(before), ("usage", "per_chunk"))
        take = ~np.isnan(tokenize) & ~exact
        kept = int((~np.isnan(tokenize) & exact).sum())
        unknown = int((~by_id.index.isin(records["request_id"])).sum())
        records["streamed_tokens"] = np.where(take, tokenize, records["streamed_tokens"].to_numpy())
        methods = records["tokens_counted_by"].astype(object).where(~take, "tokenize")
        records["tokens_counted_by"] = methods
        if kept:
            warnings.append(
                f"{TOKEN_COUNTS}: {counted(kept, 'count')} for records that carry the server's usage or per-chunk "
                "counts; those are more exact and were kept"
            )
        if unknown:
            warnings.append(f"{TOKEN_COUNTS}: {counted(unknown, 'count')} for request_ids no record holds; ignored")
    records["tokens_counted_by"] = token_methods(records)
    return records
