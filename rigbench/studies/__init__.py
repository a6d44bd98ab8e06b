"""Studies: whole experiments in one command, for a GPU machine lent for minutes, and their reports.

    gpu_study.py     build, models, ceilings, autotune, greedy check, sweeps, drafter arms, long context
    study_report.py  REPORT.md and plots from a study's folder (``rigbench study-report``)
    slot_layout.py   does it matter which llama-server slots are busy? (a probe on the real server)
    gpu_check.sh     the CUDA path of the build on a bare GPU machine, with llama-bench

Run from the repository root: ``python -m rigbench.studies.gpu_study --help``.
"""
