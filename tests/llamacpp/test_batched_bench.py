"""llama-batched-bench: flags carried over from a serving line, and a real run on the tiny model."""

from __future__ import annotations

import pytest

from core.errors import LlamaCppError
from core.profile import load_profile
from llamacpp.batched_bench import batched_bench_args, run_batched_bench


def test_serving_only_flags_are_left_out() -> None:
    args = load_profile("gemma4-e2b-many").server.args
    kept = batched_bench_args(args)
    assert kept[:2] == ["-ngl", "99"] and "-ot" in kept and "--parallel" not in kept
    assert "--backend-sampling" not in kept and "--metrics" not in kept and "-c" not in kept
    assert batched_bench_args(["--parallel", "8", "-kvu", "-fa", "on"]) == ["-kvu", "-fa", "on"]


@pytest.mark.timing  # llama-batched-bench prints its results only with a core free
@pytest.mark.integration
def test_batched_bench_reports_decode_speed_per_sequence_count(llama_build, tiny_model) -> None:
    # -t 1 leaves the second core to llama.cpp's logger thread (see run_batched_bench)
    report = run_batched_bench(llama_build.binary("llama-batched-bench"), tiny_model, ["-t", "1"], [1, 4],
                               prompt_tokens=16, gen_tokens=8)
    assert set(report.summary) == {"tg@1", "pp@1", "tg@4", "pp@4"}
    assert all(value > 0 for value in report.summary.values())
    assert [row["pl"] for row in report.results] == [1, 4]


@pytest.mark.integration
def test_batched_bench_failure_is_a_clear_error(llama_build, tmp_path) -> None:
    with pytest.raises(LlamaCppError, match="llama-batched-bench exited"):
        run_batched_bench(llama_build.binary("llama-batched-bench"), tmp_path / "missing.gguf", [], [1])
