"""Entry point Pulumi runs (``main: infra/`` in Pulumi.yaml): it only wires, see infra/program.py."""

import sys
from pathlib import Path

# Pulumi puts infra/ itself on sys.path; the project root is needed for `infra.*` and `rigbench.*`
# when the package is not installed into the virtualenv.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from infra.program import deploy  # noqa: E402

deploy()
