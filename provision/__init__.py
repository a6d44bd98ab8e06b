"""Stage: provision — turn a bare GPU instance into a serving rig, over SSH (Fabric).

Each step is a plain function of a Fabric ``Connection``, safe to run twice; the app's table
(``rigbench/provision_steps.py``) puts them behind ``rigbench provision`` and ``fab``.

    connection.py    SSH connection, host keys pinned per stack, named steps, errors
    rig_paths.py     where things live on the rig (the NVMe work folder)
    stack.py         the rig a Pulumi stack made, from ``pulumi stack output``
    rig_agent.py     rig-side helper (stdlib only, runs alone): health, probe, port check; uploaded with
                     core/hub_download.py (the download rule, shared with rigbench models download)
    toolkit.py       driver, CUDA version, nvcc; CUDA toolkit from NVIDIA's apt repository
    build.py         the standalone build script (handed over by the caller) run for the rig's GPU
    download.py      model and drafter, resumable, sha256 verified; synthetic ones uploaded
    serve.py         llama-server as a systemd unit or a supervised process (one per replica); stop,
                     status, logs
    readiness.py     how long a serve took to be ready: /health and a first token per server
    llama_bench.py   llama-bench pp512/tg128 on the rig at the profile's settings
    tunnel.py        a local port forwarded to the rig's llama-server
    sweep.py         project install, load sweep on the rig, fetch of run directories
    resume.py        a rig sweep stopped by a spot notice finished from its copy here (upload, sweep --resume,
                     fetch)
    run_metadata.py  build, digests, GPU and instance written into fetched manifests

Imports only the base (``core``); the llama.cpp toolbox reaches a rig through the app.
"""
