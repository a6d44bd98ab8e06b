"""rigbench stage: provision."""
