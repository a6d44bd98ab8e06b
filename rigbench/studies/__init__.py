"""Studies: whole experiments, each one command of ``rigbench study`` (``rigbench/commands/study.py``).

    gpu_study.py        build, models, ceilings, autotune, greedy check, sweeps, drafter arms, long context, slots
    peers/              rigbench beside servebench and guidellm against the ground-truth server
    fidelity_report.py  the load generator's fidelity on this machine, as a compact report
    slot_layout.py      does it matter which llama-server slots are busy? (a probe on the real server)
    gpu_check.sh        the CUDA path of the build on a bare GPU machine, with llama-bench
    quality_gpu.sh      the quantization ladder on a bare GPU machine (``rigbench study ladder``)

The GPU study's report is ``analysis.study_report`` (``rigbench study report``). On a GPU machine
where the project is not installed, run from the repository root: ``python3 -m rigbench study gpu --help``.
"""
