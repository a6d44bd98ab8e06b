"""report.html in a real headless Chromium (``make browser`` installs it): it renders, its
console stays clean, its plots decode, its tables sort, and its first table fits a 1,280 px window.

Chromium runs with no network (every host name fails to resolve) and logs the page's console to
stderr (``--enable-logging=stderr --v=1``: lines with ``CONSOLE``). A probe script, added to a
copy of the page, clicks headers and writes what it saw into the DOM, which ``--dump-dom``
returns; it also logs one console line, which shows the console capture works (an empty capture
would otherwise pass the clean-console check).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pytest

from analysis.report import write_report
from analysis.report_html import render_html

pytestmark = pytest.mark.integration

RUNS = Path(__file__).resolve().parents[2] / "runs"
RUN = RUNS / "gpu-h200-profiles-2026-11-30/runs/20261130T084313Z-gemma4-e2b-many-e2b-drafter2-random-75e1"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WINDOW = (1280, 2400)
PROBE_DONE = "rigbench-probe-done"
PROBE = """
<script>
window.addEventListener("load", function () {
  function column(table, index) {
    return Array.prototype.map.call(table.tBodies[0].rows, function (row) {
      return row.cells[index].textContent.trim();
    });
  }
  function box(element) {
    return {width: element.getBoundingClientRect().width, rows: element.tHead.getBoundingClientRect().width,
            scroll: element.scrollWidth, client: element.clientWidth};
  }
  var all = document.querySelectorAll("table");
  var seen = {tables: [], boxes: Array.prototype.map.call(all, box),
              page: {scroll: document.documentElement.scrollWidth, inner: window.innerWidth}};
  Array.prototype.forEach.call(document.querySelectorAll("table"), function (table) {
    var headers = table.tHead.rows[0].cells, sorts = [];
    for (var index = 0; index < headers.length; index++) {
      headers[index].click();
      var up = column(table, index);
      headers[index].click();
      sorts.push({header: headers[index].textContent.trim(), up: up, down: column(table, index),
                  state: headers[index].getAttribute("aria-sort")});
    }
    seen.tables.push(sorts);
  });
  seen.images = Array.prototype.map.call(document.images, function (image) {
    return [image.complete, image.naturalWidth, image.naturalHeight];
  });
  var out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
  console.log("PROBE_DONE");
});
</script>
""".replace("PROBE_DONE", PROBE_DONE)


@pytest.fixture(scope="module")
def chromium() -> str:
    found = next((path for path in map(shutil.which, BROWSERS) if path), None)
    if found is None:
        pytest.fail("chromium is missing: run `make browser` (apt-get install chromium)")
    return found


def browse(chromium: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        chromium,
        "--headless",
        "--no-sandbox",  # root in CI
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: a page that fetches anything fails
        "--enable-logging=stderr",
        "--v=1",
        "--virtual-time-budget=10000",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "CONSOLE" in line]


def with_probe(page: Path) -> Path:
    probed = page.with_name("probed.html")
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>", 1))
    return probed


def probe(chromium: str, page: Path, tmp_path: Path) -> dict:
    done = browse(chromium, with_probe(page), tmp_path / "probe-profile", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = console_lines(done.stderr)
    assert any(PROBE_DONE in line for line in lines), "the page's console was not captured:\n" + done.stderr[-2000:]
    assert [line for line in lines if PROBE_DONE not in line] == []
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.DOTALL)
    assert found, done.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def html_report(folder: Path, runs: list[Path], price_as: list[str] | None = None) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIGBENCH_PRICE_CACHE", str(folder / "no-price-cache.json"))
        copies = [shutil.copytree(run, folder / run.name, ignore=shutil.ignore_patterns("plots", "report.md"))
                  for run in runs]
        write_report(copies, folder / "out", formats=("html",), price_as=price_as)
    return folder / "out" / "report.html"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return html_report(tmp_path_factory.mktemp("report"), [RUN])


def test_the_page_renders_offline_with_a_clean_console(chromium: str, report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = browse(chromium, report, tmp_path / "profile", f"--screenshot={shot}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_lines(done.stderr) == []
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    assert shot.stat().st_size > 50_000  # text, tables and plots, not a blank page
    ink = (pixels[..., :3].mean(axis=-1) < 0.5).mean()
    assert 0.01 < ink < 0.5


def test_the_plots_decode_and_every_table_sorts_in_the_browser(chromium: str, report: Path, tmp_path: Path) -> None:
    seen = probe(chromium, report, tmp_path)
    assert len(seen["images"]) == 4  # the overview and three plots: the run is not priced, so no $/Mtok plot
    for complete, width, height in seen["images"]:
        assert complete and width >= 1200 and height >= 720
    assert len(seen["tables"]) == report.read_text().count("<table>") >= 3  # per step, cost, detail
    for table in seen["tables"]:
        for sort in table:
            assert sort["state"] == "descending", sort["header"]
            assert is_sorted(sort["up"]) and is_sorted(sort["down"], reverse=True), sort
    for table in seen["tables"][:2]:  # the narrow table first, then the wide one
        aggregate = next(s for s in table if s["header"] == "aggregate tok/s ↑")
        assert [cell.split()[0] for cell in aggregate["up"]] == ["171.0", "686.9"]
        assert [cell.split()[0] for cell in aggregate["down"]] == ["686.9", "171.0"]
    per_user = next(s for s in seen["tables"][1] if s["header"] == "median per-user tok/s (client) ↑")
    assert per_user["up"][-1] == per_user["down"][-1] == "- (n=0)"  # a missing figure stays last


def fits(box: dict) -> bool:
    """A table shown whole: its box and its rows no wider than the window, nothing to scroll sideways inside it
    (the page's style makes a table a block that scrolls its rows when they are wider than the page)."""
    return max(box["width"], box["rows"]) <= WINDOW[0] and box["scroll"] <= box["client"]


@pytest.mark.parametrize("priced", [False, True], ids=["not-priced", "priced-per-gpu"])
def test_the_first_table_fits_1280_px_and_the_page_does_not_scroll_sideways(
    chromium: str, tmp_path: Path, priced: bool
) -> None:
    """The widest first table a single run gets is a priced one: its $/Mtok header names a per-GPU share."""
    page = html_report(tmp_path, [RUN], ["p5en.48xlarge"] if priced else None)
    seen = probe(chromium, page, tmp_path)
    first, wide = seen["boxes"][:2]
    assert fits(first), first
    assert len(seen["tables"][0]) == (5 if priced else 4)
    assert not fits(wide), wide  # the wide table below it scrolls inside itself: the measure sees that
    assert seen["page"]["scroll"] <= seen["page"]["inner"] == WINDOW[0], seen["page"]


def test_a_cross_run_reports_first_table_fits_too(chromium: str, tmp_path: Path) -> None:
    runs = sorted((RUNS / "gpu-h200-slots-2026-12-01" / "runs").iterdir())
    seen = probe(chromium, html_report(tmp_path, runs), tmp_path)
    assert fits(seen["boxes"][0]), seen["boxes"][0]
    assert seen["page"]["scroll"] <= seen["page"]["inner"] == WINDOW[0], seen["page"]


def sort_key(cell: str) -> tuple:
    """The order the page's script should give (numbers by value, then text, missing last)."""
    if re.fullmatch(r"(-(\s.*)?)?", cell):
        return (2, 0, "")
    number = re.match(r"[-+]?\$?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?", cell, flags=re.IGNORECASE)
    if number:
        return (0, float(number.group(0).replace("$", "").replace(",", "")), "")
    return (1, 0, cell.lower())


def is_sorted(cells: list[str], reverse: bool = False) -> bool:
    present = [sort_key(cell) for cell in cells if sort_key(cell)[0] != 2]
    missing_last = all(sort_key(cell)[0] == 2 for cell in cells[len(present):])
    return missing_last and present == sorted(present, reverse=reverse)


def test_numbers_sort_by_value_and_missing_figures_go_last(chromium: str, tmp_path: Path) -> None:
    markdown = "\n".join(
        [
            "# sorting",
            "",
            "| users | aggregate tok/s | errors |",
            "|------:|:----------------|:-------|",
            "| 2 | 10.5 [9.0, 12.0] n=4 | timeout 1 |",
            "| 10 | - (n=0) | 0 |",
            "| 1 | 9.0 [8.0, 10.0] n=3 | 0 |",
            "| 64 | 100.0 [90.0, 110.0] n=9 | http 2 |",
            "",
        ]
    )
    page = tmp_path / "sorting.html"
    page.write_text(render_html(markdown, tmp_path))
    table = probe(chromium, page, tmp_path)["tables"][0]
    users, aggregate, errors = table
    assert users["up"] == ["1", "2", "10", "64"] and users["down"] == ["64", "10", "2", "1"]
    assert [cell.split()[0] for cell in aggregate["up"]] == ["9.0", "10.5", "100.0", "-"]
    assert [cell.split()[0] for cell in aggregate["down"]] == ["100.0", "10.5", "9.0", "-"]
    assert errors["up"] == ["0", "0", "http 2", "timeout 1"]
    assert errors["down"] == ["timeout 1", "http 2", "0", "0"]


def test_the_order_check_can_fail() -> None:
    assert is_sorted(["9.0", "10.5 [9, 12]", "100", "abc", "- (n=0)"])
    assert is_sorted(["abc", "100", "9.0", "- (n=0)"], reverse=True)
    assert not is_sorted(["10.5", "9.0"]) and not is_sorted(["- (n=0)", "9.0"]) and not is_sorted(["abc", "9.0"])
    assert sort_key("1,740") == (0, 1740.0, "")
