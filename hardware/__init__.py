"""Hardware telemetry while a run measures: GPU power, energy, utilisation and clocks (NVIDIA's management
library, or ``nvidia-smi`` where the binding cannot load) and CPU energy (RAPL), into the run directory."""
