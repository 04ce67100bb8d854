"""Layer 6, the report: one judgement per run (rules, baseline, fleet-relative detection, gates, history)
and its files (report.json, report.md, report.html, junit.xml, quarantine.txt)."""
