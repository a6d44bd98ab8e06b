"""Prometheus text and /slots parsing (the scrape itself is covered by the sweep tests)."""

from __future__ import annotations

from loadtest.telemetry import count_slots, parse_metrics

LLAMA_METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 567
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# TYPE demo_seconds histogram
demo_seconds_bucket{le="0.5"} 2
demo_seconds_bucket{le="+Inf"} 4
demo_seconds_sum 1.5
demo_seconds_count 4
"""


def test_parse_metrics_keeps_names_and_labels() -> None:
    values = parse_metrics(LLAMA_METRICS)
    assert values["llamacpp:prompt_tokens_total"] == 1234
    assert values["llamacpp:tokens_predicted_total"] == 567
    assert values["llamacpp:requests_processing"] == 3
    assert values['demo_seconds_bucket{le="0.5"}'] == 2
    assert values["demo_seconds_count"] == 4


def test_count_slots() -> None:
    slots = [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}, {"id": 2, "is_processing": True}]
    assert count_slots(slots) == (3, 2)
    assert count_slots({"error": "disabled"}) == (None, None)
