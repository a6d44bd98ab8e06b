"""report.html, steps.csv, requests.csv and the slide plots, from committed runs re-rendered.

The CSVs are read back with pandas and held against summary.json and against the records as
RunDir's own pydantic reader sees them; the page is parsed with the standard library's HTML
parser and held against report.md. The page in a real browser: test_report_browser.py.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.report import write_report
from analysis.report_html import render_html
from core.errors import AnalysisError, UsageError
from core.rundir import RunDir
from rigbench.cli import app

RUNS = Path(__file__).resolve().parents[2] / "runs"
DRAFTER = RUNS / "gpu-h200-study-2026-11-30/runs/20261130T062952Z-gemma4-e2b-e2b-drafter2-random-181f"
MANY = RUNS / "gpu-h200-profiles-2026-11-30/runs/20261130T084313Z-gemma4-e2b-many-e2b-drafter2-random-75e1"
RENDERED = ("plots", "report.md", "summary.json")
OKABE_ORANGE = (0xE6, 0x9F, 0x00)
MATPLOTLIB_BLUE = (0x1F, 0x77, 0xB4)


def copy_run(source: Path, folder: Path) -> Path:
    return shutil.copytree(source, folder / source.name, ignore=shutil.ignore_patterns(*RENDERED))


@pytest.fixture(scope="module")
def cross(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cross-run report of two committed runs in every format, priced from the bundled list only: each run
    was made on one H200, so as its share of a p5en.48xlarge (8x H200)."""
    folder = tmp_path_factory.mktemp("cross")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIGBENCH_PRICE_CACHE", str(folder / "no-price-cache.json"))
        runs = [copy_run(DRAFTER, folder), copy_run(MANY, folder)]
        report = write_report(runs, folder / "report", formats=("md", "html", "csv"), price_as=["p5en.48xlarge"])
    assert report == folder / "report" / "report.md"
    return report.parent


class Page(HTMLParser):
    """What a test needs of the page: headings, tables, images, scripts and references out of it."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.images: list[str] = []
        self.tables = 0
        self.scripts: list[str] = []
        self.references: list[str] = []
        self.metas: list[dict] = []
        self._heading: list[str] | None = None
        self._script: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag):
            self._heading = []
        elif tag == "img":
            self.images.append(attributes["src"])
        elif tag == "table":
            self.tables += 1
        elif tag == "script":
            self._script = []
        elif tag == "meta":
            self.metas.append(attributes)
        for name in ("src", "href"):
            if name in attributes and not attributes[name].startswith("data:"):
                self.references.append(attributes[name])

    def handle_endtag(self, tag: str) -> None:
        if re.fullmatch(r"h[1-6]", tag) and self._heading is not None:
            self.headings.append("".join(self._heading).strip())
            self._heading = None
        elif tag == "script" and self._script is not None:
            self.scripts.append("".join(self._script))
            self._script = None

    def handle_data(self, data: str) -> None:
        for part in (self._heading, self._script):
            if part is not None:
                part.append(data)


def markdown_headings(text: str) -> list[str]:
    return [line.lstrip("#").strip().replace("`", "") for line in text.splitlines() if re.match(r"#{1,6} ", line)]


def png_pixels(data: bytes) -> np.ndarray:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(io.BytesIO(data), format="png")


def has_colour(pixels: np.ndarray, rgb: tuple[int, int, int]) -> bool:
    target = np.array(rgb) / 255
    return bool((np.abs(pixels[..., :3] - target).max(axis=-1) < 0.02).sum() > 50)


# ---------------------------------------------------------------- report.html


def test_the_page_has_every_section_of_report_md_and_its_plots_inside(cross: Path) -> None:
    markdown = (cross / "report.md").read_text()
    page = Page()
    page.feed((cross / "report.html").read_text())

    assert page.headings == markdown_headings(markdown)
    assert "Comparison: B = " in " ".join(page.headings)  # the cross-run section came through
    assert page.tables == len(re.findall(r"^\|[-:|]+\|$", markdown, flags=re.MULTILINE))
    assert page.references == []  # nothing to fetch: no network, no sibling file
    policy = next(m["content"] for m in page.metas if m.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in policy
    assert any("aria-sort" in script for script in page.scripts)

    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert len(page.images) == len(linked) == 5  # the overview and four plots (both runs step through users)
    for src, link in zip(page.images, linked, strict=True):
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        embedded = base64.b64decode(src[len(prefix):], validate=True)
        assert embedded == (cross / link).read_bytes()
        assert png_pixels(embedded).shape[1] >= 1200


def test_markup_in_the_report_text_is_escaped(tmp_path: Path) -> None:
    page = render_html("# a <b>bold</b> claim\n\n<script>alert(1)</script>\n", tmp_path)
    assert "<title>a &lt;b&gt;bold&lt;/b&gt; claim</title>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_plot_the_page_cannot_find_is_named(tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match=r"plots/gone\.png: the report shows this plot but the file is missing"):
        render_html("# r\n\n![gone](plots/gone.png)\n", tmp_path)


# ---------------------------------------------------------------- plots


def test_plots_are_slide_sized_small_and_okabe_ito(cross: Path) -> None:
    plots = cross / "plots"
    names = sorted(path.stem for path in plots.glob("*.png"))
    assert names == ["aggregate_tok_s", "overview", "per_user_tok_s", "ttft_p90", "usd_per_mtok"]
    for path in plots.glob("*.png"):
        pixels = png_pixels(path.read_bytes())
        height, width = pixels.shape[:2]
        if path.stem.startswith("overview"):
            assert (width, height) == (1800, 1200)
            assert path.stat().st_size < 150_000
        else:
            assert (width, height) == (1200, 720)
            assert path.stat().st_size < 60_000
        assert not has_colour(pixels, MATPLOTLIB_BLUE), f"{path.name}: matplotlib's default blue, not Okabe-Ito"
    # the second run's line is Okabe-Ito orange
    assert has_colour(png_pixels((plots / "aggregate_tok_s.png").read_bytes()), OKABE_ORANGE)


# ---------------------------------------------------------------- steps.csv and requests.csv


def estimates(step: dict) -> dict[str, dict]:
    """summary.json's estimates of a step by their steps.csv figure name."""
    found = {}
    for key, value in step.items():
        if isinstance(value, dict) and "method" in value:
            found[key] = value
        elif isinstance(value, dict):
            found.update({f"{key}_{k}": v for k, v in value.items() if isinstance(v, dict) and "method" in v})
    return found


def test_steps_csv_holds_every_figure_of_summary_json(cross: Path) -> None:
    steps = pd.read_csv(cross / "steps.csv")
    assert list(steps.columns[:6]) == ["run_id", "label", "step", "users", "rate", "context_tokens"]
    summary = json.loads((cross / "summary.json").read_text())
    assert sorted(steps["run_id"].unique()) == sorted(run["run_id"] for run in summary["runs"])
    checked = 0
    for run in summary["runs"]:
        for step, costs in zip(run["steps"], run["usd_per_mtok"], strict=True):
            rows = steps[(steps["run_id"] == run["run_id"]) & (steps["step"] == step["index"])]
            assert set(rows["users"]) == {step["users"]} and set(rows["label"]) == {run["label"]}
            by_figure = rows[rows["price"].isna()].set_index("figure")
            for name, estimate in estimates(step).items():
                row = by_figure.loc[name]
                for key in ("value", "low", "high"):
                    if estimate[key] is None:
                        assert pd.isna(row[key]), f"{name}.{key}"
                    else:
                        assert row[key] == estimate[key], f"{run['run_id']} step {step['index']} {name}.{key}"
                assert row["n"] == estimate["n"] and row["method"] == estimate["method"]
                checked += 1
            for name in ("requests", "ok", "window_seconds", "request_rate", "output_tokens"):
                assert by_figure.loc[name, "value"] == step[name]
                assert pd.isna(by_figure.loc[name, "n"])
            for kind, count in step["errors"].items():
                assert by_figure.loc[f"errors_{kind}", "value"] == count
            priced = rows[rows["figure"] == "usd_per_mtok"].set_index("price")
            assert sorted(priced.index) == sorted(costs)
            for label, cost in costs.items():
                assert priced.loc[label, "value"] == cost["value"]
                assert priced.loc[label, "high"] == cost["high"]
    assert checked > 40


def test_requests_csv_is_every_record_of_every_run(cross: Path) -> None:
    requests = pd.read_csv(cross / "requests.csv", dtype={"request_id": str})
    for source in (DRAFTER, MANY):
        records = RunDir(source).read_records()
        rows = requests[requests["run_id"] == source.name].set_index("request_id")
        assert len(rows) == len(records) > 0
        for record in records:
            row = rows.loc[record.request_id]
            assert row["t_start"] == record.t_start and row["t_end"] == record.t_end
            assert row["step"] == record.step and row["phase"] == record.phase and row["category"] == record.category
            if record.completion_tokens is None:
                assert pd.isna(row["completion_tokens"])
            else:
                assert row["completion_tokens"] == record.completion_tokens
            predicted = record.timings.predicted_n if record.timings else None
            if predicted is None:
                assert pd.isna(row["timings_predicted_n"])
            else:
                assert row["timings_predicted_n"] == predicted
    text = (cross / "requests.csv").read_text().splitlines()
    header = text[0].split(",")
    assert header[:4] == ["run_id", "label", "request_id", "shard"]
    assert "timings_draft_n_accepted" in header and "timings" not in header
    assert re.search(r",200,", text[1])  # whole numbers stay whole (http_status), not 200.0


# ---------------------------------------------------------------- the command line


def test_cli_writes_the_formats_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    run = copy_run(MANY, tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--format", "html, csv"])
    assert result.exit_code == 0, result.output
    assert result.output.split() == [str(out / name) for name in ("report.html", "steps.csv", "requests.csv")]
    assert not (out / "report.md").exists() and (out / "summary.json").exists()

    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--format", "all"])
    assert result.exit_code == 0, result.output
    assert [Path(line).name for line in result.output.split()] == [
        "report.md", "report.html", "steps.csv", "requests.csv"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("md,pdf", "--format: cannot read 'md,pdf': 'pdf' is not one of md, html, csv, all"),
        ("md,,html", "--format: cannot read 'md,,html': expected values separated by commas"),
        ("md,md", "--format: md is given twice"),
    ],
)
def test_a_bad_format_is_one_line_and_writes_nothing(tmp_path: Path, value: str, message: str) -> None:
    run = copy_run(MANY, tmp_path)
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, "-c", "from rigbench.cli import main; main()", "report", str(run), "--out", str(out),
         "--format", value],
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().count("\n") == 0 and "Traceback" not in completed.stderr
    assert message in completed.stderr
    assert not out.exists()


def test_write_report_refuses_an_unknown_format_before_writing(tmp_path: Path) -> None:
    run = copy_run(MANY, tmp_path)
    with pytest.raises(UsageError, match="report formats: found pdf; expected one or more of md, html, csv"):
        write_report([run], tmp_path / "out", formats=("pdf",))
    assert not (tmp_path / "out").exists()
