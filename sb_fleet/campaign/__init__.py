"""Acceptance campaigns (issue 50, docs/campaigns.md): which nodes go on to the next stage, the campaign's durable
state in its directory, and the per-node acceptance records. Pure but for the state and record writes."""
