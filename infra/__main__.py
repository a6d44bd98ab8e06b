"""Entry point Pulumi runs (``main: infra/`` in Pulumi.yaml): it only wires, see infra/program.py."""

import sys
from pathlib import Path

# Pulumi puts infra/ itself first on sys.path, where config.py would shadow any top-level `config`
# module; the program imports `infra.*` and `rigbench.*` from the project root instead (also when
# the package is not installed into the virtualenv).
_HERE = Path(__file__).resolve().parent
_ROOT = str(_HERE.parent)
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _HERE]
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from infra.program import deploy  # noqa: E402

deploy()
