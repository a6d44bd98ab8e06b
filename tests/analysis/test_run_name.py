"""Runs named by model, machine and arm: in plot legends, sheet titles and the headline across runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis import plots
from analysis.report import build_sections
from analysis.run_name import run_name, run_names, short_names
from core.rundir import RunDir

RUNS = Path(__file__).resolve().parents[2] / "runs"
H200 = RUNS / "gpu-h200-study-2026-11-30/runs/20261130T062207Z-gemma4-e2b-e2b-best-0bae"
CPU = RUNS / "real-gemma-cpu-2026-12-02/runs/20261202T191647Z-gemma3-270m-patched-draft0-977d"
SLOTS = RUNS / "gpu-h200-slots-2026-12-01/runs"


def manifest(path: Path):
    return RunDir(path).read_manifest()


def test_a_run_is_named_by_its_model_machine_and_arm() -> None:
    assert run_name(manifest(H200)) == "e2b-q4_0 (synthetic) · NVIDIA H200 · e2b-best"
    cpu = manifest(CPU)
    assert run_name(cpu) == f"gemma-3-270m-q4_k_m · CPU ({cpu.rig.machine.cpu_cores} cores) · draft0"


def test_runs_sharing_a_name_keep_their_id_suffix_and_a_sentence_says_the_shared_part_once(kit) -> None:
    same = [manifest(H200), manifest(H200).model_copy(update={"run_id": "20261130T000000Z-x-9f9f"})]
    assert run_names(same) == ["e2b-q4_0 (synthetic) · NVIDIA H200 · e2b-best · 0bae",
                               "e2b-q4_0 (synthetic) · NVIDIA H200 · e2b-best · 9f9f"]
    shared, names = short_names([manifest(path) for path in sorted(SLOTS.iterdir())])
    assert shared == "e2b-q4_0 (synthetic) on NVIDIA H200"
    assert names == ["e2b-per-slot-kv", "e2b-per-slot-kv-patched", "e2b-per-slot-kv-pinned", "e2b-unified-kv",
                     "e2b-unified-kv-patched"]
    bare, other = (kit.manifest(run_id, [kit.window()]) for run_id in ("bare", "other"))
    assert run_name(bare) == "tiny · CPU"  # no model file, no GPU, no arm: the profile and the CPU
    assert short_names([bare, other]) == ("tiny on CPU", ["run bare", "run other"])


@pytest.mark.parametrize("sources", [[H200], sorted(SLOTS.iterdir())[:2]], ids=["one run", "two runs"])
def test_every_plot_legend_names_the_model_machine_and_arm(sources: list[Path], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    runs = [shutil.copytree(source, tmp_path / source.name, ignore=shutil.ignore_patterns("plots"))
            for source in sources]
    sections = build_sections(runs)
    drawn: dict[str, list[str]] = {}

    def keep_legend(figure, path: Path) -> None:
        drawn[path.name] = [text.get_text() for legend in figure.legends for text in legend.get_texts()]
        drawn[path.name] += [figure._suptitle.get_text()] if figure._suptitle is not None else []
        plots.plt.close(figure)

    monkeypatch.setattr(plots, "_save", keep_legend)
    plots.write_plots(sections, tmp_path / "plots")
    assert sorted(drawn) == ["aggregate_tok_s.png", "overview.png", "per_user_tok_s.png", "ttft_p90.png"]
    arms = [manifest(run).load.arm for run in runs]
    for texts in drawn.values():
        legend = texts[: len(runs)]
        assert legend == [f"e2b-q4_0 (synthetic) · NVIDIA H200 · {arm}" for arm in arms], texts
        assert not any("local" in text for text in texts)
    if len(runs) == 1:
        assert drawn["overview.png"][-1] == f"rigbench: {drawn['overview.png'][0]}"
