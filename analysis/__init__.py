"""Stage: analysis. Run directories in; figures, prices, plans and reports out.

Public entry points (import them by full path; this package imports nothing heavy itself):

- ``analysis.report.write_report(run_dirs, out_dir=None, formats=("md",)) -> Path``: report.md
  (and/or report.html, steps.csv + requests.csv), summary.json, plots
- ``analysis.headline.headline_text(sections) -> str``: the answer at a glance a report opens with
  (best aggregate, knee, per-user floor, $/Mtok, what limited it; across runs which serves the most)
- ``analysis.load.load_run(path) -> LoadedRun``: a validated run as a pandas frame
- ``analysis.figures.run_figures(run, slo=None) -> RunFigures``: per-step figures with 95% intervals, and
  each step's goodput against service-level targets (``analysis.goodput``) where the run or ``slo`` has them
- ``analysis.compare.compare_runs(a, b)``: B/A ratios per step, paired by prompt category
- ``analysis.plan``: capacity plans; ``analysis.prices``: AWS prices and snapshots
- ``analysis.roofline.run_roofline(figures, decode_bytes)``: each step against the card's bandwidth roof
- ``analysis.summary.read_summary(path) -> Summary``: summary.json validated (its models and JSON Schema)
- ``analysis.gate.gate(run, baseline, thresholds) -> GateResult``: a run against a baseline, for CI
- ``analysis.speed_check``: how fast a million-record run is analysed

Imports only the base (``core``).
"""
