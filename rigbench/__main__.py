"""``python -m rigbench``: the console script, for machines where only the package is on the path."""

from rigbench.cli import main

main()
