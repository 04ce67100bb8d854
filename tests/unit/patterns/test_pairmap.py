"""The pair heatmap fragment: well-formed XML, every tested pair drawn twice (symmetric), culprits outlined,
failed pairs black, tooltips carry the evidence."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from sb_fleet.analysis.crossnode.localise import localise
from sb_fleet.analysis.crossnode.pair_map import render_pair_heatmap
from tests.synth.pairs import Faults, pair_matrix

HOSTS = [f"node{i}" for i in range(8)]


def test_heatmap_is_well_formed_and_shows_the_culprit():
    m = pair_matrix(HOSTS, Faults(nodes={"node3": 0.4}, failed={frozenset(("node1", "node6"))}), seed=2)
    loc = localise(m)
    html = render_pair_heatmap(m, loc)
    root = ET.fromstring(html)  # one element, parseable as XML: self-contained
    svg = root.find("{http://www.w3.org/2000/svg}svg")
    assert svg is not None
    rects = svg.findall("{http://www.w3.org/2000/svg}rect")
    cells = [r for r in rects if r.find("{http://www.w3.org/2000/svg}title") is not None]
    assert len(cells) == 2 * len(m.pairs)
    titles = [r.find("{http://www.w3.org/2000/svg}title").text for r in cells]
    failed = [r for r, t in zip(cells, titles, strict=True) if "failed" in t]
    assert len(failed) == 2 and all(r.get("fill") == "#111827" for r in failed)
    outlines = [r for r in rects if r.get("stroke") == "#dc2626"]
    assert len(outlines) == 2  # node3's row and column
    assert "node3 is slow with" in html and "<script" not in html


def test_large_fleet_shows_culprits_first_and_says_so():
    hosts = [f"h{i:03d}" for i in range(200)]
    m = pair_matrix(hosts, Faults(nodes={"h150": 0.5}), seed=1)
    html = render_pair_heatmap(m, localise(m), max_hosts=40)
    assert "showing 40 of 200 hosts" in html
    assert html.index(">h150<") < html.index(">h000<")


def test_pair_sections_read_a_run_directory(tmp_path):
    from sb_fleet.analysis.crossnode.localise import Localisation
    from sb_fleet.analysis.crossnode.pair_map import pair_sections

    m = pair_matrix(HOSTS, Faults(links={frozenset(("node2", "node5")): 0.3}), seed=4)
    loc = localise(m)
    assert Localisation.from_json(json.loads(json.dumps(loc.to_json()))) == loc
    (tmp_path / "pairs").mkdir()
    doc = {"matrix": m.to_json(), "localisation": loc.to_json(), "second_pass": [[["node2", "node5"]]]}
    (tmp_path / "pairs" / "tcp-bw.json").write_text(json.dumps(doc))
    (tmp_path / "pairs" / "broken.json").write_text("{")
    html = pair_sections(tmp_path)
    assert "node2 &lt;-&gt; node5" in html and "Second pass to confirm: 1 pair(s)" in html
    assert "broken.json: unreadable" in html
    assert pair_sections(tmp_path / "nope") == "" and pair_sections(tmp_path / "pairs" / "tcp-bw.json") == ""
