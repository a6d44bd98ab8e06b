"""Stage: llama.cpp on this machine — the toolbox the local rig, autotune and studies use.

    build_script.py     fetch the pinned source and build, cached (stdlib only: also runs alone on rigs)
    build.py            that build here, in the project's cache, as a typed BuildManifest
    server.py           llama-server as a child process on a free loopback port
    synthetic_models.py llama-architecture GGUF files with random weights (tests, the local rig)
    gemma4_shapes.py    Gemma 4's shapes per preset (the table the writer and decode bytes read)
    gemma4_tensors.py   the tensors of a Gemma 4 model and its MTP drafter, from the shapes
    synthetic_gemma4.py Gemma 4-shaped GGUF files and MTP drafters with random weights
    quantize.py         llama-quantize here: the one path to it (ladder rungs, synthetic models, studies)
    decode_bytes.py     the bytes one decode step reads, from a GGUF's (or the writer's) tensor table
    model_facts.py      a served GGUF file as a manifest names it (sha256, synthetic label, decode bytes)
    llama_bench.py      llama-bench here: raw prompt and generation speed
    batched_bench.py    llama-batched-bench here: the card's decode ceiling for N sequences

Imports only the base (``core``); remote rigs are provision's business.
"""
