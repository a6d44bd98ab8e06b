"""llama-batched-bench: the card's decode ceiling for N sequences at once, no server in the way.

Why: llama-bench's tg128 is one sequence; the question for many users is how many tokens a
second the model can decode for 64 sequences decoding together, which llama-batched-bench
measures with the same kernels the server uses (no sampling, no HTTP, no scheduling). The
server's 64-user aggregate against this figure is how close serving gets to the card.
Its flags are llama.cpp's common ones, so a profile's server flags for the model's placement
and KV cache pass through as they are; serving-only flags are left out.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from core.errors import LlamaCppError
from core.llama_bench import BenchReport
from core.profile import split_flags
from core.wording import counted

# Server flags that change batched decoding speed and that llama-batched-bench also takes.
KEPT_FLAGS = frozenset({
    "-ngl", "--n-gpu-layers", "--gpu-layers", "-fa", "--flash-attn", "-ctk", "--cache-type-k", "-ctv",
    "--cache-type-v", "-t", "--threads", "-tb", "--threads-batch", "-b", "--batch-size", "-ub", "--ubatch-size",
    "-ot", "--override-tensor", "-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified",
})


def batched_bench_args(server_args: list[str]) -> list[str]:
    """The flags of a server line that llama-batched-bench understands and that change its speed."""
    return [token for group in split_flags(server_args) if group[0] in KEPT_FLAGS for token in group]


def _result_rows(output: str) -> list[dict]:
    rows = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            rows.append(json.loads(line))
    return rows


def run_batched_bench(
    binary: Path | str,
    model: Path | str,
    args: list[str],
    parallel: list[int],
    prompt_tokens: int = 128,
    gen_tokens: int = 128,
    timeout: float = 1800,
    attempts: int = 3,
) -> BenchReport:
    """Run llama-batched-bench; the summary is {"tg@N": tok/s, "pp@N": tok/s} per sequence count N.

    llama.cpp's logger writes from a thread that the tool does not wait for at exit, so result
    lines still queued are lost; when the compute threads take every core the logger rarely
    runs at all (seen on a 2-core machine with -t 2: 7 of 15 runs printed nothing; with -t 1,
    15 of 15 were whole). Leave a core free; a repeat of the first sequence count is asked for
    last, to be lost instead, and the run is repeated while a requested count has no line.
    """
    # Each sequence gets its own share of the context (no -kvu) or the shared pool (-kvu); a
    # test that does not fit is skipped without a word, so leave room, in whole 256-token pages.
    per_sequence = -(-(prompt_tokens + gen_tokens) // 256) * 256 + 256
    context = max(parallel) * per_sequence
    counts = [*parallel, parallel[0]]
    command = [
        str(binary), "-m", str(model), "-c", str(context), "-npp", str(prompt_tokens), "-ntg", str(gen_tokens),
        "-npl", ",".join(map(str, counts)), *args, "--output-format", "jsonl",
    ]
    for _ in range(attempts):
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise LlamaCppError(
                f"llama-batched-bench exited {result.returncode}; last output:\n{result.stderr[-2000:]}"
            )
        first = {}
        for row in _result_rows(result.stdout + "\n" + result.stderr):
            first.setdefault(row["pl"], row)
        missing = sorted(set(parallel) - set(first))
        if not missing:
            rows = [first[count] for count in parallel]
            summary = {}
            for row in rows:
                summary[f"tg@{row['pl']}"] = round(row["speed_tg"], 2)
                summary[f"pp@{row['pl']}"] = round(row["speed_pp"], 2)
            return BenchReport(command=command, summary=summary, results=rows)
    raise LlamaCppError(
        f"llama-batched-bench gave no result for {counted(missing, 'sequence')} in {attempts} attempts: its result "
        "lines come from llama.cpp's logger thread, which loses them when no core is free at exit (leave one: run it "
        f"alone, with -t below the core count), and a test that does not fit the context is skipped silently; "
        f"command: {' '.join(command)}"
    )
