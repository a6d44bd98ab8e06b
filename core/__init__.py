"""The base: the shared vocabulary every stage and the app speak, importing no stage.

    errors.py          one error class per stage, all under RigbenchError
    validation.py      pydantic errors as one line naming the file and field
    profile.py         rig profiles (profiles/*.toml): what a rig serves and how
    instance_types.py  the GPU instance types the project knows
    machine.py         the machine a run happens on (CPU, memory, GPU, driver)
    build_manifest.py  what a llama.cpp build left behind (binaries, options, key)
    llama_bench.py     llama-bench's flags for a serving line, and its JSON summarised
    lists.py           the strict parser of list options (user steps, windows, depths)
    cache.py           the one cache root (RIGBENCH_CACHE, XDG_CACHE_HOME)
    digest.py          file sha256
    network.py         a free loopback port
    rundir/            the run directory: models, files, manifest builder, check, compact, schema
"""
