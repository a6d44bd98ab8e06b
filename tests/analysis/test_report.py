"""report.md, summary.json and plots, end to end from run directories written by RunDir."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from analysis.headline import NOT_PRICED as GLANCE_NOT_PRICED
from analysis.report import write_report
from rigbench.cli import app


def sweep_run(kit, run_id: str, speed: float, users=(1, 2, 4), categories=("code", "chat", "story"), code=1.3):
    """A three-step sweep: each user streams back-to-back requests; tok/s falls with users."""
    t0, steps, records = kit.T0, [], []
    for index, count in enumerate(users):
        start = t0 + index * 100
        steps.append(kit.window(index, count, start=start + 10, end=start + 70))
        per_user = speed / count
        for user in range(count):
            clock = start + user * 0.1
            number = 0
            while clock < start + 80:
                phase = "measure" if clock >= start + 10 else "warmup"
                category = categories[number % len(categories)]
                rate = per_user * (code if category == "code" else 1.0)
                decode = 20 / rate
                records.append(
                    kit.record(
                        f"{index}-{user}-{number}",
                        step=index,
                        users=count,
                        phase=phase,
                        category=category,
                        t_start=clock,
                        ttft=0.1 * count,
                        decode=decode,
                        tokens=21,
                        server_tok_s=rate,
                    )
                )
                clock += 0.1 * count + decode + 0.02
                number += 1
    return kit.make_run(run_id, steps, {"p0": records})


def test_single_run_report_opens_with_the_headline_then_the_narrow_table_then_the_wide_one(kit):
    path = sweep_run(kit, "base", speed=40.0)
    report = write_report([path])
    assert report == path / "report.md"
    text = report.read_text()
    lines = text.splitlines()
    assert lines[:3] == ["# rigbench report: base", "", "## At a glance"]
    assert lines[4].startswith("Best aggregate output ")
    tables = [i for i, line in enumerate(lines) if line.startswith("|") and not lines[i - 1].startswith("|")]
    narrow, wide = (lines[i] for i in tables[:2])
    assert tables[0] < 16
    assert [c.strip() for c in narrow.strip("|").split("|")] == [
        "users", "aggregate tok/s ↑", "median per-user tok/s ↑", "TTFT p90 s ↓"]
    for column in ("users", "requests", "errors ↓", "aggregate tok/s ↑", "median per-user tok/s (client) ↑",
                   "TTFT p50 s ↓", "TTFT p90 s ↓"):
        assert column in wide
    for start in tables[:2]:
        assert [line.split("|")[1].strip() for line in lines[start + 2 : start + 5]] == ["1", "2", "4"]
    assert "### Warnings (0)" in text
    for name in ("aggregate_tok_s", "per_user_tok_s", "ttft_p90"):
        png = path / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size < 100_000

    summary = json.loads((path / "summary.json").read_text())
    one_user = summary["runs"][0]["steps"][0]
    # one user at 40 tok/s on code x1.3, chat and story x1: aggregate is below the per-user mean because of TTFT gaps
    assert one_user["users"] == 1
    assert 30 < one_user["aggregate_tok_s"]["value"] < 45
    assert one_user["server_tok_s"]["n"] == one_user["ok"]


NOT_PRICED = (
    "not priced: ran on an unnamed machine (no GPU recorded), not a known instance type; "
    "--price-as TYPE prices it as one, --usd-per-hour USD at a given hourly price"
)


def test_a_local_machine_that_is_no_known_type_is_not_priced_and_says_so_once(kit):
    """It used to be priced as a g6.xlarge (labelled hypothetical); now no $ figure at all, one line why."""
    path = sweep_run(kit, "base", speed=40.0)
    text = write_report([path]).read_text()
    cost = text.split("### Cost", 1)[1].split("###", 1)[0]
    assert cost.strip() == "Not priced: ran on an unnamed machine (no GPU recorded), not a known instance type; " \
        "--price-as TYPE prices it as one, --usd-per-hour USD at a given hourly price."
    assert text.lower().count("not priced") == 2  # the Cost section says why, the glance says how to price it
    assert GLANCE_NOT_PRICED in text.split("## local", 1)[0]
    assert not re.search(r"\$\s?\d", text) and "| $/Mtok" not in text and "g6.xlarge" not in text
    assert "### Warnings (0)" in text  # said once, in the cost section: not a warning to count
    assert not (path / "plots" / "usd_per_mtok.png").exists()  # no $ plot, rather than an empty one
    run = json.loads((path / "summary.json").read_text())["runs"][0]
    assert (run["prices"], run["run_cost"], run["not_priced"]) == ([], [], NOT_PRICED)
    assert all(costs == {} for costs in run["usd_per_mtok"])


def test_price_as_prices_a_local_run_as_the_type_it_counts_as(kit):
    path = sweep_run(kit, "base", speed=40.0)
    text = write_report([path], price_as=["g6.xlarge"]).read_text()
    assert "g6.xlarge on-demand (--price-as)" in text and "HYPOTHETICAL" not in text
    assert "because --price-as says so" in text and "bundled snapshot" in text and "not priced" not in text
    assert "priced as g6.xlarge (1x NVIDIA L4) as --price-as says, though it ran on an unnamed machine" in text
    assert (path / "plots" / "usd_per_mtok.png").stat().st_size < 100_000
    run = json.loads((path / "summary.json").read_text())["runs"][0]
    assert [(p["basis"], p["hypothetical"], p["gpu_share"]) for p in run["prices"]] == [("price-as", False, 1)] * 2
    assert run["run_cost"][0]["seconds"] == pytest.approx(3600) and run["not_priced"] is None


def test_two_runs_give_a_cross_run_report_with_paired_ratios(kit):
    base = sweep_run(kit, "base", speed=40.0)
    faster = sweep_run(kit, "drafter", speed=60.0, code=2.0)
    report = write_report([base, faster])
    assert report.parent.parent.name == "reports"
    text = report.read_text()
    assert "## Comparison: B = local drafter against A = local base" in text
    summary = json.loads((report.parent / "summary.json").read_text())
    steps = summary["comparisons"][0]["steps"]
    # per category B/A: code 60 * 2.0 / (40 * 1.3), chat and story 60 / 40
    code = 60 * 2.0 / (40 * 1.3)
    for step in steps:
        assert step["per_category"]["code"]["value"] == pytest.approx(code, rel=1e-6)
        assert step["per_category"]["story"]["value"] == pytest.approx(1.5, rel=1e-6)
        assert step["per_user_ratio"]["value"] == pytest.approx((code * 1.5 * 1.5) ** (1 / 3), rel=1e-6)
        ratio = step["per_user_ratio"]
        assert ratio["low"] == pytest.approx(ratio["value"]) == ratio["high"]  # no spread within categories
    assert "code B/A" in text
    assert (report.parent / "plots" / "aggregate_tok_s.png").exists()


def test_cli_report_compare_plan_prices(kit, tmp_path, monkeypatch):
    base = sweep_run(kit, "base", speed=40.0)
    faster = sweep_run(kit, "drafter", speed=60.0)
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(base), "--out", str(tmp_path / "out"), "--price-as", "g6.2xlarge"])
    assert result.exit_code == 0, result.output
    assert "g6.2xlarge spot (--price-as)" in (tmp_path / "out" / "report.md").read_text()

    result = runner.invoke(app, ["report", str(base), str(faster), "--out", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    assert "1.500" in result.output  # every category 60 / 40 with the same code factor
    assert str(tmp_path / "cmp" / "report.md") in result.output

    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-cache.json"))
    result = runner.invoke(app, ["prices", "show", "g6.xlarge"])
    assert result.exit_code == 0, result.output
    assert "(absent)" in result.output and "g6.xlarge on-demand us-east-1 $0.8048/h" in result.output

    plan_json = tmp_path / "plan.json"
    args = ["plan", "--users", "10", "--min-tok-s", "15", "--ttft-p90", "1", str(base), str(faster), "--out"]
    result = runner.invoke(app, [*args, str(plan_json), "--price-as", "g6.xlarge"])
    assert result.exit_code == 0, result.output
    ranked = [line for line in result.output.splitlines() if line.startswith("|      1 ")]
    assert ranked and "drafter" in ranked[0]
    assert "recommended: local drafter at g6.xlarge spot (--price-as), measured on CPU: " in result.output
    assert "hypothetical" not in result.output
    plans = json.loads(plan_json.read_text())["plans"]
    assert plans[0]["hypothetical"] is False and plans[0]["price_basis"] == "price-as" and plans[0]["instances"] >= 1

    # targets no measured rig meets: a script can tell by the exit code (3), not only by the text
    unmet = runner.invoke(app, ["plan", "--users", "10", "--min-tok-s", "1000", "--ttft-p90", "1", str(base),
                                "--price-as", "g6.xlarge"])
    assert unmet.exit_code == 3, unmet.output
    assert "no measured rig meets the targets" in unmet.output


def test_cli_error_is_one_line_without_traceback(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-c", "from rigbench.cli import main; main()", "report", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().count("\n") == 0
    assert "no such directory" in completed.stderr and "Traceback" not in completed.stderr


def test_a_small_figure_keeps_the_digits_its_interval_needs(kit):
    """Issue 46: ITL and TPOT of 0.245 ms were written "0 [0, 0] ms" (whole milliseconds). Each figure is written with
    the decimals it needs: its value to within half its last digit of summary.json's, its interval's ends apart."""
    t0 = kit.T0
    records = [kit.record(f"r{n}", t_start=t0 + 100 + n * 0.3, ttft=0.01, decode=0.0049 + n * 2e-5, tokens=21)
               for n in range(30)]  # 20 gaps of 0.245 ms and up
    path = kit.make_run("fast", [kit.window()], {"p0": records})
    markdown = write_report([path]).read_text()
    step = json.loads((path / "summary.json").read_text())["runs"][0]["steps"][0]
    lines = markdown.splitlines()
    at = next(n for n, line in enumerate(lines) if "ITL per chunk" in line and line.startswith("|"))
    header, row = lines[at], lines[at + 2]
    cells = dict(zip((c.strip() for c in header.strip("|").split("|")), (c.strip() for c in row.strip("|").split("|")),
                     strict=True))
    for column, figure in (("ITL per chunk p50/p90/p99 ms ↓", "itl_s"), ("TPOT per token p50/p90/p99 ms ↓", "tpot_s")):
        for text, p in zip(cells[column].split(" / "), ("p50", "p90", "p99"), strict=True):
            found = re.fullmatch(r"(\d+\.(\d+)) \[(\d+\.\d+), (\d+\.\d+)\]", text)
            assert found, text
            value, low, high = (step[figure][p][key] * 1000 for key in ("value", "low", "high"))
            assert abs(float(found.group(1)) - value) <= 0.5 * 10 ** -len(found.group(2)) and value > 0.2
            assert (found.group(3) != found.group(4)) == (round(low, 6) != round(high, 6)), text
