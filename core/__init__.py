"""The base: the shared vocabulary every stage and the app speak, importing no stage.

    errors.py          one error class per stage, all under RigbenchError
    validation.py      pydantic errors as one line naming the file and field
    strict.py          the one strict pydantic base (unknown keys refused)
    profile.py         rig profiles (profiles/*.toml): what a rig serves and how
    instance_types.py  the GPU instance types the project knows
    machine.py         the machine a run's server is on (CPU, memory, GPU, driver): one description for all
    build_manifest.py  what a llama.cpp build left behind (binaries, options, key)
    llama_bench.py     llama-bench's flags for a serving line, and its JSON summarised
    lists.py           the strict parser of list options (user steps, windows, depths)
    wording.py         counts and lists as a reader reads them (1 user, 2 users; a, b and c)
    cache.py           the one cache root (RIGBENCH_CACHE, XDG_CACHE_HOME)
    digest.py          file sha256
    network.py         a free loopback port; whether a URL names this machine
    table_file.py      a table of settings as a TOML or JSON file, read whole
    hub_download.py    a hub file resumed and sha256-checked (stdlib only: also runs alone on rigs)
    private_files.py   every file a command writes private to the user (the umask)
    load_file.py       a load written as a file (LoadSettings' fields): --load, the rig's upload
    sweep_result.py    the runs a sweep made, as rigbench sweep --result writes them
    quality_settings.py  an eval's and a ladder's settings, one model each, read from a file and flags
    rundir/            the run directory: models, files, manifest builder, check, compact, schema
"""
