"""The app: the ``rigbench`` command, the local rig, autotune and the studies.

This is the only layer that composes stages (``infra``, ``provision``, ``llamacpp``,
``loadtest``, ``quality``, ``analysis``, ``hardware``); they import only the base (``core``) and
meet in the run directory.

    cli.py              the console script; one module per command in commands/
    local_rig.py        build, model, server(s), then the sweep of sweep_runs.py, and the report
    load_options.py     the one load option set: flags and a --load file read into LoadSettings once
    sweep_runs.py       sweep servers with one load (rigbench sweep and rigbench local)
    model_downloads.py  a profile's model files here, fetched and checked (rigbench models download)
    served_model.py     the file a server on this machine serves, for a sweep's manifest
    autotune.py         serving flags tried on this card, every trial recorded
    provision_steps.py  the one table of provision steps (rigbench provision, fab)
    studies/            experiments run in one command on a lent GPU, and their reports
"""

__version__ = "0.1.0"
