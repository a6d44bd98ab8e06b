"""llama-bench's vocabulary: a serving line's flags for llama-bench, and its JSON summarised."""

from __future__ import annotations

from core.llama_bench import BenchReport, llama_bench_args, summarize
from core.profile import RigProfile, load_profile


def test_the_serving_line_is_translated_for_llama_bench() -> None:
    profile = load_profile("gemma4-e2b")
    assert llama_bench_args(profile.server.args) == [
        "-ngl", "99", "-ctk", "f16", "-ctv", "f16", "-fa", "1", "-t", "4", "-ot", "per_layer_token_embd\\.weight=CUDA0"
    ]
    on = RigProfile.model_validate({"name": "x", "model": {"repo": "a/b", "file": "c.gguf"},
                                    "server": {"args": "-fa on --parallel 4"}})
    assert llama_bench_args(on.server.args) == ["-fa", "1"]
    assert llama_bench_args(["-fa", "auto", "-c", "4096"]) == [], "auto and serving-only flags are left out"


def test_summary_names_pp_tg_and_the_depth() -> None:
    rows = [{"n_prompt": 512, "n_gen": 0, "avg_ts": 1234.567}, {"n_prompt": 0, "n_gen": 128, "avg_ts": 55.555},
            {"n_prompt": 0, "n_gen": 128, "n_depth": 32768, "avg_ts": 40.0}]
    assert summarize(rows) == {"pp512": 1234.57, "tg128": 55.55, "tg128@d32768": 40.0}


def test_a_report_keeps_what_it_was_given_and_drops_what_it_was_not() -> None:
    rows = [{"n_prompt": 0, "n_gen": 16, "avg_ts": 10.0}]
    local = BenchReport.from_rows(["llama-bench", "-o", "json"], rows)
    assert local.to_json() == BenchReport.model_validate_json(local.to_json()).to_json()
    assert '"profile"' not in local.to_json() and local.summary == {"tg16": 10.0}
    rig = BenchReport.from_rows(["llama-bench"], rows, profile="tiny", build_key="k", backend="cpu")
    assert BenchReport.model_validate_json(rig.to_json()).profile == "tiny"
