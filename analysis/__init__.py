"""rigbench stage: analysis."""
