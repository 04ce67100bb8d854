"""The measured figures: value, unit, direction and % of peak per metric (peaks from the facts)."""
