"""Studies: whole experiments, each one command of ``rigbench study`` (``rigbench/commands/study.py``).

    gpu_study.py          build, models, ceilings, autotune, greedy check, sweeps, drafter arms, long context, slots
    real_gemma.py         the real Gemma 3 270M on a GPU: ceilings, sampling, slot choice, unified KV, a drafter
    real_gemma_report.py  its tables, written from the runs
    mps_study.py          the whole card: replicas with and without CUDA MPS, by count
    mps_report.py         the MPS study's cross-run report
    sessions_study.py     one-shot prompts, then conversations, then the most conversation users meeting a target
    slot_layout.py        does it matter which llama-server slots are busy? (a probe on the real server)
    fidelity_report.py    the load generator's fidelity on this machine, as a compact report
    peers/                rigbench beside servebench and guidellm against the ground-truth server
    rehearsal/            loopback stand-ins for a rig's surroundings: sshd, the hub, the metadata service, S3
    gpu_check.sh          the CUDA path of the build on a bare GPU machine, with llama-bench
    quality_gpu.sh        the quantization ladder on a bare GPU machine (``rigbench study ladder``)
    real_gemma_bundle.sh  what a GPU machine without a package index needs, packed here in call-sized parts
    real_gemma_device.sh  their set-up there, and a study (or any rigbench command) started detached
    rehearsal_bundle.sh   Debian's openssh-server and the libraries it loads, unpacked for a machine without sshd

The GPU study's report is ``analysis.study_report`` (``rigbench study report``). On a GPU machine
where the project is not installed, run from the repository root: ``python3 -m rigbench study gpu --help``.
"""
