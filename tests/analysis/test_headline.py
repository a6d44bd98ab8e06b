"""The answer at a glance: every number in it read back from summary.json, on committed runs and on made ones.

The headline is parsed as a reader would read it, and each number compared with the figure
summary.json holds, formatted as the tables format it; the knee is worked out here from the
JSON by its definition, apart from the code that writes it.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from analysis.figures import run_figures
from analysis.headline import PER_USER_FLOOR_TOK_S, knee_sentence
from analysis.intervals import Estimate, decimals
from analysis.load import load_run
from analysis.report import write_report
from core.rundir import RigInfo
from rigbench.cli import load_command
from rigbench.decode_bytes import decode_bytes_for_runs

RUNS = Path(__file__).resolve().parents[2] / "runs"
BEST = "gpu-h200-study-2026-11-30/runs/20261130T062207Z-gemma4-e2b-e2b-best-0bae"  # no knee; 64 users unmeasured
KNEE = "gpu-h200-slots-2026-12-01/runs/20261201T193215Z-gemma4-e2b-many-patched-e2b-per-slot-kv-patched-1269"
AT_THE_KNEE = "real-gemma-h200-2026-12-02/runs/20261202T195924Z-gemma3-270m-many-patched-cpu-sampling-cpu-sampling-3bef"
FIGURE = r"(\d+\.\d+) \[(\d+\.\d+), (\d+\.\d+)\]"
# the glance also ends `rigbench local` and `rigbench sweep`, which take no price: it names the command that does
HOW_TO_PRICE = "Cost: not priced: rigbench report RUN --price-as TYPE (or --usd-per-hour USD) prices it."
LOAD = r"(\d+) users?"


def render(folder: Path, sources: list[Path], **options) -> tuple[str, dict]:
    """report.md and summary.json of copies of ``sources`` (committed runs keep their study's ceilings beside them)."""
    runs = []
    for source in sources:
        study = folder / source.parents[1].name
        runs.append(shutil.copytree(source, study / "runs" / source.name,
                                    ignore=shutil.ignore_patterns("plots", "report.md", "summary.json")))
        for ceiling in source.parents[1].glob("batched-bench-*.json"):
            shutil.copy(ceiling, study / ceiling.name)
    report = write_report(runs, folder / "out", decode_bytes=decode_bytes_for_runs(runs, []), **options)
    return report.read_text(), json.loads((report.parent / "summary.json").read_text())


def glance(markdown: str) -> list[str]:
    """The paragraphs under "## At a glance"."""
    section = markdown.split("## At a glance\n", 1)[1].split("\n## ", 1)[0]
    return [paragraph for paragraph in section.strip().split("\n\n") if paragraph]


def formatted(estimate: dict, digits: int = 1) -> tuple[str, str, str]:
    """value, low and high as the tables write them (with the decimals the figure needs: ``intervals.decimals``)."""
    places = decimals(estimate["value"], estimate["low"], estimate["high"], digits)
    return tuple(f"{estimate[key]:.{places}f}" for key in ("value", "low", "high"))  # type: ignore[return-value]


def per_user(step: dict) -> dict:
    """What a user sees: the client's median, the server's where the client has none (StepFigures.per_user_tok_s)."""
    return step["client_tok_s"] if step["client_tok_s"]["value"] is not None else step["server_tok_s"]


def best(steps: list[dict]) -> dict:
    return max(steps, key=lambda step: step["aggregate_tok_s"]["value"])


def knee(steps: list[dict]) -> dict | None:
    """The first step that no larger step's aggregate interval lies wholly above (None: still rising at the end)."""
    ordered = sorted(steps, key=lambda step: step["users"])
    for position, step in enumerate(ordered[:-1]):
        if all(later["aggregate_tok_s"]["low"] <= step["aggregate_tok_s"]["high"] for later in ordered[position + 1:]):
            return step
    return None


def check_run_headline(text: str, steps: list[dict]) -> None:
    """The best step, the knee and the floor of one run's paragraph, against its steps in summary.json."""
    top = best(steps)
    found = re.search(rf"Best aggregate output {FIGURE} tok/s at {LOAD}; ", text)
    assert found, text
    assert found.groups()[:3] == formatted(top["aggregate_tok_s"]) and int(found.group(4)) == top["users"]
    if top["ttft_s"]["p90"]["value"] is None:  # the window was shorter than a request there
        assert text[found.end():].startswith("no request finished inside its window there, so latency was not "
                                             "measured"), text
    else:
        found = re.match(rf"there a user waits {FIGURE} s for the first token \(TTFT p90\) and then reads {FIGURE} "
                         rf"tok/s \(median per-user decode speed\)", text[found.end():])
        assert found, text
        assert found.groups()[:3] == formatted(top["ttft_s"]["p90"], 3)
        assert found.groups()[3:] == formatted(per_user(top))
    expected = knee(steps)
    if expected is None:
        assert "no knee within the sweep" in text and "The knee is at" not in text
    else:
        # the rule compares intervals, and the sentence says so with both figures it compared
        found = re.search(rf"The knee is at {LOAD}: no larger step's aggregate interval lies wholly above this one's "
                          rf"\({FIGURE} tok/s; the highest larger step, {LOAD}, has {FIGURE}\)", text)
        assert found, text
        assert int(found.group(1)) == expected["users"]
        assert found.groups()[1:4] == formatted(expected["aggregate_tok_s"])
        larger = [step for step in steps if step["users"] > expected["users"] and step["aggregate_tok_s"]["value"]]
        highest = max(larger, key=lambda step: step["aggregate_tok_s"]["value"])
        assert int(found.group(5)) == highest["users"] and found.groups()[5:] == formatted(highest["aggregate_tok_s"])
        assert float(highest["aggregate_tok_s"]["low"]) <= float(expected["aggregate_tok_s"]["high"])
    measured = [step for step in steps if per_user(step)["value"] is not None]
    below = [step for step in measured if per_user(step)["value"] < PER_USER_FLOOR_TOK_S]
    if below:
        found = re.search(rf"falls below the 10 tok/s floor at {LOAD} \({FIGURE} tok/s\)", text)
        assert found, text
        assert int(found.group(1)) == below[0]["users"] and found.groups()[1:] == formatted(per_user(below[0]))
    elif len(measured) > 1:
        lowest = min(measured, key=lambda step: per_user(step)["value"])
        found = re.search(rf"stays at or above the 10 tok/s floor at every step that measured it \(lowest "
                          rf"{FIGURE} tok/s at {LOAD}\)", text)
        assert found, text
        assert found.groups()[:3] == formatted(per_user(lowest)) and int(found.group(4)) == lowest["users"]
    for step in steps:
        if per_user(step)["value"] is None:
            assert re.search(rf"not measured at [^(]*\b{step['users']} users? \(no request finished", text), text


@pytest.mark.parametrize("name", [BEST, KNEE, AT_THE_KNEE], ids=["no-knee", "knee", "best-at-the-knee"])
def test_a_committed_runs_headline_reads_back_from_its_summary(name: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    markdown, summary = render(tmp_path, [RUNS / name])
    (paragraph,) = glance(markdown)
    check_run_headline(paragraph, summary["runs"][0]["steps"])
    # not priced: no $ figure, and the glance says how to price it
    assert "$" not in paragraph and HOW_TO_PRICE in paragraph


def test_the_h200_runs_headline_says_what_limited_it_from_the_roofline(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    markdown, _ = render(tmp_path, [RUNS / BEST])
    (paragraph,) = glance(markdown)
    roof_row = next(line for line in markdown.splitlines() if line.startswith("| 32 ") and "sequences at" in line)
    reading = roof_row.strip(" |").rsplit("|", 1)[1].strip()
    assert paragraph.endswith(f"What limited it at 32 users, the step below (no reading at 64 users): {reading}.")


def sweep(kit, run_id: str, speed: float, users=(1, 2, 4), **changes) -> Path:
    """Each user streams 21-token replies back to back, taking the three prompt categories in turn."""
    return kit.steady_sweep(run_id, speed, users, categories=("code", "chat", "story"), **changes)


def test_the_floor_crossing_and_the_price_at_the_best_step_read_back(kit) -> None:
    """30 tok/s shared: 30, 15, then 7.5 per user at 4 users, under the floor; priced as the g6.xlarge it ran on."""
    rig = RigInfo(kind="aws", instance_type="g6.xlarge", region="us-east-1", market="on-demand")
    path = sweep(kit, "priced", speed=30.0, rig=rig)
    markdown = write_report([path]).read_text()
    summary = json.loads((path / "summary.json").read_text())["runs"][0]
    steps = summary["steps"]
    (paragraph,) = glance(markdown)
    check_run_headline(paragraph, steps)
    found = re.search(rf"; {LOAD} is the last step above it \({FIGURE} tok/s\)", paragraph)
    assert found and int(found.group(1)) == 2 and found.groups()[1:] == formatted(per_user(steps[1]))
    position = steps.index(best(steps))
    labels = [price["instance_type"] + " " + price["market"] for price in summary["prices"]]
    assert "g6.xlarge on-demand" in labels
    for label in labels:
        found = re.search(rf"\${FIGURE} per million output tokens at {label}\b", paragraph)
        assert found, paragraph
        assert found.groups() == formatted(summary["usd_per_mtok"][position][label], 3)
    first = markdown.split("|---", 1)[0].rsplit("\n", 2)[1]
    assert [c.strip() for c in first.strip("|").split("|")][-1] == "$/Mtok ↓"
    assert "$/Mtok at g6.xlarge on-demand; every price applied is in the Cost section." in markdown


def test_one_users_per_user_figure_above_the_aggregate_is_explained_under_the_first_table(kit) -> None:
    path = sweep(kit, "one", speed=40.0)
    markdown = write_report([path]).read_text()
    one, two, _ = json.loads((path / "summary.json").read_text())["runs"][0]["steps"]
    assert per_user(one)["value"] > one["aggregate_tok_s"]["value"]  # the TTFT and the gaps between requests
    lines = markdown.splitlines()
    rows = [line for line in lines if line.startswith("|")]
    assert rows[2].split("|")[3].strip().endswith("¹") and not rows[3].split("|")[3].strip().endswith("¹")
    after = lines[lines.index(rows[4]) + 2]  # the narrow table's last row, a blank line, the footnote
    assert after.startswith(f"¹ At 1 user the per-user figure ({per_user(one)['value']:.1f} tok/s) is above the "
                            f"aggregate ({one['aggregate_tok_s']['value']:.1f} tok/s): per-user speed divides")
    assert per_user(two)["value"] <= two["aggregate_tok_s"]["value"]  # two users: no mark, no footnote
    assert markdown.count("¹") == 2


def test_across_runs_of_one_run_each_the_difference_is_measured_not_called(kit, tmp_path: Path) -> None:
    slow = sweep(kit, "slow", speed=40.0)
    fast = sweep(kit, "fast", speed=80.0)
    twin = sweep(kit, "twin", speed=40.0)
    markdown = write_report([slow, fast], tmp_path / "ab").read_text()
    summary = json.loads((tmp_path / "ab" / "summary.json").read_text())
    top, other = (best(run["steps"]) for run in reversed(summary["runs"]))
    comparison, *per_run = glance(markdown)
    # one run each: the difference is measured, and said not to be judged (the spread between runs is unknown)
    found = re.search(rf"has the highest aggregate output, {FIGURE} tok/s at {LOAD}: measured ([+-]\d+\.\d)% "
                      rf"above run slow \({FIGURE} at {LOAD}\), but with one run of an arm the spread between runs "
                      "is unknown, so no difference is called", comparison)
    assert found, comparison
    assert found.groups()[:3] == formatted(top["aggregate_tok_s"]) and int(found.group(4)) == top["users"]
    ratio = top["aggregate_tok_s"]["value"] / other["aggregate_tok_s"]["value"] - 1
    assert float(found.group(5)) == pytest.approx(ratio * 100, abs=0.05)
    assert found.groups()[5:8] == formatted(other["aggregate_tok_s"])
    assert [paragraph.split(":", 1)[0] for paragraph in per_run] == ["- run slow", "- run fast"]
    for paragraph, run in zip(per_run, summary["runs"], strict=True):
        check_run_headline(paragraph, run["steps"])
    level, *_ = glance(write_report([slow, twin], tmp_path / "same").read_text())
    assert "so no difference is called" in level and "beyond" not in level.split(": ", 1)[1], level


def test_the_headline_opens_report_html_too(kit, tmp_path: Path) -> None:
    path = sweep(kit, "page", speed=40.0)
    write_report([path], tmp_path, formats=("md", "html"))
    (paragraph,) = glance((tmp_path / "report.md").read_text())
    page = (tmp_path / "report.html").read_text()
    body = page.split("<main>", 1)[1]
    assert body.index("<h2>At a glance</h2>") < body.index(f"<p>{html.escape(paragraph, quote=False)}</p>")
    assert body.index(f"<p>{html.escape(paragraph, quote=False)}</p>") < body.index("<table>")


def test_the_knee_sentence_says_the_rule_it_applies_and_agrees_with_the_figures_it_prints(kit) -> None:
    """Issue 46: the 8-user step's 2847.0 lies above the 2-user step's interval [2413.8, 2821.9], but its own interval
    [2700.0, 3000.0] does not lie wholly above it: by the rule (intervals compared) the knee is at 2 users, and the
    sentence says that rule and prints both figures, not "no larger step's aggregate lies above its interval"."""
    steps = run_figures(load_run(sweep(kit, "knee", speed=30.0, users=(1, 2, 8)))).steps
    for step, figure in zip(steps, [(1200.0, 1100.0, 1300.0), (2618.7, 2413.8, 2821.9), (2847.0, 2700.0, 3000.0)],
                            strict=True):
        step.aggregate_tok_s = Estimate(*figure, 10, "bootstrap over 10 sub-windows")
    assert knee_sentence(steps) == (
        "The knee is at 2 users: no larger step's aggregate interval lies wholly above this one's (2618.7 [2413.8, "
        "2821.9] tok/s; the highest larger step, 8 users, has 2847.0 [2700.0, 3000.0]), so more load gained nothing "
        "beyond noise.")
    steps[2].aggregate_tok_s = Estimate(3100.0, 2900.0, 3300.0, 10, "bootstrap over 10 sub-windows")
    assert knee_sentence(steps) == (
        "Aggregate still gained beyond noise at the largest step: its interval at 8 users (3100.0 [2900.0, 3300.0] "
        "tok/s) lies wholly above the one at 2 users (2618.7 [2413.8, 2821.9]): no knee within the sweep.")


def test_at_a_glance_answers_throughput_latency_and_cost(kit) -> None:
    """Issue 46: the glance answers what a reader asks: how much the rig serves, what one user waits and reads, and
    what a token costs, or, for a run that is not priced, how to price it."""
    path = sweep(kit, "local", speed=30.0)
    markdown = write_report([path]).read_text()
    best_step = best(json.loads((path / "summary.json").read_text())["runs"][0]["steps"])
    (paragraph,) = glance(markdown)
    ttft, speed = (Estimate(**figure).short(digits) for figure, digits in
                   ((best_step["ttft_s"]["p90"], 3), (per_user(best_step), 1)))
    assert (f"; there a user waits {ttft} s for the first token (TTFT p90) and then reads {speed} tok/s (median "
            "per-user decode speed)") in paragraph
    assert HOW_TO_PRICE in paragraph
    priced = write_report([path], kit.root / "priced", price_as=["g6.xlarge"]).read_text()
    assert "per million output tokens at g6.xlarge" in glance(priced)[0] and "not priced" not in glance(priced)[0]


@pytest.mark.parametrize("command", ["report", "plan"])
def test_the_way_to_price_a_run_names_options_that_exist(command: str) -> None:
    """The flags the not-priced sentence names are ``rigbench report``'s (the command it names), and ``plan``'s."""
    named = set(re.findall(r"--[a-z-]+", HOW_TO_PRICE))
    assert named == {"--price-as", "--usd-per-hour"} and "rigbench report RUN" in HOW_TO_PRICE
    assert named <= {flag for param in load_command(command).params for flag in param.opts}
