"""Layer 3, the run directory: the contract between the commands. Atomic writes, the manifest, the run's
inputs read back, the runner's records, per-host outcomes, and the normaliser (raw files -> results-summary)."""
