"""The harness every benchmark uses: the registry, parameters and metrics, timing context, result envelope."""
