"""``rigbench plan`` ranks priced rigs only: the type a run ran on, the one ``--price-as`` gives its machine, or the
hourly price ``--usd-per-hour`` gives it (``rigbench report`` prices with the same flags); other types only when
``--hypothetical`` names them. A price of hardware that did not measure the run names the machine that did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.plots import price_labels
from analysis.prices import PriceBook
from analysis.report import build_sections, cost_section
from analysis.summary import run_summary
from core.errors import AnalysisError, UsageError
from core.rundir import MachineInfo, RigInfo
from core.rundir.models import RepeatInfo
from rigbench.cli import app

TARGETS = ["--users", "10", "--min-tok-s", "15", "--ttft-p90", "1"]
AWS = RigInfo(kind="aws", instance_type="g6.xlarge", region="us-east-1", availability_zone="us-east-1a",
              market="spot", price_per_hour=0.4, price_source="spot price at launch")
CPU = RigInfo(kind="local", machine=MachineInfo(hostname="laptop", cpu_model="Some CPU", cpu_cores=2))
H200 = RigInfo(kind="local", machine=MachineInfo(hostname="gpu", gpu_name="NVIDIA H200"))


@pytest.fixture(autouse=True)
def bundled_prices(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))


def sweep(kit, run_id: str, rig: RigInfo, speed: float = 40.0) -> str:
    """1, 2 and 4 users streaming back to back; per-user tok/s falls as speed / users."""
    steps, records = [], []
    for index, users in enumerate((1, 2, 4)):
        start = kit.T0 + index * 100
        steps.append(kit.window(index, users, start=start + 10, end=start + 70))
        for user in range(users):
            clock, number = start + user * 0.1, 0
            while clock < start + 80:
                decode = 20 / (speed / users)
                records.append(kit.record(f"{index}-{user}-{number}", step=index, users=users, t_start=clock,
                                          phase="measure" if clock >= start + 10 else "warmup", ttft=0.1 * users,
                                          decode=decode, server_tok_s=speed / users))
                clock += 0.1 * users + decode + 0.02
                number += 1
    return str(kit.make_run(run_id, steps, {"p0": records}, rig=rig))


def plan(*args: str):
    return CliRunner().invoke(app, ["plan", *TARGETS, *args])


def ranked(output: str) -> list[str]:
    """The price cell of each ranked row."""
    return [line.split("|")[3].strip() for line in output.splitlines() if line.startswith("|") and "rank" not in line
            and not line.startswith("|--")]


def test_without_hypothetical_only_measured_rigs_are_ranked(kit, tmp_path: Path) -> None:
    """The local CPU run used to be ranked as a g6.xlarge (hypothetical) and could be recommended."""
    aws, local = sweep(kit, "aws", AWS), sweep(kit, "cpu", CPU, speed=60.0)
    out = tmp_path / "plan.json"
    result = plan(aws, local, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert ranked(result.output) == ["g6.xlarge spot", "g6.xlarge on-demand"]  # both the AWS run's own
    assert "recommended: g6.xlarge aws at g6.xlarge spot: 4 instances of 3 users, $1.600/h" in result.output
    assert "not ranked: local cpu: not priced: ran on laptop (Some CPU, 2 cores, no GPU recorded), not a known " \
        "instance type; --price-as TYPE prices it as one" in result.output
    assert "hypothetical" not in result.output
    plans = json.loads(out.read_text())["plans"]
    assert {(p["run"], p["price_basis"], p["hypothetical"]) for p in plans} == {("g6.xlarge aws", "recorded", False)}


def test_hypothetical_types_are_ranked_beside_the_measured_ones_and_labelled(kit) -> None:
    aws, local = sweep(kit, "aws", AWS), sweep(kit, "cpu", CPU, speed=60.0)
    result = plan(aws, local, "--hypothetical", "g6e.xlarge,g6.xlarge")
    assert result.exit_code == 0, result.output
    prices = ranked(result.output)
    assert sorted(prices) == sorted([
        "g6.xlarge spot", "g6.xlarge on-demand",  # the AWS run: its own type, not repeated as hypothetical
        "g6e.xlarge on-demand (hypothetical), measured on g6.xlarge",  # the AWS run extrapolated
        "g6e.xlarge on-demand (hypothetical), measured on CPU (2 cores)",  # the CPU run
        "g6.xlarge on-demand (hypothetical), measured on CPU (2 cores)",
        "g6.xlarge spot (hypothetical), measured on CPU (2 cores)",
    ])
    assert "not ranked" not in result.output
    assert "prices marked (hypothetical) apply an instance type the run did not run on (--hypothetical)" in (
        result.output)


def test_price_as_ranks_a_local_machine_as_the_type_it_counts_as(kit) -> None:
    aws, local = sweep(kit, "aws", AWS), sweep(kit, "cpu", CPU, speed=60.0)
    result = plan(aws, local, "--price-as", "g6.2xlarge")
    assert result.exit_code == 0, result.output
    assert sorted(ranked(result.output)) == sorted([
        "g6.xlarge spot", "g6.xlarge on-demand", "g6.2xlarge on-demand (--price-as), measured on CPU (2 cores)",
        "g6.2xlarge spot (--price-as), measured on CPU (2 cores)"])
    assert "--price-as g6.2xlarge not applied: the run ran on g6.xlarge (its manifest says so)" in result.output


def test_one_h200_is_planned_in_gpus_of_a_p5en_at_its_per_gpu_share(kit) -> None:
    result = plan(sweep(kit, "h200", H200, speed=60.0), "--price-as", "p5en.48xlarge")
    assert result.exit_code == 0, result.output
    assert ranked(result.output) == [
        "per-GPU share (1/8) of p5en.48xlarge on-demand (--price-as), measured on NVIDIA H200"]
    row = next(line for line in result.output.splitlines() if line.startswith("|      1 "))
    instances, usd = (cell.strip() for cell in row.split("|")[5:7])
    assert float(usd) == pytest.approx(int(instances) * 63.296 / 8, abs=1e-3)
    assert f"{instances} GPUs, each 1/8 of a p5en.48xlarge" in result.output
    assert "priced as p5en.48xlarge" not in result.output  # its GPU is the type's: no other-hardware warning


def test_no_priced_run_is_refused_saying_how_to_price_it(kit) -> None:
    result = plan(sweep(kit, "cpu", CPU))
    assert isinstance(result.exception, UsageError) and result.exception.exit_code == 2
    message = str(result.exception)
    assert message.startswith("no run is priced, so there is nothing to rank (local cpu: not priced: ran on laptop")
    assert ("give --price-as TYPE (what the machine counts as), --usd-per-hour USD (what it costs) or --hypothetical "
            "TYPE[,TYPE]") in message


def test_a_price_of_other_hardware_names_the_machine_that_measured_the_figures(kit, tmp_path: Path) -> None:
    """`plan --hypothetical g6e.xlarge` used to price a CPU run's figures as an L40S's without a word: the plan's
    table, its recommendation and JSON, and the report's cost section, plot legend and summary.json now say which
    machine measured what is priced as another type."""
    cpu = sweep(kit, "cpu", CPU)
    out = tmp_path / "plan.json"
    result = plan(cpu, "--hypothetical", "g6e.xlarge", "--out", str(out))
    assert result.exit_code == 0, result.output
    label = "g6e.xlarge on-demand (hypothetical), measured on CPU (2 cores)"
    assert ranked(result.output) == [label]
    assert f"recommended: local cpu at {label}: 4 instances of 3 users" in result.output
    (planned,) = json.loads(out.read_text())["plans"]
    assert (planned["price"]["instance_type"], planned["measured_on"], planned["price_label"]) == (
        "g6e.xlarge", "CPU (2 cores)", label)
    (section,) = build_sections([Path(cpu)], ["g6e.xlarge"], PriceBook.default())  # the report's --price-as
    label = "g6e.xlarge on-demand (--price-as), measured on CPU (2 cores)"
    cost = "\n".join(cost_section(section))
    assert f"$/Mtok {label}" in cost and f"whole run at {label}: " in cost
    assert price_labels([section]) == [label]  # the $/Mtok plot's legend
    (price,) = run_summary(section).prices
    assert (price.instance_type, price.measured_on, price.label) == ("g6e.xlarge", "CPU (2 cores)", label)


def test_usd_per_hour_prices_a_cpu_run_at_the_given_price_in_plan_and_report(kit, tmp_path: Path) -> None:
    """A run on no known type is priced at a given $/h, claiming no type or GPU, through the same price objects as
    --price-as (so the cost section and summary.json carry it); a price not above 0 is refused in one line."""
    cpu = sweep(kit, "cpu", CPU)
    for command in (["plan", *TARGETS, cpu], ["report", cpu, "--out", str(tmp_path / "refused")]):
        for bad in ("0", "-1", "nan"):
            refused = CliRunner().invoke(app, [*command, "--usd-per-hour", bad])
            assert isinstance(refused.exception, UsageError) and refused.exception.exit_code == 2
            assert str(refused.exception) == (f"--usd-per-hour: {bad} is not an hourly price; give what the machine "
                                              "costs in USD per hour, above 0 (e.g. --usd-per-hour 0.50)")
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "plan.json"
    result = plan(cpu, "--usd-per-hour", "0.5", "--out", str(out))
    assert result.exit_code == 0, result.output
    label = "given $0.5/h (--usd-per-hour), measured on CPU (2 cores)"
    assert ranked(result.output) == [label]
    assert f"recommended: local cpu at {label}: 4 machines like the one measured of 3 users, $2.000/h" in (
        result.output)
    (planned,) = json.loads(out.read_text())["plans"]
    assert (planned["price_basis"], planned["price"]["instance_type"], planned["usd_per_hour"]) == ("given", None, 2.0)
    report = CliRunner().invoke(app, ["report", cpu, "--usd-per-hour", "0.5", "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    text = (tmp_path / "report" / "report.md").read_text()
    assert "not priced" not in text.lower() and f"$/Mtok {label}" in text and f"whole run at {label}: " in text
    (run,) = json.loads((tmp_path / "report" / "summary.json").read_text())["runs"]
    (price,) = run["prices"]
    assert (price["basis"], price["instance_type"], price["market"], price["measured_on"], price["usd_per_hour"]) == (
        "given", None, None, "CPU (2 cores)", 0.5)
    assert run["not_priced"] is None and run["run_cost"][0]["usd"] == pytest.approx(0.5)  # one hour at $0.5/h
    aggregate = run["steps"][-1]["aggregate_tok_s"]["value"]
    assert run["usd_per_mtok"][-1][label]["value"] == pytest.approx(0.5 / (aggregate * 3600) * 1e6)


def repeat(index: int, arm: str = "draft") -> RepeatInfo:
    return RepeatInfo(series="s", arm=arm, index=index, of=3, order=index - 1)


def rows(output: str) -> list[list[str]]:
    """The cells of each ranked row."""
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in output.splitlines()
            if line.startswith("|") and "rank" not in line and not line.startswith("|--")]


def test_an_arms_repeats_are_one_candidate_sized_by_the_lowest_capacity(kit, tmp_path: Path) -> None:
    """Three repeats of one arm used to be three ranked rows, like three rigs, and the best of them recommended; a
    plan must hold on the worst run seen, so they are one candidate sized from their lowest capacity."""
    repeats = [str(kit.steady_sweep(f"draft-{index}", speed, users=(1, 2, 4, 8), rig=AWS, repeat=repeat(index)))
               for index, speed in ((1, 80.0), (2, 80.0), (3, 60.0))]
    alone = str(kit.steady_sweep("alone", 50.0, users=(1, 2, 4, 8), rig=AWS))
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["plan", "--users", "20", "--min-tok-s", "15", "--ttft-p90", "1", *repeats,
                                      alone, "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    assert [(row[1], row[2]) for row in table] == [
        ("g6.xlarge draft (3 repeats)", "g6.xlarge spot"), ("g6.xlarge alone", "g6.xlarge spot"),
        ("g6.xlarge draft (3 repeats)", "g6.xlarge on-demand"), ("g6.xlarge alone", "g6.xlarge on-demand")]
    pooled, single = table[0], table[1]
    assert pooled[3:5] == ["4", "5"]  # repeat 3's 4 users an instance: ceil(20 / 4) = 5 instances
    assert pooled[-1] == "lowest of 3 repeats (6, 6, 4 users): interpolated between measured steps 4 and 8 users"
    assert single[-1] == "interpolated between measured steps 2 and 4 users"  # a run made alone as before
    assert "recommended: g6.xlarge draft (3 repeats) at g6.xlarge spot: 5 instances of 4 users" in result.output
    plans = json.loads(out.read_text())["plans"]
    # $/Mtok comes from the repeat whose capacity sized the plan, as a plan of that run alone gives it
    worst = CliRunner().invoke(app, ["plan", "--users", "20", "--min-tok-s", "15", "--ttft-p90", "1", repeats[2]])
    assert rows(worst.output)[0][6] == pooled[6]
    assert plans[0]["capacity_from"] == "draft-3" and [r["capacity_per_instance"] for r in plans[0]["repeats"]] == [
        6, 6, 4]
    assert "repeats" not in plans[1] and "capacity_from" not in plans[1]


def test_a_repeat_that_read_no_figure_is_absent_not_a_capacity_of_zero(kit) -> None:
    """A repeat whose smallest step finished no request (and had no error) has no capacity to read: it is shown
    as -, and the plan is sized from the repeats that measured one, not refused as if the arm served nobody."""
    repeats = [str(kit.steady_sweep(f"draft-{index}", 80.0, users=(1, 2, 4, 8), rig=AWS, repeat=repeat(index)))
               for index in (1, 2)]
    repeats.append(str(kit.make_run("draft-3", [kit.window(0, 1)], {"p0": []}, rig=AWS, repeat=repeat(3))))
    result = CliRunner().invoke(app, ["plan", "--users", "20", "--min-tok-s", "15", "--ttft-p90", "1", *repeats])
    assert result.exit_code == 0, result.output
    pooled = rows(result.output)[0]
    assert pooled[1] == "g6.xlarge draft (3 repeats)" and pooled[3] == "6"
    assert pooled[-1].startswith("lowest of 3 repeats (6, 6, - users; - read no figure at its smallest step): ")


def test_repeats_of_one_arm_with_different_workloads_are_refused_in_one_line(kit) -> None:
    from core.rundir import LoadSettings

    longer = LoadSettings(user_steps=[1, 2, 4], warmup_seconds=1, measure_seconds=10, max_tokens=64)
    repeats = [str(kit.steady_sweep("draft-1", 80.0, rig=AWS, repeat=repeat(1))),
               str(kit.steady_sweep("draft-2", 80.0, rig=AWS, repeat=repeat(2), load=longer))]
    result = CliRunner().invoke(app, ["plan", *TARGETS, *repeats])
    assert isinstance(result.exception, AnalysisError) and result.exception.exit_code == 2
    assert str(result.exception) == (
        "runs draft-1 and draft-2 are repeats of arm draft but measure different workloads (max_tokens 21 in "
        "draft-1, 64 in draft-2); a plan pools an arm's repeats, so give repeats of one workload")


def test_an_autotune_folder_plans_its_kept_trials_repeats_pooled_as_their_run_directories_do(kit,
                                                                                             tmp_path: Path) -> None:
    """The folder and the kept trial's runs given one by one plan alike: one candidate sized from the lowest."""
    from rigbench.autotune import LOG_NAME, TrialResult

    folder = tmp_path / "tuning"
    folder.mkdir()
    lines = []
    for index, speed in ((1, 80.0), (2, 60.0), (3, 80.0)):
        run = kit.steady_sweep(f"profile-{index}", speed, users=(1, 2, 4, 8), rig=AWS,
                               repeat=RepeatInfo(series="s", arm="profile", index=index, of=3, order=index - 1))
        lines.append(TrialResult(name="profile", overrides=[], run_path=str(run), status="complete",
                                 started_at="2026-12-04T00:00:00+00:00", max_users=8, one_user_server_tok_s=speed,
                                 aggregate_tok_s_at_max_users=speed, repeat=index, repeats=3, series="s"))
    (folder / LOG_NAME).write_text("".join(line.model_dump_json() + "\n" for line in lines))
    by_folder = CliRunner().invoke(app, ["plan", "--users", "20", "--min-tok-s", "15", "--ttft-p90", "1",
                                         str(folder)])
    by_runs = CliRunner().invoke(app, ["plan", "--users", "20", "--min-tok-s", "15", "--ttft-p90", "1",
                                       *[line.run_path for line in lines]])
    assert by_folder.exit_code == 0, by_folder.output
    assert (f"autotune folder {folder}: planned from the trial it kept, profile (its 3 repeats, sized by the "
            "lowest), the card's best measured configuration") in by_folder.output
    assert rows(by_folder.output) == rows(by_runs.output)
    assert rows(by_folder.output)[0][-1].startswith("lowest of 3 repeats (6, 4, 6 users): ")
