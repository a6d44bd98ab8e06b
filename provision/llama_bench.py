"""llama-bench on this machine, and the translation of a profile's flags for it.

llama-bench measures raw prompt and generation speed with no server, sampling or HTTP in the
way: the ceiling a serving sweep is compared against. The profile's server flags that
llama-bench also understands (GPU layers, flash attention, KV cache types, threads, batch
sizes, tensor overrides) are passed on; serving-only flags are left out. Fabric-free, so the
local rig and ``rigbench autotune`` use it on a bare GPU machine; ``provision.bench`` runs the
same translation on a remote rig.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from rigbench.errors import ProvisionError
from rigbench.profile import RigProfile

# server flag -> llama-bench flag, for the settings that change raw speed.
BENCH_FLAGS = {
    "-ngl": "-ngl",
    "--n-gpu-layers": "-ngl",
    "--gpu-layers": "-ngl",
    "-fa": "-fa",
    "--flash-attn": "-fa",
    "-ctk": "-ctk",
    "--cache-type-k": "-ctk",
    "-ctv": "-ctv",
    "--cache-type-v": "-ctv",
    "-t": "-t",
    "--threads": "-t",
    "-b": "-b",
    "--batch-size": "-b",
    "-ub": "-ub",
    "--ubatch-size": "-ub",
    "-ot": "-ot",
    "--override-tensor": "-ot",
}
FLASH_ATTN_VALUES = {"on": "1", "off": "0", "1": "1", "0": "0"}


def bench_args(profile: RigProfile) -> list[str]:
    """The profile's server flags translated for llama-bench (``-fa on`` becomes ``-fa 1``)."""
    args = profile.server.args
    translated: list[str] = []
    for index, token in enumerate(args[:-1]):
        flag = BENCH_FLAGS.get(token)
        if flag is None:
            continue
        value = args[index + 1]
        if flag == "-fa":
            if value not in FLASH_ATTN_VALUES:
                continue  # "auto": llama-bench's own default
            value = FLASH_ATTN_VALUES[value]
        translated += [flag, value]
    return translated


def summarize(results: list[dict]) -> dict[str, float]:
    """{"pp512": tok/s, "tg128": tok/s} from llama-bench's JSON rows; a test run at a context
    depth (``-d``) gets the depth in its key, ``tg128@d32768``."""
    summary = {}
    for row in results:
        depth = f"@d{row['n_depth']}" if row.get("n_depth") else ""
        if row.get("n_prompt") and not row.get("n_gen"):
            summary[f"pp{row['n_prompt']}{depth}"] = round(row["avg_ts"], 2)
        elif row.get("n_gen") and not row.get("n_prompt"):
            summary[f"tg{row['n_gen']}{depth}"] = round(row["avg_ts"], 2)
    return summary


def run_llama_bench(
    binary: Path | str,
    model: Path | str,
    args: list[str],
    prompt_tokens: int = 512,
    gen_tokens: int = 128,
    repetitions: int = 3,
    timeout: float = 1800,
) -> dict:
    """Run llama-bench here; return {command, summary, results}."""
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
        raise ProvisionError(
            f"llama-bench exited {result.returncode} without JSON; last output:\n{result.stderr[-2000:]}"
        ) from None
    return {"command": command, "summary": summarize(rows), "results": rows}
