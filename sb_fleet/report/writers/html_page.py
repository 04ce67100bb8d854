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
</style>
</head>
<body>
<header id="head"><h1 id="title">sb-fleet report</h1><div id="subtitle"></div></header>
<main>
<div class="cards" id="cards"></div>
<section id="drill" hidden><h2 id="drill-title"></h2><div id="drill-body"></div></section>
<section><h2>Hosts to act on</h2>
<div class="controls"><input id="q" placeholder="find a host (any verdict)" size="30">
<select id="vf"><option value="">all verdicts</option><option>fail</option><option>incomplete</option><option>missing</option><option>flaky</option></select>
<span id="shown" class="muted"></span></div>
<div class="scroll"><table id="hosts"><thead><tr><th>Host</th><th>Verdict</th><th>Outcome</th><th>Categories</th><th>Metric</th><th>Value</th><th>Against</th><th>Reference</th><th>Deviation</th><th>Noise &sigma;</th><th>Main finding</th></tr></thead><tbody></tbody></table></div>
</section>
<section><h2>Metric distributions</h2>
<p class="muted">Histogram of every value of the family across the fleet (GPUs and NICs pooled); dashed black: fleet median; dashed red: fleet-check limit; red dots: flagged values (click for the host).</p>
<div class="plots" id="plots"></div></section>
<section id="rules-sec" hidden><h2>Rules</h2><table id="rules"><thead><tr><th>Rule</th><th>Function</th><th>Criteria</th><th>Metrics</th><th>Hosts violating</th></tr></thead><tbody></tbody></table></section>
<section id="problems-sec" hidden><h2>Input problems and warnings</h2><ul id="problems"></ul></section>
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

  var passed = D.gate.passed;
  document.getElementById("head").className = passed ? "pass" : "fail";
  document.getElementById("title").textContent = D.headline || ("sb-fleet report: gate " + (passed ? "passed" : "failed"));
  document.getElementById("subtitle").textContent = D.gate.failing_hosts + " host(s) counted as failing, " +
    D.gate.allowed_failing_hosts + " allowed (" + D.gate.policy + ") \u2014 " + D.source + " \u2014 " + D.generated;

  var byName = {};
  D.bad_hosts.forEach(function (h) { byName[h.name] = h; });
  var passSet = {};
  D.pass_hosts.forEach(function (n) { passSet[n] = true; });

  var cards = document.getElementById("cards");
  [["hosts", "all hosts", ""], ["pass", "pass", "v-pass"], ["fail", "fail", "v-fail"],
   ["incomplete", "incomplete", "v-incomplete"], ["missing", "missing", "v-missing"]].forEach(function (c) {
    var d = el("div", {"class": "card " + c[2]});
    d.appendChild(el("b", null, D.summary[c[0]]));
    d.appendChild(el("span", null, c[1]));
    d.addEventListener("click", function () {
      document.getElementById("vf").value = (c[0] === "hosts" || c[0] === "pass") ? "" : c[0];
      renderHosts();
    });
    cards.appendChild(d);
  });

  function drill(name) {
    var sec = document.getElementById("drill");
    var body = document.getElementById("drill-body");
    body.textContent = "";
    sec.hidden = false;
    var h = byName[name];
    if (!h) {
      document.getElementById("drill-title").textContent = name + ": " + (passSet[name] ? "pass" : "not in this report");
      body.appendChild(el("p", {"class": "muted"}, passSet[name] ? "No issue: every check passed." : ""));
      sec.scrollIntoView();
      return;
    }
    document.getElementById("drill-title").textContent = h.name + ": " + h.verdict + " (outcome " + h.outcome + ")";
    var t = el("table");
    var hr = el("tr");
    ["Check", "Category", "Metric", "Value", "Against", "Reference", "Deviation", "Noise \u03c3", "Explanation"].forEach(function (x) { hr.appendChild(el("th", null, x)); });
    t.appendChild(hr);
    h.issues.forEach(function (i) {
      var tr = el("tr");
      tr.appendChild(el("td", null, i.check));
      tr.appendChild(el("td", null, i.category));
      tr.appendChild(el("td", {"class": "mono"}, i.metric));
      tr.appendChild(el("td", null, fmt(i.value)));
      tr.appendChild(el("td", null, i.basis));
      tr.appendChild(el("td", null, fmt(i.reference)));
      tr.appendChild(el("td", null, pct(i.deviation)));
      tr.appendChild(el("td", null, i.noise_sigmas !== null ? i.noise_sigmas.toFixed(1) : ""));
      tr.appendChild(el("td", null, i.detail));
      t.appendChild(tr);
    });
    body.appendChild(t);
    sec.scrollIntoView();
  }

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
      var tr = el("tr", {"class": "host"});
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
      var top = i0 ? i0.detail : "";
      if (h.issues.length > 1) { top += " (+" + (h.issues.length - 1) + " more)"; }
      tr.appendChild(el("td", null, top));
      tr.addEventListener("click", function () { drill(h.name); });
      tb.appendChild(tr);
      shown++;
    });
    if (q && !vf) {
      D.pass_hosts.filter(function (n) { return n.toLowerCase().indexOf(q) >= 0; }).slice(0, 50).forEach(function (n) {
        var tr = el("tr", {"class": "host"});
        tr.appendChild(el("td", {"class": "mono"}, n));
        tr.appendChild(el("td", {"class": "v-pass"}, "pass"));
        tr.appendChild(el("td", null, "ok"));
        ["", "", "", "", "", "", ""].forEach(function (x) { tr.appendChild(el("td", null, x)); });
        tr.appendChild(el("td", null, "no issue"));
        tr.addEventListener("click", function () { drill(n); });
        tb.appendChild(tr);
        shown++;
      });
    }
    document.getElementById("shown").textContent = shown + " shown" + (D.more_bad_hosts ? " (" + D.more_bad_hosts + " more in report.json)" : "");
  }
  document.getElementById("q").addEventListener("input", renderHosts);
  document.getElementById("vf").addEventListener("change", renderHosts);
  renderHosts();

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
      var c = sv("circle", {"class": "flag", cx: x(m.v), cy: H - B - 6 - (i % 6) * 9, r: 4});
      var tt = sv("title", {}); tt.textContent = m.h + " " + m.m + " = " + fmt(m.v); c.appendChild(tt);
      c.addEventListener("click", function () { drill(m.h); });
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
  if (!drawn) { plots.appendChild(el("p", {"class": "muted"}, "Too few hosts for fleet statistics.")); }

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
  var m = /^#host=(.+)$/.exec(window.location.hash);
  if (m) { drill(decodeURIComponent(m[1])); }
  document.documentElement.setAttribute("data-plots", String(drawn));
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
