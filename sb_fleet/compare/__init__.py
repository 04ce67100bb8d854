"""Layer 6, two fleets side by side: speedup per metric, per model and per model group."""
