"""rigbench stage: loadtest."""
