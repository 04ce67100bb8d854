"""Across nodes: pair results of traffic patterns, localisation of a bad node, NIC, link or path, and the
fabric verdicts."""
