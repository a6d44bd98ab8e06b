"""``rigbench prices``: the list of known types with their prices, and unknown types refused; and every price
flag refusing an unknown type the same way (one line, exit 2, the known types listed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.instance_types import INSTANCE_TYPES
from rigbench.cli import app, main


@pytest.fixture(autouse=True)
def bundled_prices(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))


def rows(output: str) -> dict[str, list[str]]:
    """The table's rows by instance type."""
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in output.splitlines() if line.startswith("| ")]
    return {row[0]: row for row in cells[1:]}


def test_list_gives_every_known_type_with_its_gpu_and_prices_and_their_sources() -> None:
    result = CliRunner().invoke(app, ["prices", "list"])
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    assert set(table) == set(INSTANCE_TYPES)
    header = [cell.strip() for cell in next(line for line in result.output.splitlines() if line.startswith("| type"))
              .split("|")[1:-1]]
    assert header == ["type", "GPU", "GPUs", "GB per GPU", "vCPUs", "on-demand $/h", "per GPU $/h", "spot $/h"]
    g6 = table["g6.xlarge"]
    assert g6[:5] == ["g6.xlarge", "NVIDIA L4", "1", "24", "4"]
    assert g6[5].startswith("0.8048 [") and g6[6] == "" and g6[7].startswith("0.5300 [")
    p5en = table["p5en.48xlarge"]
    assert p5en[:5] == ["p5en.48xlarge", "NVIDIA H200", "8", "141", "192"]
    assert p5en[5].startswith("63.2960 [") and p5en[6].startswith("7.9120 [") and p5en[7] == "-"
    number = p5en[5].split("[")[1].rstrip("]")
    source = next(line for line in result.output.splitlines() if line.startswith(f"[{number}] "))
    assert "AWS Price List, on-demand, us-east-1" in source and "June 2025" in source
    assert table["p5.48xlarge"][1:3] == ["NVIDIA H100", "8"] and table["p4d.24xlarge"][5].startswith("21.9576 [")
    g6_4 = table["g6.12xlarge"]  # a 4-GPU G type: its per-GPU column is a quarter
    assert g6_4[:5] == ["g6.12xlarge", "NVIDIA L4", "4", "24", "48"]
    assert g6_4[5].startswith("4.6016 [") and g6_4[6].startswith("1.1504 [") and g6_4[7] == "-"


def test_list_in_a_region_without_quotes_shows_no_price_rather_than_another_regions() -> None:
    result = CliRunner().invoke(app, ["prices", "list", "--region", "eu-west-1"])
    assert result.exit_code == 0, result.output
    assert {row[5] for row in rows(result.output).values()} == {"-"}


def test_show_a_known_type_without_a_quote_in_the_region_says_so() -> None:
    result = CliRunner().invoke(app, ["prices", "show", "p5en.48xlarge", "--region", "us-west-2"])
    assert result.exit_code == 0, result.output
    assert "p5en.48xlarge: no quote for us-west-2; `rigbench prices fetch p5en.48xlarge --region us-west-2`" in (
        result.output)
    shown = CliRunner().invoke(app, ["prices", "show", "p5en.48xlarge"])
    assert "p5en.48xlarge on-demand us-east-1 $63.2960/h" in shown.output


def refused(monkeypatch, capsys, *args: str) -> str:
    """What the console script says to ``rigbench ARGS``: its exit code must be 2; returns stderr."""
    monkeypatch.setattr(sys, "argv", ["rigbench", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize(
    ("flag", "args"),
    [
        ("prices show", ["prices", "show", "g6.xlarge", "p9.fake"]),
        ("prices fetch", ["prices", "fetch", "p9.fake"]),  # before any AWS call: no credentials needed
        ("--price-as", ["report", "runs/none", "--price-as", "p9.fake"]),
        ("--price-as", ["plan", "runs/none", "--users", "1", "--min-tok-s", "1", "--ttft-p90", "1", "--price-as",
                        "g6.xlarge,p9.fake"]),
        ("--hypothetical", ["plan", "runs/none", "--users", "1", "--min-tok-s", "1", "--ttft-p90", "1",
                            "--hypothetical", "p9.fake"]),
        ("--price-as", ["gate", "runs/none", "--baseline", "runs/none", "--price-as", "p9.fake"]),
    ],
)
def test_an_unknown_type_is_one_line_naming_the_flag_and_the_known_types(monkeypatch, capsys, flag, args) -> None:
    """`--price-as h100` used to exit 0 and drop the prices; `prices show p9.fake` printed nothing and exited 0."""
    err = refused(monkeypatch, capsys, *args)
    assert err.count("\n") == 1
    assert err.startswith(f"rigbench: error: {flag}: 'p9.fake' is not an instance type rigbench knows; known: ")
    assert all(name in err for name in INSTANCE_TYPES) and "`rigbench prices list`" in err
