"""The page template of report.html: markup, style and script, all inline."""

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<script>
// Installed first, so that an error anywhere later on the page is recorded on <html>.
window.__errors = [];
window.addEventListener("error", function (e) {
  window.__errors.push(String(e.message || e));
  document.documentElement.setAttribute("data-errors", String(window.__errors.length));
});
</script>
<style>
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2430; background: #f6f7f9; }
header { padding: 16px 24px; color: #fff; }
header.pass { background: #1e7d3b; } header.fail { background: #b3261e; }
header h1 { margin: 0 0 4px; font-size: 22px; }
main { padding: 16px 24px; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin-bottom: 16px; }
.card { background: #fff; border-radius: 6px; padding: 10px 16px; min-width: 110px; box-shadow: 0 1px 2px #0002; cursor: pointer; }
.card b { display: block; font-size: 24px; }
.v-pass { color: #1e7d3b; } .v-fail { color: #b3261e; } .v-incomplete { color: #a15c00; } .v-missing { color: #5b5b9a; }
section { background: #fff; border-radius: 6px; padding: 12px 16px; margin-bottom: 16px; box-shadow: 0 1px 2px #0002; }
h2 { font-size: 17px; margin: 0 0 10px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
tr.host:hover { background: #eef3fb; cursor: pointer; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr)); gap: 12px; }
.plot { border: 1px solid #e3e6ea; border-radius: 4px; padding: 6px; }
.plot h3 { font-size: 13px; margin: 0 0 4px; font-family: ui-monospace, monospace; word-break: break-all; }
.plot .note { font-size: 12px; color: #5a6270; }
svg.dots { display: block; max-width: 560px; height: auto; }
svg .bar { fill: #7ea6d8; } svg .median { stroke: #1d2430; stroke-dasharray: 3 2; }
svg .limit { stroke: #b3261e; stroke-dasharray: 5 3; } svg .flag { fill: #d93025; stroke: #fff; cursor: pointer; }
svg .axis { stroke: #9aa3ae; } svg text { font-size: 10px; fill: #5a6270; }
#drill { position: sticky; top: 0; }
.scroll { max-height: 420px; overflow-y: auto; }
.controls { display: flex; gap: 8px; margin-bottom: 8px; }
input, select { font: inherit; padding: 3px 6px; }
code, .mono { font-family: ui-monospace, monospace; font-size: 12px; }
.muted { color: #5a6270; }
.figplots { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 8px; }
.fig-plot { margin: 0; border: 1px solid #e3e6ea; border-radius: 4px; padding: 6px; max-width: 520px; }
.fig-plot figcaption { font-size: 12px; max-width: 500px; }
table.figs td, table.figs th { padding: 3px 8px; } table.ranks { width: auto; margin: 4px 0 4px 12px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
header ul { margin: 4px 0; padding-left: 20px; font-size: 15px; }
header .notes { background: #ffffff22; border-radius: 4px; padding: 4px 8px; margin: 6px 0; display: inline-block; }
header a, header .hostchip { color: #fff; } [hidden] { display: none !important; }
.hostchip { display: inline-block; font-family: ui-monospace, monospace; font-size: 12px; padding: 1px 6px; margin: 2px 3px 2px 0; border-radius: 10px; border: 1px solid currentColor; cursor: pointer; text-decoration: none; }
a[data-host] { cursor: pointer; }
.chips { display: flex; flex-wrap: wrap; gap: 6px; margin: 6px 0; }
.chip { font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #e9f3ec; }
.chip-warn { background: #fdf0dc; } .chip-fail { background: #fbe3e1; font-weight: 600; }
.finding { border-left: 4px solid #9aa3ae; padding: 4px 10px; margin: 8px 0; }
.finding.fails { border-color: #b3261e; } .finding.warning { border-color: #d9a100; } .finding.not_again { border-color: #7ea6d8; }
.finding h3 { margin: 0 0 4px; }
.effect { font-weight: 700; } .fails .effect { color: #b3261e; } .warning .effect { color: #8a6100; } .not_again .effect { color: #1f5fa8; }
.legend { font-size: 12px; color: #5a6270; margin: 0 0 8px; }
.legend svg { vertical-align: middle; }
svg .ev-ok { fill: #1f5fa8; } svg .ev-flagged { fill: #d93025; } svg .ev-too_noisy { fill: #8a9099; } svg .ev-unjudged { fill: #d5d9de; stroke: #8a9099; }
svg .ev-dot { cursor: pointer; stroke: #fff; stroke-width: 1; } svg .ev-unjudged.ev-dot { stroke: #8a9099; }
svg .ev-rerun { fill: #fff; stroke-width: 1.5; cursor: pointer; } svg .band { fill: #e3f1e6; }
svg .err { stroke: #3b4350; stroke-width: 1.2; } svg .lim { stroke: #b3261e; stroke-width: 2; }
svg .ref { stroke: #1d2430; stroke-dasharray: 3 2; } svg .hlabel { font-size: 11px; fill: #1d2430; cursor: pointer; font-family: ui-monospace, monospace; }
svg .hlabel.flagged { fill: #b3261e; font-weight: 700; } svg .hlabel.too_noisy { fill: #6b7280; }
svg .rowhit { fill: transparent; cursor: pointer; } svg .rowhit:hover { fill: #eef3fb; }
.badge { font: 600 11px system-ui, sans-serif; padding: 1px 6px; border-radius: 8px; margin-left: 6px; color: #fff; background: #1f5fa8; }
.badge.flagged { background: #d93025; } .badge.too_noisy { background: #8a9099; } .badge.inconsistent { background: #a15c00; }
button { font: inherit; padding: 4px 10px; cursor: pointer; }
#drill { max-height: 70vh; overflow: auto; border: 2px solid #1f5fa8; }
#drill-close { float: right; }
</style>
</head>
<body>
<header id="head"><h1 id="title">sb-fleet report</h1><ul id="failed-by"></ul><div id="notes" class="notes" hidden></div><div id="counted"></div><div id="subtitle"></div></header>
<main>
<div class="cards" id="cards"></div>
<section id="drill" hidden><button id="drill-close" title="close">&times;</button><h2 id="drill-title"></h2><div id="drill-body"></div></section>
<section id="findings-sec" hidden><h2 id="findings-title">Findings across hosts</h2><div id="findings"></div></section>
<section id="hosts-sec"><h2 id="hosts-title">Hosts to act on</h2>
<div class="controls"><input id="q" placeholder="find a host (any verdict)" size="30">
<select id="vf"><option value="">all verdicts</option><option>fail</option><option>incomplete</option><option>missing</option><option>flaky</option><option value="out_of_service">out of service</option></select>
<span id="shown" class="muted"></span></div>
<div class="scroll" id="hosts-wrap"><table id="hosts"><thead><tr><th>Host</th><th>Verdict</th><th>Outcome</th><th>Categories</th><th>Metric</th><th>Value</th><th>Against</th><th>Reference</th><th>Deviation</th><th>Noise &sigma;</th><th>Main finding</th></tr></thead><tbody></tbody></table></div>
</section>
<section id="evidence-sec" hidden><h2 id="evidence-title">Evidence per metric</h2>
<div class="legend" id="evidence-legend"></div>
<div class="plots" id="evidence"></div>
<p><button id="evidence-all" hidden></button></p></section>
<section id="later-sec" hidden><h2 id="later-title">Warnings</h2><div id="later"></div></section>
<section id="dist-sec" hidden><h2>Metric distributions</h2>
<p class="muted">Histogram of every value of the family across the fleet (GPUs and NICs pooled); dashed black: fleet median; dashed red: fleet-check limit; red dots: flagged values (click for the host).</p>
<div class="plots" id="plots"></div></section>
<!--@@HEALTH@@-->
<!--@@FIGURES@@-->
<section id="rules-sec" hidden><h2>Rules</h2><table id="rules"><thead><tr><th>Rule</th><th>Function</th><th>Criteria</th><th>Metrics</th><th>Hosts violating</th></tr></thead><tbody></tbody></table></section>
<section id="problems-sec" hidden><h2>Input problems and warnings</h2><ul id="problems"></ul></section>
<!--@@MORE@@-->
</main>
<script type="application/json" id="report-data">@@DATA@@</script>
<script>
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) { for (var k in attrs) { e.setAttribute(k, attrs[k]); } }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "-"; }
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) { return v.toExponential(3); }
    return Number(v.toPrecision(5)).toString();
  }
  function pct(v) { return (v === null || v === undefined) ? "" : (v >= 0 ? "+" : "") + (v * 100).toFixed(1) + "%"; }

  var H = D.head;
  var passed = H.passed;
  document.getElementById("head").className = passed ? "pass" : "fail";
  var titleEl = document.getElementById("title");
  if (passed) {
    titleEl.textContent = "Gate passed" + (H.notes.length ? " \u2014 with " + H.notes.length + " warning(s)" : "");
  } else {
    titleEl.textContent = "Gate failed" + (H.failed_by.length ? ": " + H.failed_by[0] : "");
  }
  var fb = document.getElementById("failed-by");
  H.failed_by.slice(1).forEach(function (t) { fb.appendChild(el("li", null, t)); });
  if (H.notes.length) {
    var nt = document.getElementById("notes");
    nt.hidden = false;
    nt.textContent = (passed ? "Warnings: " : "Also (warnings, not the reason): ") + H.notes.join("; ");
  }
  document.getElementById("subtitle").textContent = D.gate.failing_hosts + " host(s) counted as failing, " +
    D.gate.allowed_failing_hosts + " allowed (" + D.gate.policy + ") \u2014 " + D.source + " \u2014 " + D.generated;

  var byName = {};
  D.bad_hosts.forEach(function (h) { byName[h.name] = h; });
  var passSet = {};
  D.pass_hosts.forEach(function (n) { passSet[n] = true; });
  var countedSet = {};
  D.counted.forEach(function (v) { countedSet[v] = true; });
  function hostLink(name, cls) {
    var a = el("a", {"class": cls || "hostchip", "data-host": name, href: "#host=" + encodeURIComponent(name)}, name);
    return a;
  }
  // The hosts the gate counts (and those a gate reason names), one click each from the top.
  var counted = D.bad_hosts.filter(function (h) { return countedSet[h.verdict]; }).map(function (h) { return h.name; });
  (D.gate.reasons || []).forEach(function (r) {
    (r.hosts || []).forEach(function (n) { if (counted.indexOf(n) < 0) { counted.push(n); } });
  });
  if (counted.length) {
    var cdiv = document.getElementById("counted");
    cdiv.appendChild(document.createTextNode("Hosts behind the verdict (" + counted.length + "): "));
    counted.slice(0, 24).forEach(function (n) { cdiv.appendChild(hostLink(n)); });
    if (counted.length > 24) { cdiv.appendChild(document.createTextNode(" and " + (counted.length - 24) + " more (table below)")); }
  }

  var cards = document.getElementById("cards");
  [["hosts", "all hosts", ""], ["pass", "pass", "v-pass"], ["fail", "fail", "v-fail"],
   ["incomplete", "incomplete", "v-incomplete"], ["missing", "missing", "v-missing"], ["flaky", "flaky", "v-incomplete"],
   ["out_of_service", "out of service", "v-missing"]].forEach(function (c) {
    if ((c[0] === "flaky" || c[0] === "out_of_service") && !D.summary[c[0]]) { return; }
    var d = el("div", {"class": "card " + c[2]});
    d.appendChild(el("b", null, D.summary[c[0]] || 0));
    d.appendChild(el("span", null, c[1]));
    d.addEventListener("click", function () {
      document.getElementById("vf").value = (c[0] === "hosts" || c[0] === "pass") ? "" : c[0];
      renderHosts();
      document.getElementById("hosts-sec").scrollIntoView();
    });
    cards.appendChild(d);
  });

  // Each host's rows of the evidence: host -> [[metric evidence, its host entry]]
  var evByHost = {};
  D.evidence.forEach(function (e) {
    e.hosts.forEach(function (h) { (evByHost[h.name] = evByHost[h.name] || []).push([e, h]); });
  });
  var STATUS_WORD = {flagged: "flagged", too_noisy: "too noisy", inconsistent: "inconsistent", ok: "ok", unjudged: "not judged"};
  function dirWord(d) { return d > 0 ? "higher is better" : (d < 0 ? "lower is better" : "direction unknown"); }

  function table(head, rows) {
    var t = el("table");
    var hr = el("tr");
    head.forEach(function (x) { hr.appendChild(el("th", null, x)); });
    t.appendChild(hr);
    rows.forEach(function (r) {
      var tr = el("tr");
      r.forEach(function (c) { tr.appendChild(c instanceof Node ? (function () { var td = el("td"); td.appendChild(c); return td; })() : el("td", null, c)); });
      t.appendChild(tr);
    });
    return t;
  }

  function drill(name) {
    var sec = document.getElementById("drill");
    var body = document.getElementById("drill-body");
    body.textContent = "";
    sec.hidden = false;
    var h = byName[name];
    var title = document.getElementById("drill-title");
    if (!h) {
      title.textContent = name + ": " + (passSet[name] ? "pass" : (evByHost[name] ? "named in a finding" : "not in this report"));
      if (passSet[name]) { body.appendChild(el("p", {"class": "muted"}, "No issue: every check passed.")); }
    } else {
      title.textContent = h.name + ": " + h.verdict + " (outcome " + h.outcome + ")";
      if (h.reason) { body.appendChild(el("p", null, h.reason)); }
      if (h.issues.length) {
        body.appendChild(table(["Check", "Category", "Metric", "Value", "Against", "Reference", "Deviation", "Noise \u03c3", "Explanation"],
          h.issues.map(function (i) {
            return [i.check, i.category, i.metric, fmt(i.value), i.basis, fmt(i.reference), pct(i.deviation),
              i.noise_sigmas !== null && i.noise_sigmas !== undefined ? i.noise_sigmas.toFixed(1) : "", i.detail];
          })));
      }
    }
    var mine = D.findings.filter(function (f) { return findingHosts(f).indexOf(name) >= 0; });
    if (mine.length) {
      body.appendChild(el("h3", null, "Findings naming " + name));
      var ul = el("ul");
      mine.forEach(function (f) { ul.appendChild(el("li", null, EFFECT[f.effect] + ": " + findingText(f))); });
      body.appendChild(ul);
    }
    var ev = evByHost[name];
    if (ev && ev.length) {
      var order = {flagged: 0, too_noisy: 1, unjudged: 2, ok: 3};
      ev = ev.slice().sort(function (a, b) { return (order[a[1].status] || 9) - (order[b[1].status] || 9); });
      body.appendChild(el("h3", null, "Its values against the other hosts (" + ev.length + " metric(s))"));
      body.appendChild(table(["Metric", "Status", "Value", "Its reference", "Limit", "Deviation", "Own noise", "Judged with \u03c3", "Re-run"],
        ev.map(function (p) {
          var e = p[0], x = p[1];
          var lim = fmt(x.limit) + (x.limit_hi !== null && x.limit_hi !== undefined ? " \u2013 " + fmt(x.limit_hi) : "");
          return [e.metric + (e.partition ? " [" + e.partition + "]" : ""), STATUS_WORD[x.status] || x.status, fmt(x.value),
            fmt(x.reference), lim, x.reference ? pct(x.value / x.reference - 1) : "",
            x.noise !== null && x.noise !== undefined ? (x.noise * 100).toFixed(1) + "%" : "-",
            x.sigma !== null && x.sigma !== undefined ? (x.sigma * 100).toFixed(1) + "%" : "-", fmt(x.rerun)];
        })));
    }
    sec.scrollIntoView();
  }
  document.getElementById("drill-close").addEventListener("click", function () { document.getElementById("drill").hidden = true; });
  // Anything that names a host (a chip, a link, a dot of a plot) opens its drill-down.
  document.addEventListener("click", function (ev) {
    var t = ev.target && ev.target.closest ? ev.target.closest("[data-host]") : null;
    if (!t) { return; }
    ev.preventDefault();
    drill(t.getAttribute("data-host"));
  });

  function renderHosts() {
    var q = document.getElementById("q").value.trim().toLowerCase();
    var vf = document.getElementById("vf").value;
    var tb = document.querySelector("#hosts tbody");
    tb.textContent = "";
    var rows = D.bad_hosts.filter(function (h) {
      return (!vf || h.verdict === vf) && (!q || h.name.toLowerCase().indexOf(q) >= 0);
    });
    var shown = 0;
    rows.slice(0, 500).forEach(function (h) {
      var tr = el("tr", {"class": "host", "data-host": h.name});
      tr.appendChild(el("td", {"class": "mono"}, h.name));
      tr.appendChild(el("td", {"class": "v-" + h.verdict}, h.verdict));
      tr.appendChild(el("td", null, h.outcome));
      var cats = {};
      h.issues.forEach(function (i) { cats[i.category] = true; });
      tr.appendChild(el("td", null, Object.keys(cats).sort().join(", ")));
      var i0 = h.issues.length ? h.issues[0] : null;
      tr.appendChild(el("td", {"class": "mono"}, i0 ? i0.metric : ""));
      tr.appendChild(el("td", null, i0 ? fmt(i0.value) : ""));
      tr.appendChild(el("td", null, i0 ? i0.basis : ""));
      tr.appendChild(el("td", null, i0 ? fmt(i0.reference) : ""));
      tr.appendChild(el("td", null, i0 ? pct(i0.deviation) : ""));
      tr.appendChild(el("td", null, i0 && i0.noise_sigmas !== null ? i0.noise_sigmas.toFixed(1) : ""));
      var top = i0 ? i0.detail : (h.reason || "");
      if (h.issues.length > 1) { top += " (+" + (h.issues.length - 1) + " more)"; }
      tr.appendChild(el("td", null, top));
      tb.appendChild(tr);
      shown++;
    });
    if (q && !vf) {
      D.pass_hosts.filter(function (n) { return n.toLowerCase().indexOf(q) >= 0; }).slice(0, 50).forEach(function (n) {
        var tr = el("tr", {"class": "host pass", "data-host": n});
        tr.appendChild(el("td", {"class": "mono"}, n));
        tr.appendChild(el("td", {"class": "v-pass"}, "pass"));
        tr.appendChild(el("td", null, "ok"));
        ["", "", "", "", "", "", ""].forEach(function (x) { tr.appendChild(el("td", null, x)); });
        tr.appendChild(el("td", null, "no issue"));
        tb.appendChild(tr);
        shown++;
      });
    }
    document.getElementById("hosts-wrap").hidden = !shown;  // never a table of its header alone
    var more = rows.length > 500 ? " of " + rows.length + " (narrow the search)" : "";
    document.getElementById("shown").textContent = (!shown && !q && !D.bad_hosts.length) ? "" : shown + " shown" + more + (D.more_bad_hosts ? " (" + D.more_bad_hosts + " more in report.json)" : "");
  }
  document.getElementById("q").addEventListener("input", renderHosts);
  document.getElementById("vf").addEventListener("change", renderHosts);
  if (!D.bad_hosts.length) {
    document.getElementById("hosts-title").textContent = "Hosts: none to act on (all " + D.summary.hosts + " passed); find any host by name";
  }
  renderHosts();

  // Findings that are not one host's: population splits, two hosts that disagree, inconsistent and
  // too-noisy metrics, each titled with what it did to the gate.
  var EFFECT = {fails: "Fails the gate", not_again: "Did not show again: does not fail the gate", warning: "Warning"};
  function findingHosts(f) {
    if (f.kind === "populations" || f.kind === "inconsistent") {
      var out = [];
      f.groups.forEach(function (g) { (g.hosts || g).forEach(function (n) { out.push(n); }); });
      return out;
    }
    return (f.hosts || []).map(function (h) { return typeof h === "string" ? h : h.name; });
  }
  function findingText(f) {
    if (f.kind === "populations") {
      return "two populations" + (f.scope ? " within " + f.scope : "") + " on " + f.family + ": " + f.groups[0].length +
        " host(s) around " + fmt(f.centers[0]) + " and " + f.groups[1].length + " around " + fmt(f.centers[1]) +
        " (" + (f.apart * 100).toFixed(0) + "% apart), the same split in " + f.families.length + " famil(ies)";
    }
    if (f.kind === "disagreements") {
      return f.metric + ": " + f.hosts[0] + " " + fmt(f.values[0]) + " vs " + f.hosts[1] + " " + fmt(f.values[1]) +
        " (" + pct(f.deviation) + ", " + f.noise_sigmas.toFixed(1) + " noise sigmas): two hosts, no majority to say which is faulty";
    }
    if (f.kind === "inconsistent") {
      return f.metric + ": steady hosts disagree beyond their noise and no majority agrees (" +
        f.groups.map(function (g) { return g.hosts.length + " host(s) at " + fmt(g.center) + ", noise " + (g.noise * 100).toFixed(1) + "%"; }).join("; ") + ")";
    }
    var worst = 0;
    f.hosts.forEach(function (h) { worst = Math.max(worst, h.noise); });
    return f.metric + " is too noisy to judge on " + f.hosts.length + " host(s): noise up to " + (worst * 100).toFixed(1) +
      "%, where the gate promises to catch " + (f.promised_deviation * 100).toFixed(0) + "%";
  }
  function findingBox(f) {
    var d = el("div", {"class": "finding " + f.effect});
    var h3 = el("h3");
    h3.appendChild(el("span", {"class": "effect"}, EFFECT[f.effect] + ": "));
    h3.appendChild(document.createTextNode({populations: "population split", disagreements: "two hosts disagree",
      inconsistent: "inconsistent metric", too_noisy: "too noisy to judge"}[f.kind] + " \u2014 " + (f.metric || f.family)));
    d.appendChild(h3);
    d.appendChild(el("div", null, findingText(f)));
    if (f.confirmation) { d.appendChild(el("div", {"class": "muted"}, "validate's re-run: " + f.confirmation)); }
    var hs = el("div");
    if (f.kind === "populations" || f.kind === "inconsistent") {
      f.groups.forEach(function (g, i) {
        var names = g.hosts || g;
        hs.appendChild(document.createTextNode((i ? " | " : "") + (f.kind === "populations" ? (i ? "upper: " : "lower: ") : "at " + fmt(g.center) + ": ")));
        names.slice(0, 40).forEach(function (nm) { hs.appendChild(hostLink(nm, "hostchip")); });
        if (names.length > 40) { hs.appendChild(document.createTextNode(" +" + (names.length - 40))); }
      });
    } else {
      findingHosts(f).slice(0, 40).forEach(function (nm) { hs.appendChild(hostLink(nm, "hostchip")); });
    }
    d.appendChild(hs);
    return d;
  }
  function noisyTable(fs) {
    // Too-noisy metrics, one row each (they are many where a run is noisy): the hosts, the noise, the promise.
    var effect = fs[0].effect;
    var d = el("div", {"class": "finding " + effect});
    var h3 = el("h3");
    h3.appendChild(el("span", {"class": "effect"}, EFFECT[effect] + ": "));
    h3.appendChild(document.createTextNode(fs.length + " metric(s) too noisy to judge (the run's measured noise hides " +
      "deviations the gate promises to catch; re-run on a quieter fleet or validate --confirm)"));
    d.appendChild(h3);
    var rows = fs.slice(0, 200).map(function (f) {
      var worst = 0;
      f.hosts.forEach(function (h) { worst = Math.max(worst, h.noise); });
      var chips = el("span");
      f.hosts.slice(0, 12).forEach(function (h) { chips.appendChild(hostLink(h.name, "hostchip")); });
      if (f.hosts.length > 12) { chips.appendChild(document.createTextNode(" +" + (f.hosts.length - 12))); }
      return [f.metric, (worst * 100).toFixed(1) + "%", (f.promised_deviation * 100).toFixed(0) + "%", chips];
    });
    var t = table(["Metric", "Noise up to", "Gate promises", "Hosts"], rows);
    if (fs.length > 3) {
      var det = el("details");
      det.appendChild(el("summary", null, "the " + fs.length + " metrics"));
      det.appendChild(t);
      d.appendChild(det);
    } else {
      d.appendChild(t);
    }
    return d;
  }
  function fillFindings(fs, secId, titleId, boxId, title) {
    if (!fs.length) { return; }
    document.getElementById(secId).hidden = false;
    document.getElementById(titleId).textContent = title;
    var box = document.getElementById(boxId);
    var noisy = {};
    fs.forEach(function (f) {
      if (f.kind === "too_noisy") { (noisy[f.effect] = noisy[f.effect] || []).push(f); }
    });
    fs.filter(function (f) { return f.kind !== "too_noisy"; }).slice(0, 100).forEach(function (f) { box.appendChild(findingBox(f)); });
    Object.keys(noisy).forEach(function (k) { box.appendChild(noisyTable(noisy[k])); });
  }
  (function () {
    var fails = D.findings.filter(function (f) { return f.effect === "fails"; });
    var later = D.findings.filter(function (f) { return f.effect !== "fails"; });
    fillFindings(fails, "findings-sec", "findings-title", "findings",
      "What failed the gate beyond single hosts (" + fails.length + " finding(s))");
    var w = later.filter(function (f) { return f.effect === "warning"; }).length;
    var na = later.length - w;
    fillFindings(later, "later-sec", "later-title", "later",
      "Warnings (do not fail the gate): " + [w ? w + " warning(s)" : "", na ? na + " finding(s) that did not show again" : ""].filter(Boolean).join(", "));
  })();

  // A dot per host (majority agreement, fewer than 20 hosts): its value, its own measured noise as an
  // error bar, the band within its limit(s), the reference (the majority's centre), a re-run hollow.
  function dots(e) {
    var W = 460, L = 118, R = 14, T = 24, B = 22, RH = 17;
    var hs = e.hosts;
    var box = el("div", {"class": "plot ev-plot", "data-metric": e.metric});
    var h3 = el("h3", null, e.metric + (e.partition ? " [" + e.partition + "]" : ""));
    h3.appendChild(el("span", {"class": "badge " + e.status}, STATUS_WORD[e.status] || e.status));
    box.appendChild(h3);
    function fin(v) { return v !== null && v !== undefined && isFinite(v); }
    var core = [];
    hs.forEach(function (h) {
      if (fin(h.value)) { core.push(h.value); if (fin(h.noise)) { core.push(h.value * (1 - h.noise), h.value * (1 + h.noise)); } }
      if (fin(h.rerun)) { core.push(h.rerun); }
    });
    if (fin(e.reference)) { core.push(e.reference); }
    var lo = Math.min.apply(null, core), hi = Math.max.apply(null, core);
    var room = Math.max(hi - lo, Math.abs(fin(e.reference) ? e.reference : hi) * 0.05) * 0.75;
    hs.forEach(function (h) {
      [h.limit, h.limit_hi].forEach(function (v) {
        if (fin(v)) { lo = Math.min(lo, Math.max(v, lo - room)); hi = Math.max(hi, Math.min(v, hi + room)); }
      });
    });
    if (hi <= lo) { hi = lo + (Math.abs(lo) * 0.01 || 1); }
    var padx = (hi - lo) * 0.04;
    var positive = lo >= 0;
    lo -= padx; hi += padx;
    if (positive && lo < 0) { lo = 0; }  // a time or a rate: no negative axis
    var H = T + hs.length * RH + B;
    function x(v) { return L + (Math.min(hi, Math.max(lo, v)) - lo) / (hi - lo) * (W - L - R); }
    var s = sv("svg", {width: "100%", viewBox: "0 0 " + W + " " + H, "class": "dots", role: "img"});
    hs.forEach(function (h, i) {
      var y = T + i * RH + RH / 2;
      var hit = sv("rect", {"class": "rowhit", x: 0, y: y - RH / 2, width: W, height: RH, "data-host": h.name});
      s.appendChild(hit);
      var lim = fin(h.limit) ? h.limit : null, limHi = fin(h.limit_hi) ? h.limit_hi : null;
      if (lim !== null || limHi !== null) {
        var a, b;
        if (e.direction > 0) { a = x(lim); b = W - R; } else if (e.direction < 0) { a = L; b = x(lim); } else { a = lim !== null ? x(lim) : L; b = limHi !== null ? x(limHi) : W - R; }
        s.appendChild(sv("rect", {"class": "band", x: a, y: y - RH / 2 + 2, width: Math.max(0, b - a), height: RH - 4}));
        [lim, limHi].forEach(function (v) {
          if (v !== null) { s.appendChild(sv("line", {"class": "lim", x1: x(v), x2: x(v), y1: y - RH / 2 + 1, y2: y + RH / 2 - 1})); }
        });
      }
      var lab = sv("text", {"class": "hlabel " + h.status, x: L - 8, y: y + 4, "text-anchor": "end", "data-host": h.name});
      lab.textContent = h.name.length > 17 ? h.name.slice(0, 16) + "\u2026" : h.name;
      s.appendChild(lab);
    });
    var rx = x(e.reference);
    s.appendChild(sv("line", {"class": "ref", x1: rx, x2: rx, y1: T - 6, y2: H - B}));
    var anchor = rx < L + 60 ? "start" : (rx > W - 60 ? "end" : "middle");
    var rt = sv("text", {x: rx, y: T - 9, "text-anchor": anchor}); rt.textContent = "reference " + fmt(e.reference); s.appendChild(rt);
    hs.forEach(function (h, i) {
      var y = T + i * RH + RH / 2;
      if (!fin(h.value)) { return; }
      var cx = x(h.value);
      if (fin(h.noise) && h.noise > 0) {
        var x0 = x(h.value * (1 - h.noise)), x1 = x(h.value * (1 + h.noise));
        s.appendChild(sv("line", {"class": "err", x1: x0, x2: x1, y1: y, y2: y}));
        s.appendChild(sv("line", {"class": "err", x1: x0, x2: x0, y1: y - 3, y2: y + 3}));
        s.appendChild(sv("line", {"class": "err", x1: x1, x2: x1, y1: y - 3, y2: y + 3}));
      }
      var tip = h.name + ": " + fmt(h.value) + " (" + (STATUS_WORD[h.status] || h.status) + ")" +
        (fin(h.reference) ? "; its reference " + fmt(h.reference) + " (" + pct(h.value / h.reference - 1) + ")" : "") +
        (fin(h.limit) ? "; limit " + fmt(h.limit) : "") + (fin(h.limit_hi) ? " \u2013 " + fmt(h.limit_hi) : "") +
        (fin(h.noise) ? "; own noise " + (h.noise * 100).toFixed(1) + "%" : "; own noise not measured") +
        (fin(h.sigma) ? ", judged with " + (h.sigma * 100).toFixed(1) + "%" : "") +
        (fin(h.rerun) ? "; re-run " + fmt(h.rerun) : "");
      if (fin(h.rerun)) {
        s.appendChild(sv("line", {"class": "err", x1: cx, x2: x(h.rerun), y1: y, y2: y, "stroke-dasharray": "2 2"}));
        var rc = sv("circle", {"class": "ev-rerun", cx: x(h.rerun), cy: y, r: 4, stroke: h.status === "flagged" ? "#d93025" : "#1f5fa8", "data-host": h.name});
        var rtt = sv("title", {}); rtt.textContent = h.name + ": re-run " + fmt(h.rerun); rc.appendChild(rtt);
        s.appendChild(rc);
      }
      if (h.status === "flagged" && fin(h.reference) && h.reference) {  // how far off, beside the dot
        var right = cx < (L + W - R) / 2;
        var dl = sv("text", {x: cx + (right ? 9 : -9), y: y - 4, "text-anchor": right ? "start" : "end", fill: "#b3261e"});
        dl.textContent = pct(h.value / h.reference - 1);
        s.appendChild(dl);
      }
      var c = sv("circle", {"class": "ev-dot ev-" + h.status, cx: cx, cy: y, r: 4.5, "data-host": h.name});
      var tt = sv("title", {}); tt.textContent = tip; c.appendChild(tt);
      s.appendChild(c);
    });
    s.appendChild(sv("line", {"class": "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
    var t1 = sv("text", {x: L, y: H - 7}); t1.textContent = fmt(lo); s.appendChild(t1);
    var t2 = sv("text", {x: W - R, y: H - 7, "text-anchor": "end"}); t2.textContent = fmt(hi); s.appendChild(t2);
    box.appendChild(s);
    var nf = hs.filter(function (h) { return h.status === "flagged"; }).length;
    var nn = hs.filter(function (h) { return h.status === "too_noisy"; }).length;
    box.appendChild(el("div", {"class": "note"}, hs.length + " hosts, " + dirWord(e.direction) +
      (nf ? ", " + nf + " flagged" : "") + (nn ? ", " + nn + " too noisy" : "")));
    return box;
  }
  var evDrawn = 0;
  (function () {
    var ev = D.evidence;
    if (!ev.length) { return; }
    document.getElementById("evidence-sec").hidden = false;
    var notOk = ev.filter(function (e) { return e.status !== "ok"; });
    var first = notOk.slice(0, 30);
    if (first.length < 4) { first = first.concat(ev.filter(function (e) { return e.status === "ok"; }).slice(0, 4 - first.length)); }
    var rest = ev.filter(function (e) { return first.indexOf(e) < 0; });
    var nf = ev.filter(function (e) { return e.status === "flagged"; }).length;
    var nn = ev.filter(function (e) { return e.status === "too_noisy"; }).length;
    var said = [];
    if (nf) { said.push(nf + " flagged"); }
    if (nn) { said.push(nn + " too noisy"); }
    var nh = {}; ev.forEach(function (e) { e.hosts.forEach(function (h) { nh[h.name] = 1; }); });
    document.getElementById("evidence-title").textContent = "Evidence: each host against the majority (" + ev.length +
      " metric(s) on " + Object.keys(nh).length + " hosts" + (said.length ? "; " + said.join(", ") : "; none flagged") + ")";
    var lg = document.getElementById("evidence-legend");
    lg.innerHTML = '<svg width="640" height="16">' +
      '<circle class="ev-ok" cx="8" cy="8" r="4.5"/><text x="16" y="12">ok</text>' +
      '<circle class="ev-flagged" cx="44" cy="8" r="4.5"/><text x="52" y="12">flagged</text>' +
      '<circle class="ev-too_noisy" cx="102" cy="8" r="4.5"/><text x="110" y="12">too noisy</text>' +
      '<line class="err" x1="170" x2="190" y1="8" y2="8"/><text x="194" y="12">its own measured noise</text>' +
      '<rect class="band" x="318" y="2" width="20" height="12"/><line class="lim" x1="318" x2="318" y1="2" y2="14"/><text x="342" y="12">within its limit</text>' +
      '<line class="ref" x1="436" x2="436" y1="0" y2="16"/><text x="442" y="12">reference</text>' +
      '<circle class="ev-rerun" stroke="#1f5fa8" cx="504" cy="8" r="4"/><text x="512" y="12">re-run</text>' +
      '<circle class="ev-unjudged ev-dot" cx="562" cy="8" r="4.5"/><text x="570" y="12">not judged</text></svg>' +
      " Click a dot for the host.";
    var box = document.getElementById("evidence");
    first.forEach(function (e) { box.appendChild(dots(e)); evDrawn++; });
    var btn = document.getElementById("evidence-all");
    if (rest.length) {
      btn.hidden = false;
      btn.textContent = "Show all " + ev.length + " metrics (" + rest.length + " more, all within their limits" + (D.more_evidence ? "; " + D.more_evidence + " more in report.json" : "") + ")";
      if (rest.some(function (e) { return e.status !== "ok"; })) { btn.textContent = "Show all " + ev.length + " metrics (" + rest.length + " more)"; }
      btn.addEventListener("click", function () {
        rest.forEach(function (e) { box.appendChild(dots(e)); evDrawn++; });
        btn.hidden = true;
        document.documentElement.setAttribute("data-evidence", String(evDrawn));
      });
    }
  })();

  function plot(p) {
    var W = 380, H = 150, L = 8, R = 8, T = 14, B = 22;
    var box = el("div", {"class": "plot"});
    box.appendChild(el("h3", null, p.family));
    var lo = p.lo, hi = p.hi;
    p.markers.forEach(function (m) { if (m.v < lo) { lo = m.v; } if (m.v > hi) { hi = m.v; } });
    [p.limit, p.limit_hi].forEach(function (v) { if (v !== null && v !== undefined) { if (v < lo) { lo = v; } if (v > hi) { hi = v; } } });
    var span = (hi - lo) || 1;
    function x(v) { return L + (v - lo) / span * (W - L - R); }
    var s = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "dist", role: "img"});
    var maxc = Math.max.apply(null, p.counts.concat([1]));
    var bw = (p.hi - p.lo) / p.counts.length;
    p.counts.forEach(function (c, i) {
      if (!c) { return; }
      var x0 = x(p.lo + i * bw), x1 = x(p.lo + (i + 1) * bw);
      var h = Math.max(1, c / maxc * (H - T - B));
      s.appendChild(sv("rect", {"class": "bar", x: x0, y: H - B - h, width: Math.max(1, x1 - x0 - 0.5), height: h}));
    });
    s.appendChild(sv("line", {"class": "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
    s.appendChild(sv("line", {"class": "median", x1: x(p.center), x2: x(p.center), y1: T - 4, y2: H - B}));
    [p.limit, p.limit_hi].forEach(function (v) {
      if (v !== null && v !== undefined) { s.appendChild(sv("line", {"class": "limit", x1: x(v), x2: x(v), y1: T - 4, y2: H - B})); }
    });
    var t1 = sv("text", {x: L, y: H - 6}); t1.textContent = fmt(lo); s.appendChild(t1);
    var t2 = sv("text", {x: W - R, y: H - 6, "text-anchor": "end"}); t2.textContent = fmt(hi); s.appendChild(t2);
    var cx = x(p.center);
    var anchor = cx < 60 ? "start" : (cx > W - 60 ? "end" : "middle");
    var t3 = sv("text", {x: cx, y: T - 5, "text-anchor": anchor}); t3.textContent = "median " + fmt(p.center); s.appendChild(t3);
    p.markers.forEach(function (m, i) {
      var c = sv("circle", {"class": "flag", cx: x(m.v), cy: H - B - 6 - (i % 6) * 9, r: 4, "data-host": m.h});
      var tt = sv("title", {}); tt.textContent = m.h + " " + m.m + " = " + fmt(m.v); c.appendChild(tt);
      s.appendChild(c);
    });
    box.appendChild(s);
    var dir = p.direction > 0 ? "higher is better" : (p.direction < 0 ? "lower is better" : "direction unknown");
    box.appendChild(el("div", {"class": "note"}, p.n + " values, " + dir + ", " + p.markers.length +
      " flagged" + (p.more_markers ? " (+" + p.more_markers + ")" : "")));
    return box;
  }
  var plots = document.getElementById("plots");
  var drawn = 0;
  D.plots.forEach(function (p) { plots.appendChild(plot(p)); drawn++; });
  if (drawn) { document.getElementById("dist-sec").hidden = false; }

  if (D.rules.length) {
    document.getElementById("rules-sec").hidden = false;
    var rb = document.querySelector("#rules tbody");
    D.rules.forEach(function (r) {
      var tr = el("tr");
      [r.name + (r.store ? " (store)" : ""), r.function, r.criteria, r.metrics, r.hosts_violating].forEach(function (x) { tr.appendChild(el("td", null, x)); });
      rb.appendChild(tr);
    });
  }
  if (D.problems.length || D.warnings.length) {
    document.getElementById("problems-sec").hidden = false;
    var ul = document.getElementById("problems");
    D.problems.forEach(function (p) { ul.appendChild(el("li", {"class": "mono"}, p.file + ":" + p.line + ": " + p.message)); });
    D.warnings.forEach(function (w) { ul.appendChild(el("li", null, w)); });
  }
  // A link to report.html#host=NAME opens that host's drill-down.
  function fromHash() {
    var m = /^#host=(.+)$/.exec(window.location.hash);
    if (m) { drill(decodeURIComponent(m[1])); }
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.documentElement.setAttribute("data-plots", String(drawn));
  document.documentElement.setAttribute("data-evidence", String(evDrawn));
  // The measured figures' plots are static SVG (matplotlib): count those the browser laid out with marks.
  var figDrawn = 0, figAll = document.querySelectorAll(".fig-plot svg");
  figAll.forEach(function (svg) {
    var box = svg.getBBox ? svg.getBBox() : null;
    if (box && box.width > 0 && box.height > 0 && svg.querySelectorAll("path, use").length > 0) { figDrawn++; }
  });
  document.documentElement.setAttribute("data-figure-plots", figDrawn + "/" + figAll.length);
  document.documentElement.setAttribute("data-ready", "1");
})();
</script>
</body>
</html>
"""
