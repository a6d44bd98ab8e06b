"""rigbench stage: infra."""
