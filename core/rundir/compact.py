"""Make a finished run directory small enough to commit, without losing what analysis reads.

Why: runs/ is committed, so records, telemetry, hardware samples, timelines, token counts and server logs are
stored gzipped (the readers open ``.jsonl.gz`` and ``.jsonl`` alike, ``core.rundir.jsonl``), the 64 KiB space
reserve kept for disk-full errors is dropped, and nothing that a report, ``rigbench check`` or a re-analysis needs
is removed. A run still ``running`` is refused: its load processes, telemetry poller and hardware sampler may be
appending to the plain files.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from core.errors import RunDirError
from core.rundir import RunDir, hardware
from core.rundir.quality_files import EVAL_MANIFEST, LADDER_MANIFEST
from core.whole_files import whole_file

# Files gzipped in place (name -> name + ".gz"); records shards are matched separately. Replicas log one file
# each, and the MPS control daemon its own in the run's mps/ folder.
LOG_FILES = ("llama-server.log", "locust.log")
LOG_PATTERNS = ("llama-server-*.log", "mps/*.log")
QUALITY_FILES = ("answers.jsonl", "server.log")  # in each eval folder
# What the run's processes sampled or wrote beside its records, in plain while it ran: telemetry, hardware samples,
# the chunks' arrival times (--timeline) and the cut requests' /tokenize counts.
SAMPLE_PATTERNS = (RunDir.TELEMETRY, f"{hardware.FOLDER}/*.jsonl", f"{RunDir.TIMELINES}/*.jsonl", RunDir.TOKEN_COUNTS)


def gzip_file(path: Path) -> Path:
    """``path`` -> ``path.gz`` (mtime kept, written whole or not at all, original removed once it is)."""
    target = path.with_name(path.name + ".gz")
    with (open(path, "rb") as source, whole_file(target, "wb") as raw,
          gzip.GzipFile(path.name, "wb", fileobj=raw, mtime=int(path.stat().st_mtime)) as sink):
        shutil.copyfileobj(source, sink)
    path.unlink()
    return target


def refuse_clashes(folder: Path, clashes: list[str]) -> None:
    """Packed files already there are never overwritten: checked before anything is written, so a refused folder
    is left exactly as it was."""
    if clashes:
        raise RunDirError(f"{folder}: {', '.join(clashes)} already {'exists' if len(clashes) == 1 else 'exist'}; "
                          "move them aside, nothing was changed")


def compact_quality(folder: Path) -> list[Path]:
    """A ladder's or an eval's folder: every eval in it (one per rung, per arm, or the folder itself) keeps
    its answers gzipped and its server log gzipped; manifests and question files stay as they are."""
    manifest = folder / LADDER_MANIFEST if (folder / LADDER_MANIFEST).exists() else folder / EVAL_MANIFEST
    status = json.loads(manifest.read_text()).get("status")
    if status == "running":
        raise RunDirError(f"{folder}: status is 'running'; compact it only after it has ended")
    evals = sorted({path.parent for path in folder.rglob(EVAL_MANIFEST)})
    sources = [eval_folder / name for eval_folder in evals for name in QUALITY_FILES if (eval_folder / name).exists()]
    clashes = [str(p.relative_to(folder)) + ".gz" for p in sources if p.with_name(p.name + ".gz").exists()]
    refuse_clashes(folder, clashes)
    return [gzip_file(source) for source in sources]


def compact_run(path: Path | str) -> list[Path]:
    """Compact one run directory (or a ladder's or an eval's folder) in place; returns the files it wrote."""
    if (Path(path) / LADDER_MANIFEST).exists() or (Path(path) / EVAL_MANIFEST).exists():
        return compact_quality(Path(path))
    run = RunDir(Path(path))
    manifest = run.read_manifest()  # validates: not a run directory -> a clear error
    if manifest.status == "running":
        raise RunDirError(f"{run.path}: status is 'running'; compact a run only after it has ended")
    sources = sorted((run.path / "records").glob("*.jsonl"))
    sources += [run.path / name for name in LOG_FILES if (run.path / name).exists()]
    sources += sorted(path for pattern in LOG_PATTERNS for path in run.path.glob(pattern))
    sources += sorted(path for pattern in SAMPLE_PATTERNS for path in run.path.glob(pattern))
    clashes = [p.name + ".gz" for p in sources if p.with_name(p.name + ".gz").exists()]
    refuse_clashes(run.path, clashes)
    written = [gzip_file(source) for source in sources]
    run.release_space_reserve()
    return written
