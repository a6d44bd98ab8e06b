"""llama-bench's vocabulary: which serving flags it takes, and what its JSON says.

llama-bench measures raw prompt and generation speed with no server, sampling or HTTP in the
way: the ceiling a serving sweep is compared against. The same translation is used where it
runs on this machine (``llamacpp.llama_bench``) and on a rig (``provision.llama_bench``), so
both measure a profile at the same flags and report the same figures.
"""

from __future__ import annotations

from core.strict import Strict

# server flag -> llama-bench flag, for the settings that change raw speed; serving-only
# flags (slots, context size, sampling, the drafter) have no llama-bench meaning.
SERVER_TO_BENCH_FLAGS = {
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


def llama_bench_args(server_args: list[str]) -> list[str]:
    """A serving line's flags translated for llama-bench (``-fa on`` becomes ``-fa 1``)."""
    translated: list[str] = []
    for index, token in enumerate(server_args[:-1]):
        flag = SERVER_TO_BENCH_FLAGS.get(token)
        if flag is None:
            continue
        value = server_args[index + 1]
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


class BenchReport(Strict):
    """One llama-bench or llama-batched-bench run: its command, the summary figures and the tool's
    own rows; a rig's copy also names the profile and build it measured."""

    command: list[str]
    summary: dict[str, float]
    results: list[dict]
    profile: str | None = None
    build_key: str | None = None
    backend: str | None = None
    measured_at: str | None = None

    @classmethod
    def from_rows(cls, command: list[str], rows: list[dict], **facts: str | None) -> BenchReport:
        return cls(command=command, summary=summarize(rows), results=rows, **facts)

    def to_json(self) -> str:
        return self.model_dump_json(indent=1, exclude_none=True)
