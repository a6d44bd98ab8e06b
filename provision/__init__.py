"""rigbench stage: provision — turn a bare GPU instance into a serving rig, over SSH (Fabric).

Local rig (no SSH):
    llamacpp_build.py   pinned llama.cpp source, cached build (stdlib only: also runs on rigs)
    synthetic_models.py tiny random-weight GGUF models for tests and the local rig
    local_server.py     llama-server as a local child process

Remote rig (each step a plain function of a Fabric Connection, safe to run twice):
    rig.py              connection, host keys pinned per stack, named steps, errors
    rig_agent.py        rig-side helper (stdlib only): download, health, probe, port check
    toolkit.py          driver, CUDA version, nvcc; CUDA toolkit from NVIDIA's apt repository
    remote_build.py     llamacpp_build.py run on the rig for its GPU
    download.py         model and drafter, resumable, sha256 verified
    serve.py            llama-server as a systemd unit or a supervised process; stop, status, logs
    bench.py            llama-bench pp512/tg128 at the profile's settings
    tunnel.py           a local port forwarded to the rig's llama-server
    remote_sweep.py     project install, load sweep on the rig, fetch of run directories
    run_metadata.py     build, digests, GPU and instance written into fetched manifests
    fabfile.py          Fabric tasks (`fab -r provision -H ubuntu@HOST up`)
"""
