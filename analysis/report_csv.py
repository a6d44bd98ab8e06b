"""``steps.csv`` and ``requests.csv``: a report's figures and records for spreadsheets and pandas.

``steps.csv`` is long ("tidy"): one row per run x step x figure, with the figure's value, its 95%
interval (``low``, ``high``), ``n`` and ``method``, so one filter or pivot gives any table and no
column layout has to change when a figure is added. It holds every figure of summary.json's steps
(read from the same ``StepFigures.to_dict``, so the two files cannot disagree): a percentile
figure is named ``<figure>_<p50|p90|p99>``, a count per kind ``<figure>_<kind>`` (``errors_timeout``),
a plain number has no interval, n or method. $/Mtok is one ``usd_per_mtok`` row per step and price,
with the price's label in ``price``. A step judged against service-level targets has its goodput figures
(``goodput_...``) and, per target, a row ``goodput_verdict_<target>`` with the target in seconds in ``value``
and the verdict (meets, unclear, misses) in ``method``.

``requests.csv`` is one row per request record of every run, with the RequestRecord fields as
the analysis reads them (``timings`` flattened to ``timings_<key>``; ``/tokenize`` counts of cut
requests merged into ``streamed_tokens``), whole numbers without a decimal point (empty when absent),
floats in their shortest exact form (pandas reads back the exact bits), text quoted, true/false.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from analysis.load import TIMING_KEYS
from analysis.report_model import Report, RunSection
from core.rundir import RequestRecord
from core.whole_files import whole_file

STEPS_CSV = "steps.csv"
REQUESTS_CSV = "requests.csv"
STEP_KEYS = ("run_id", "label", "step", "users", "rate", "context_tokens")
FIGURE_COLUMNS = ("figure", "price", "value", "low", "high", "n", "method")
IDENTITY = {"index", "users", "rate", "context_tokens"}


def _is_estimate(value: object) -> bool:
    return isinstance(value, dict) and {"value", "low", "high", "n", "method"} <= set(value)


def _figure_rows(name: str, value: object) -> list[dict]:
    """One figure of ``StepFigures.to_dict`` as rows: an estimate, a dict of them or of numbers, a number."""
    if _is_estimate(value):
        return [{"figure": name, **value}]
    if isinstance(value, dict):
        return [row for key, item in value.items() for row in _figure_rows(f"{name}_{key}", item)]
    if isinstance(value, bool | int | float) or value is None:
        return [{"figure": name, "value": None if value is None else float(value)}]
    return []


def step_frame(sections: list[RunSection]) -> pd.DataFrame:
    """Every figure of every step of every run, one row each (see the module's docstring)."""
    rows = []
    for section in sections:
        run_id = section.figures.run.manifest.run_id
        for step, costs in zip(section.figures.steps, section.cost_rows, strict=True):
            keys = {
                "run_id": run_id,
                "label": section.label,
                "step": step.index,
                "users": step.users,
                "rate": step.rate,
                "context_tokens": step.context_tokens,
            }
            for name, value in step.model_dump().items():
                if name not in IDENTITY:
                    rows += [{**keys, **row} for row in _figure_rows(name, value)]
            for label, cost in zip(section.cost_labels, costs, strict=True):
                rows.append({**keys, "figure": "usd_per_mtok", "price": label, **cost.to_dict()})
            for key, judgement in (step.goodput.targets.items() if step.goodput is not None else ()):
                rows.append({**keys, "figure": f"goodput_verdict_{key}", "value": judgement.target_s,
                             "method": judgement.verdict})
    frame = pd.DataFrame(rows, columns=[*STEP_KEYS, *FIGURE_COLUMNS])
    frame["n"] = frame["n"].astype("Int64")
    for column in ("value", "low", "high", "rate"):
        frame[column] = frame[column].astype(float)
    return frame


def record_columns() -> list[str]:
    """The columns in RequestRecord's field order, ``timings`` flattened as load.py does."""
    columns = []
    for name in RequestRecord.model_fields:
        if name == "schema_version":
            continue
        columns += [f"timings_{key}" for key in TIMING_KEYS] if name == "timings" else [name]
    return columns


def request_table(section: RunSection) -> pa.Table:
    """Every request record of one run, ``run_id`` and ``label`` first."""
    records = section.figures.run.records
    rows = len(records)
    columns = {
        "run_id": pa.repeat(pa.scalar(section.figures.run.manifest.run_id, pa.string()), rows),
        "label": pa.repeat(pa.scalar(section.label, pa.string()), rows),
    }
    for name in record_columns():
        column = records[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            columns[name] = pa.array(column, from_pandas=True).dictionary_decode()
        elif not pd.api.types.is_numeric_dtype(column.dtype):
            columns[name] = pa.array(column, pa.string(), from_pandas=True)
        else:  # NaN written as missing (empty); a whole float is written as Arrow writes it, without ".0"
            columns[name] = pa.array(column.to_numpy(), from_pandas=True)
    return pa.table(columns)


def write_requests_csv(sections: list[RunSection], path: Path) -> None:
    """requests.csv through Arrow's CSV writer (C++: a million records in a second, where pandas takes
    tens): the header unquoted, text quoted, floats in their shortest exact form, missing values empty."""
    names = ["run_id", "label", *record_columns()]
    with whole_file(path, "wb") as sink:
        sink.write((",".join(names) + "\n").encode())
        for section in sections:
            pa_csv.write_csv(request_table(section), sink, pa_csv.WriteOptions(include_header=False))


def write_csv(report: Report) -> list[Path]:
    """``steps.csv`` and ``requests.csv`` in the report's folder."""
    steps, requests = report.out_dir / STEPS_CSV, report.out_dir / REQUESTS_CSV
    with whole_file(steps) as sink:
        step_frame(report.sections).to_csv(sink, index=False)
    write_requests_csv(report.sections, requests)
    return [steps, requests]
