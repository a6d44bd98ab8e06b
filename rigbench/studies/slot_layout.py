"""Does it matter *which* llama-server slots are busy? A probe on the real server.

Why: on the H200 the many-users line with one KV stream per slot (no ``-kvu``) was the best at
64 users of 64 slots but fell behind the unified cache at 8-32 users, where a decode call took
longer at 32 users than at 64. In the pinned llama.cpp a per-slot cache splits each batch
with ``split_equal(..., sequential=true)``: one micro-batch
holds only a run of *consecutive* sequence ids, so busy slots with gaps between them cost one
graph evaluation (one pass over the weights) per run. This probe pins N users to consecutive or
to spread-out slots (the request's ``id_slot``) under both caches and reads llama-server's own
decode-call counter, so the effect is measured, not inferred from the source.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

import httpx
from tabulate import tabulate

from core.errors import StudyError
from core.whole_files import write_whole
from core.wording import counted
from llamacpp.build import build_llama_cpp
from llamacpp.server import LocalServer
from llamacpp.synthetic_models import write_synthetic_model
from loadtest.telemetry import parse_metrics

DECODE_CALLS = "llamacpp:n_decode_total"
TOKENS = "llamacpp:tokens_predicted_total"


def slot_ids(layout: str, users: int, slots: int) -> list[int]:
    """Consecutive slots 0..N-1, or N slots spread evenly over all of them (no two adjacent)."""
    if layout == "consecutive":
        return list(range(users))
    if layout == "spread":
        stride = slots // users
        if stride < 2:
            raise ValueError(f"spread needs at least twice as many slots as users ({counted(slots, 'slot')}, "
                             f"{counted(users, 'user')})")
        return [i * stride for i in range(users)]
    raise ValueError(f"unknown layout {layout!r}: consecutive or spread")


def counters(client: httpx.Client) -> dict[str, float]:
    return parse_metrics(client.get("/metrics").raise_for_status().text)


def drive(base_url: str, slot: int, max_tokens: int, stop_at: float, errors: list[str]) -> None:
    """One user pinned to one slot: back-to-back completions until ``stop_at``."""
    body = {"prompt": "Tell me about slots.", "n_predict": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "cache_prompt": False, "id_slot": slot}
    with httpx.Client(base_url=base_url, timeout=60) as client:
        while time.monotonic() < stop_at:
            response = client.post("/completion", json=body)
            if response.status_code != 200:
                errors.append(f"slot {slot}: HTTP {response.status_code} {response.text[:200]}")
                return


def measure(server: LocalServer, slots: list[int], seconds: float, max_tokens: int, warmup: float) -> dict:
    """Users on the given slots for warmup + seconds; counters read over the last ``seconds``."""
    errors: list[str] = []
    stop_at = time.monotonic() + warmup + seconds
    threads = [threading.Thread(target=drive, args=(server.base_url, s, max_tokens, stop_at, errors)) for s in slots]
    for thread in threads:
        thread.start()
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        time.sleep(warmup)
        before, began = counters(client), time.monotonic()
        time.sleep(seconds)
        after, ended = counters(client), time.monotonic()
    for thread in threads:
        thread.join()
    if errors:
        raise StudyError("; ".join(errors))
    elapsed = ended - began
    calls = (after[DECODE_CALLS] - before[DECODE_CALLS]) / elapsed
    tokens = (after[TOKENS] - before[TOKENS]) / elapsed
    return {"decode_calls_per_s": calls, "tok_s": tokens, "ms_per_decode_call": 1000 / calls if calls else None}


def run_probe(out: Path, users: int, slots: int, seconds: float, repeats: int, preset: str,
              threads: int, max_tokens: int) -> dict:
    layouts = {layout: slot_ids(layout, users, slots) for layout in ("consecutive", "spread")}  # fail before building
    binary = Path(build_llama_cpp(backend="cpu").binary("llama-server"))
    model = write_synthetic_model(out / f"{preset}.gguf", preset=preset)
    per_slot_ctx = 512
    results: list[dict] = []
    for cache, extra in (("per-slot", []), ("unified", ["-kvu"])):
        args = ["-m", str(model), "--parallel", str(slots), "-c", str(per_slot_ctx * slots), "-t", str(threads),
                "--metrics", "--no-warmup", *extra]
        with LocalServer(binary, args, log_path=out / f"server-{cache}.log") as server:
            for repeat in range(repeats):  # layouts alternate so drift hits both alike
                for layout, ids in layouts.items():
                    figures = measure(server, ids, seconds, max_tokens, warmup=2.0)
                    results.append({"cache": cache, "layout": layout, "slots": ids, "repeat": repeat, **figures})
                    print(json.dumps(results[-1]), flush=True)
    return {"users": users, "parallel": slots, "preset": preset, "threads": threads, "seconds": seconds,
            "repeats": repeats, "max_tokens": max_tokens, "server": binary.name, "results": results}


def summary_rows(probe: dict) -> list[list[str]]:
    rows = []
    for cache in ("per-slot", "unified"):
        for layout in ("consecutive", "spread"):
            cells = [r for r in probe["results"] if r["cache"] == cache and r["layout"] == layout]
            if not cells:
                continue
            ms = [r["ms_per_decode_call"] for r in cells]
            tok = [r["tok_s"] for r in cells]
            rows.append([cache, layout, " ".join(map(str, cells[0]["slots"])),
                         f"{statistics.median(tok):,.0f} ({min(tok):,.0f}-{max(tok):,.0f})",
                         f"{statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f})"])
    return rows


def write_note(probe: dict, path: Path) -> None:
    table = tabulate(summary_rows(probe), ["KV cache", "busy slots", "slot ids", "tok/s median (range)",
                                           "ms per decode call median (range)"], "github")
    write_whole(path,
        f"# Which slots are busy matters with one KV stream per slot (CPU probe)\n\n"
        f"`rigbench study slot-layout --out {path}` on this 2-core VM: the real llama-server "
        f"(pinned CPU build), synthetic `{probe['preset']}` model, `--parallel {probe['parallel']}`, "
        f"{probe['users']} users pinned with `id_slot`, {probe['max_tokens']}-token replies back to back, "
        f"{probe['seconds']:.0f} s windows, "
        f"{probe['repeats']} repeats per cell; figures from the server's `n_decode_total` and "
        f"`tokens_predicted_total`.\n\n{table}\n\n"
        "With one KV stream per slot, llama.cpp puts only consecutive sequence ids in one micro-batch "
        "(`split_equal(n_ubatch, sequential=true)` in src/llama-kv-cache.cpp), so spread-out busy slots "
        "cost one graph evaluation each; the unified cache batches any set of slots at once.\n\n"
        f"Raw figures: `{path.with_suffix('.json').name}`.\n")
    write_whole(path.with_suffix(".json"), json.dumps(probe, indent=1) + "\n")


def summary_table(probe: dict) -> str:
    """The probe's cells as a short table for the terminal."""
    return tabulate(summary_rows(probe), ["cache", "layout", "slots", "tok/s", "ms/call"], "github")
