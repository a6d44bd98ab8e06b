"""Step ``bench``: llama-bench pp512/tg128 at the profile's settings, kept as JSON on the rig.

llama-bench measures the model's raw prompt and generation speed with no server, sampling
or HTTP in the way: the ceiling the load sweep is compared against. Which of the profile's
server flags it takes (GPU layers, flash attention, KV cache types, threads, batch sizes) is
``core.llama_bench``'s rule, the same as on a local machine.
"""

from __future__ import annotations

import json
import shlex
import time

from fabric import Connection

from core.errors import ProvisionError
from core.llama_bench import BenchReport, llama_bench_args
from core.profile import RigProfile
from provision.build import read_build_manifest
from provision.connection import rig_step, run, upload_text
from provision.download import model_paths
from provision.rig_paths import RigPaths

BENCH_TIMEOUT_S = 1800


@rig_step("bench")
def bench(c: Connection, profile: RigProfile, paths: RigPaths | None = None, prompt_tokens: int = 512,
          gen_tokens: int = 128, repetitions: int = 5, timeout: int = BENCH_TIMEOUT_S) -> tuple[BenchReport, str]:
    """Run llama-bench on the rig; save the report there and return it with its path on the rig."""
    paths = paths or RigPaths()
    manifest = read_build_manifest(c, paths)
    binary = manifest.binaries.get("llama-bench")
    if not binary:
        raise ProvisionError("bench: the build has no llama-bench; rebuild with the default targets")
    model, _ = model_paths(profile, paths)
    if not run(c, f"test -s {shlex.quote(model)}", warn=True).ok:
        raise ProvisionError(f"bench: model file {model} is missing on the rig; run the download step first")
    command = [binary, "-m", model, "-p", str(prompt_tokens), "-n", str(gen_tokens), "-r", str(repetitions),
               *llama_bench_args(profile.server.args), "-o", "json"]
    print(f"[bench] {' '.join(shlex.quote(part) for part in command)}", flush=True)
    result = run(c, " ".join(shlex.quote(part) for part in command), timeout=timeout, hide="stdout")
    try:
        rows = json.loads(result.stdout)
    except ValueError:
        raise ProvisionError(f"bench: llama-bench printed no JSON; it printed:\n{result.stdout[-2000:]}") from None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    report = BenchReport.from_rows(command, rows, profile=profile.name, build_key=manifest.key,
                                   backend=manifest.backend, measured_at=stamp)
    path = f"{paths.results}/bench/bench-{profile.name}-{stamp}.json"
    upload_text(c, report.to_json(), path)
    print(f"[bench] {report.summary} saved to {path}", flush=True)
    return report, path
