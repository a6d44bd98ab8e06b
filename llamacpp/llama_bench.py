"""llama-bench on this machine: the raw prompt and generation speed a serving sweep is set against.

Fabric-free, so the local rig, ``rigbench autotune`` and the studies use it on a bare GPU
machine; which flags of a profile it takes comes from ``core.llama_bench``, as on a rig.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from core.errors import LlamaCppError
from core.llama_bench import BenchReport


def run_llama_bench(
    binary: Path | str,
    model: Path | str,
    args: list[str],
    prompt_tokens: int = 512,
    gen_tokens: int = 128,
    repetitions: int = 3,
    timeout: float = 1800,
) -> BenchReport:
    """Run llama-bench here at ``args`` (see ``core.llama_bench.llama_bench_args``)."""
    command = [
        str(binary),
        "-m",
        str(model),
        "-p",
        str(prompt_tokens),
        "-n",
        str(gen_tokens),
        "-r",
        str(repetitions),
        *args,
        "-o",
        "json",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    try:
        rows = json.loads(result.stdout)
    except ValueError:
        raise LlamaCppError(
            f"llama-bench exited {result.returncode} without JSON; last output:\n{result.stderr[-2000:]}"
        ) from None
    return BenchReport.from_rows(command, rows)
