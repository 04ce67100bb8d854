"""SuperBench compatibility: metric names, rules and their criteria (parsed, never evaluated), result
diagnosis and summary tables, and generate-baseline."""
