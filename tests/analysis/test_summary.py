"""summary.json: written from its models, read back through them, and described by the committed JSON Schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from analysis.compare import StepComparison
from analysis.report import build_sections, write_report
from analysis.step import StepFigures
from analysis.summary import (
    SCHEMA_FILE,
    SUMMARY_VERSION,
    AppliedPrice,
    ComparisonSummary,
    RunSummary,
    Summary,
    read_summary,
    run_summary,
    schema_text,
)
from core.errors import AnalysisError
from rigbench.cli import app

RUNS = Path(__file__).resolve().parents[2] / "runs"
ONE_USER = RUNS / "gpu-h200-study-2026-11-30/runs/20261130T063437Z-gemma4-e2b-e2b-ctx0-c584"
COMMITTED = sorted(RUNS.glob("**/summary.json"))


@pytest.fixture
def written(tmp_path: Path, monkeypatch) -> Path:
    """A committed run re-rendered in a temporary folder: its summary.json as this code writes it."""
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))  # the bundled prices only
    copy = shutil.copytree(ONE_USER, tmp_path / ONE_USER.name, ignore=shutil.ignore_patterns("plots", "summary.json"))
    write_report([copy])
    return copy / "summary.json"


def edited(path: Path, edit) -> Path:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def test_a_written_summary_reads_back_to_the_same_figures(written: Path) -> None:
    summary = read_summary(written)
    assert summary.schema_version == SUMMARY_VERSION
    (run,) = summary.runs
    assert run.run_id == ONE_USER.name and run.status == "complete"
    step = run.steps[0]
    committed = json.loads((ONE_USER / "summary.json").read_text())["runs"][0]
    assert (step.users, step.requests, step.errors) == (1, committed["steps"][0]["requests"], {})
    assert step.aggregate_tok_s.value == pytest.approx(committed["steps"][0]["aggregate_tok_s"]["value"])
    assert step.aggregate_tok_s.low < step.aggregate_tok_s.value < step.aggregate_tok_s.high
    assert step.window_seconds == pytest.approx(step.window_end - step.window_start)
    # a run on one lent H200 is not priced unless --price-as says what it counts as
    assert run.prices == [] and run.run_cost == [] and run.usd_per_mtok == [{}]
    assert run.not_priced == committed["not_priced"]
    assert run.not_priced.startswith("not priced: ran on vm (NVIDIA H200), not a known instance type")
    # the text written is the models' own dump, so reading and writing again changes nothing
    rebuilt = Summary.model_validate_json(written.read_text())
    assert rebuilt == summary
    assert json.loads(written.read_text()) == summary.model_dump(mode="python")


def test_a_price_keeps_its_grounds_and_share_through_the_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    copy = shutil.copytree(ONE_USER, tmp_path / ONE_USER.name, ignore=shutil.ignore_patterns("plots", "summary.json"))
    write_report([copy], price_as=["p5en.48xlarge"])
    (run,) = read_summary(copy / "summary.json").runs
    share = "per-GPU share (1/8) of p5en.48xlarge on-demand (--price-as), measured on NVIDIA H200"
    (price,) = run.prices
    assert (price.label, price.basis, price.gpu_share, price.hypothetical) == (share, "price-as", 8, False)
    assert price.usd_per_hour == pytest.approx(63.296 / 8) and run.not_priced is None
    aggregate = run.steps[0].aggregate_tok_s.value
    assert run.cost(0, share).value == pytest.approx(63.296 / 8 / (aggregate * 3600) * 1e6)
    # a file written before prices said their grounds reads with them from ``hypothetical``
    older = price.model_dump(exclude={"basis", "gpu_share", "measured_on"}) | {"hypothetical": True}
    assert AppliedPrice.model_validate(older).label == "p5en.48xlarge on-demand (hypothetical)"


def test_the_written_file_validates_against_the_committed_json_schema(written: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    validator.validate(json.loads(written.read_text()))
    broken = json.loads(written.read_text())
    broken["runs"][0]["steps"][0]["ttft_s"]["p90"]["n"] = "many"
    assert [error.json_path for error in validator.iter_errors(broken)] == ["$.runs[0].steps[0].ttft_s.p90.n"]


def test_committed_schema_matches_models() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), "run `rigbench schema summary --write` and commit the result"


def test_rigbench_schema_prints_either_schema() -> None:
    summary = CliRunner().invoke(app, ["schema", "summary"])
    assert summary.exit_code == 0
    assert json.loads(summary.output)["title"] == "rigbench summary.json"
    run = CliRunner().invoke(app, ["schema"])
    assert run.exit_code == 0
    assert "manifest.json" in json.loads(run.output)["files"]
    assert CliRunner().invoke(app, ["schema", "plots"]).exit_code == 2  # the message: tests/reliability


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: path.parent.name.rsplit("-", 1)[-1])
def test_every_committed_summary_reads_and_validates(path: Path) -> None:
    """Older files of version 1 lack the step keys added since; they read as their defaults."""
    summary = read_summary(path)
    assert summary.runs and all(run.steps for run in summary.runs)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(json.loads(path.read_text()))


def test_summary_json_holds_the_figures_model_itself() -> None:
    """One step model: what analysis computes is what summary.json stores and reads back."""
    assert RunSummary.model_fields["steps"].annotation == list[StepFigures]
    assert ComparisonSummary.model_fields["steps"].annotation == list[StepComparison]


def test_a_figure_the_model_does_not_know_or_a_bad_value_is_refused_where_it_is_set(monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", "/nonexistent/prices.json")
    (section,) = build_sections([ONE_USER])
    step = section.figures.steps[0]
    with pytest.raises(ValidationError, match=r"roofline\n  Object has no attribute 'roofline'"):
        step.roofline = 0.4  # a new figure given to the step without the model
    with pytest.raises(ValidationError, match=r"server_counter_tok_s\n  Input should be a valid number"):
        step.server_counter_tok_s = "fast"
    assert run_summary(section).steps[0] == step


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["runs"][0]["steps"][0]["aggregate_tok_s"].update(value="fast"),
            "runs.0.steps.0.aggregate_tok_s.value: Input should be a valid number, unable to parse string as a number",
        ),
        (lambda d: d["runs"][0]["steps"][0].pop("requests"), "runs.0.steps.0.requests: Field required"),
        (lambda d: d["runs"][0].update(colour="red"), "runs.0.colour: unknown key"),
        (lambda d: d["runs"][0]["steps"][0]["client_tok_s"].update(spread=1), "runs.0.steps.0.client_tok_s.spread: "
         "unknown key"),
        (lambda d: d["runs"][0].update(status="paused"), "runs.0.status: Input should be 'running', 'complete', "
         "'interrupted' or 'failed'"),
    ],
    ids=["not a number", "missing key", "unknown key", "unknown key in a figure", "unknown status"],
)
def test_a_broken_summary_is_refused_naming_file_and_key(written: Path, edit, message: str) -> None:
    with pytest.raises(AnalysisError) as refused:
        read_summary(edited(written, edit))
    assert str(refused.value) == f"{written}: {message}"


def test_an_unknown_version_or_a_file_that_is_not_json_is_refused(written: Path, tmp_path: Path) -> None:
    edited(written, lambda d: d.update(schema_version=2))
    with pytest.raises(AnalysisError) as refused:
        read_summary(written)
    assert str(refused.value) == (
        f"{written}: schema_version 2 is not supported (this rigbench reads summary version 1); "
        "re-render it with `rigbench report RUN`"
    )
    written.write_text('{"runs": [')
    with pytest.raises(AnalysisError, match=r"summary.json: not valid JSON \(Expecting value"):
        read_summary(written)
    with pytest.raises(AnalysisError, match="no such file; `rigbench report RUN` writes summary.json"):
        read_summary(tmp_path / "none" / "summary.json")
