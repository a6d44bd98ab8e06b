"""Entry point Pulumi runs (``main: infra/`` in Pulumi.yaml): it only wires, see infra/program.py.

Pulumi puts this folder first on ``sys.path``; no module here is named like a top-level module
of the virtualenv (a test checks), so nothing is shadowed, and ``infra`` itself comes from the
project installed in ``.venv`` (``make demo`` or ``make test`` installs it).
"""

from infra.program import deploy

deploy()
