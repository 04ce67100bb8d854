"""Layer 1, the inputs a user writes: the config (YAML, validated), the inventory, gates and rules schemas,
traffic-pattern specs and container settings. Imports nothing of sb-fleet but the shared core."""
