"""rigbench: which GPU, which model, which settings, at what cost per token.

The shared vocabulary of every stage lives here (profiles, run-directory models, errors,
the GPU instance table); each stage package (``infra``, ``provision``, ``loadtest``,
``analysis``) imports from here and never from another stage's internals.
"""

__version__ = "0.1.0"
