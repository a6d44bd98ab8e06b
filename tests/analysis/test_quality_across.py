"""The committed Gemma 3 270M ladders of the CPU and the H200 lined up as a loop lines up its rigs."""

from __future__ import annotations

from pathlib import Path

from analysis.quality_across import Machine, ladders_across

RUNS = Path(__file__).resolve().parents[2] / "runs"


def test_two_machines_ladders_in_the_articles_tables(tmp_path: Path) -> None:
    machines = [Machine("cpu (2 cores)", RUNS / "quality-cpu-gemma3-2026-12-03" / "ladder"),
                Machine("h200", RUNS / "quality-h200-gemma3-2026-12-03" / "ladder")]
    across = ladders_across(machines, tmp_path)
    page = across.markdown
    rows: dict[str, str] = {}
    for line in page.splitlines():  # the first table: right per rung per machine
        if line.startswith("| "):
            rows.setdefault(line.split("|")[1].strip(), line)
    assert "74/100" in rows["F16"] and "73/100" in rows["F16"] and "34/100" in rows["Q4_0"]
    assert "Every rung is the same file (sha256) on every machine." in page
    assert "- cpu (2 cores): **Q4_K_M**, 74/100 right, lost 3 / gained 3, p = 1" in page
    assert "- h200: **Q8_0**, 71/100 right, lost 2 / gained 0, p = 0.500" in page
    grid = tmp_path / "grids" / "cpu-2-cores-vs-h200" / "grid.md"
    assert grid.is_file() and "At the top rung, F16, the machine alone moves 1 of 100 grades" in grid.read_text()
    first_lost = [line for line in page.splitlines() if line.startswith("| Q4_0 ")][-1]
    assert [cell.strip() for cell in first_lost.split("|")[1:-1]][2:] == ["4 / 7", "0.549", "39", "29"], first_lost
    assert across.glance == (
        "Best trade (the fastest rung that lost nothing beyond noise against the machine's own top rung): "
        "cpu (2 cores): Q4_K_M, 74/100 right at 26.5 decode tok/s; h200: Q8_0, 71/100 right at 523.2 decode tok/s. "
        "Machine against machine, rung by rung (McNemar, each rung's own p, not corrected for the rungs compared): "
        "cpu (2 cores) vs h200: no rung graded differently beyond noise (smallest p = 0.267, at Q5_K_M).")
