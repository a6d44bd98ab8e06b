"""The bandwidth roofline in report.md and in `rigbench plan`, from run directories written by RunDir."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.prices import PriceBook
from analysis.report import write_report
from analysis.report_model import build_section
from analysis.roofline import bytes_per_value, cache_types, in_flight, sliding_sum, step_batch
from core.digest import file_sha256
from core.rundir import DecodeBytes, KvWidth, MachineInfo, ModelInfo, RigInfo, ServerInfo
from rigbench.cli import app

H200 = RigInfo(kind="local", machine=MachineInfo(hostname="gpu", gpu_name="NVIDIA H200"))
DECODE = DecodeBytes(
    weights_bytes=1_000_000_000,
    lookup_bytes=1000,
    k_values=KvWidth(full=1000, sliding=0),
    v_values=KvWidth(full=500, sliding=0),
    tensor_count=10,
    tied_output=False,
    source="a test table",
)


def two_step_run(kit, run_id: str, **changes):
    """1 and 4 users; every request: prompt 10 tokens, 21 generated over 2 s (10 tok/s per user)."""
    steps, records = [], []
    for index, users in enumerate((1, 4)):
        start = kit.T0 + index * 100
        steps.append(kit.window(index, users, start=start + 10, end=start + 50))
        for user in range(users):
            for number in range(20):
                records.append(
                    kit.record(f"{index}-{user}-{number}", step=index, users=users, t_start=start + number * 2.6)
                )
    return kit.make_run(run_id, steps, {"p0": records}, **changes)


def model(decode: DecodeBytes | None = DECODE, sha256: str = "ab" * 32) -> ModelInfo:
    return ModelInfo(name="m.gguf", sha256=sha256, size_bytes=1, decode_bytes=decode)


def section_lines(text: str) -> list[str]:
    start = text.index("### Bandwidth roofline")
    return text[start : text.index("### Warnings", start)].splitlines()


def test_the_report_shows_each_step_against_the_h200_roof(kit):
    path = two_step_run(kit, "h200", rig=H200, model=model(), server=ServerInfo(args=["-ctv", "q8_0"], host="h",
                                                                                  port=1, parallel_slots=4))
    lines = section_lines(write_report([path]).read_text())
    assert "NVIDIA H200, 4,800 GB/s" in lines[2]
    assert "KV cache (f16 K, q8_0 V)" in lines[2]
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| ") and "users" not in line]
    # mean context: prompt 10 plus 0..20 generated = 20; per sequence 1000 B of rows
    # + K 1000 x 20 x 2 B + V 500 x 20 x 34/32 B = 1000 + 40,000 + 10,625 = 51,625 B
    per_sequence = 1000 + 1000 * 20 * 2 + 500 * 20 * 34 / 32
    one = [cell.strip() for cell in rows[0]]
    assert one[:3] == ["1", "1", "20"]
    roof_one = 4.8e12 / (1e9 + per_sequence)
    assert one[4] == f"{roof_one:,.1f}"
    assert one[5] == "10.0"  # the client's per-user tok/s: 20 decoded tokens over 2 s
    assert one[6] == f"{10 / roof_one:.1%}"
    assert one[-1].startswith("one user at 0% of the card's bandwidth limit: latency-bound")
    four = [cell.strip() for cell in rows[1]]
    roof_batch = 4 * 4.8e12 / (1e9 + 4 * per_sequence)
    assert four[1] == "4" and four[8] == f"{roof_batch:,.1f}"
    assert four[-1].startswith("4 sequences at 0% of the batch's bandwidth limit: not memory-bound")


def test_a_cpu_run_and_a_run_without_decode_bytes_say_why_the_roofline_is_left_out(kit):
    cpu = section_lines(write_report([two_step_run(kit, "cpu", model=model())]).read_text())
    assert "Left out: the run recorded no GPU (a CPU machine): its memory bandwidth is not known here." in cpu
    unknown = section_lines(write_report([two_step_run(kit, "old", rig=H200, model=model(None))]).read_text())
    assert any("records no decode bytes for model m.gguf (abababababab); give its GGUF with --gguf" in line
               for line in unknown)


def test_rigbench_report_takes_the_bytes_from_the_gguf_given(kit, tiny_model, monkeypatch, tmp_path):
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    l4 = RigInfo(kind="aws", instance_type="g6.xlarge", region="us-east-1")
    path = two_step_run(kit, "l4", rig=l4, model=model(None, sha256=file_sha256(tiny_model)))
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(path), "--gguf", str(tiny_model)])
    assert result.exit_code == 0, result.output
    lines = section_lines((path / "report.md").read_text())
    assert "NVIDIA L4, 300 GB/s peak memory bandwidth (instance type g6.xlarge" in lines[2]
    assert f"GGUF tensor table ({tiny_model.name}), 21 tensors" in lines[2]
    wrong = runner.invoke(app, ["report", str(path), "--gguf", str(path / "manifest.json")])
    refused = str(wrong.exception)  # main() prints it as one line and exits with its code
    assert wrong.exception.exit_code == 2 and "--gguf" in refused and "is not the model of any given run" in refused


def test_the_plan_table_shows_the_share_of_the_roof_at_capacity(kit):
    path = two_step_run(kit, "plan", rig=H200, model=model())
    args = ["plan", "--users", "8", "--min-tok-s", "5", "--ttft-p90", "1", str(path), "--price-as", "p5en.48xlarge"]
    result = CliRunner().invoke(app, args)  # an H200 run: priced as its share of a p5en.48xlarge
    assert result.exit_code == 0, result.output
    table = [line.split("|")[1:-1] for line in result.output.splitlines() if line.startswith("|")]
    column = [cell.strip() for cell in table[0]].index("aggregate, of the measured card's bandwidth roof")
    share = table[2][column].strip()  # the first plan, below the header and its rule
    assert share.endswith("% at 4 users")  # both steps meet the targets: the share is the 4-user step's
    section = build_section(path, PriceBook.default())
    assert section.roofline is not None
    four = section.roofline.steps[1]
    assert share == f"{four.aggregate / four.roof_batch:.1%} at 4 users"


@pytest.mark.parametrize("window", [1, 7, 15, 40])
def test_sliding_sum_is_the_sum_of_the_positions_a_sliding_layer_reads(window):
    rng = np.random.default_rng(window)
    first, count = rng.integers(0, 30, 50), rng.integers(1, 30, 50)
    expected = [sum(min(c, window) for c in range(p, p + n)) for p, n in zip(first, count, strict=True)]
    assert sliding_sum(first, count, window).tolist() == pytest.approx(expected)


def test_cache_types_come_from_the_server_flags():
    assert cache_types(["-m", "x.gguf"]) == ("f16", "f16")
    assert cache_types(["--cache-type-k", "q8_0", "-ctv", "Q4_0"]) == ("q8_0", "q4_0")
    assert bytes_per_value("q8_0") == 34 / 32 and bytes_per_value("f32") == 4
    assert bytes_per_value("nonsense") is None


def test_an_open_loop_batch_is_the_mean_count_of_requests_decoding_in_the_window():
    window = SimpleNamespace(window_start=100.0, window_end=110.0, window_seconds=10.0, open_loop=True, users=0)
    records = pd.DataFrame({
        "t_first_token": [101.0, 105.0, 90.0, 120.0, np.nan],
        "t_last_token": [103.0, 115.0, 120.0, 130.0, np.nan],  # 2 s, 5 s, the whole 10 s, none; one never started
    })
    assert in_flight(records, window) == pytest.approx((2 + 5 + 10) / 10)
    assert step_batch(records, window, slots=None) == pytest.approx(1.7)
    assert step_batch(records, window, slots=1) == 1.0
    closed = SimpleNamespace(**{**window.__dict__, "open_loop": False, "users": 64})
    assert step_batch(records, closed, slots=16) == 16.0
