// hotcount dashboard: polls the JSON API once a second and draws per-node
// write rates, the hottest keys and one chosen counter's sub-counters by
// node with uPlot. Every value from the API is written with textContent.
"use strict";
(function () {
  const POLL_MS = 1000, HISTORY = 120;
  const $ = (sel) => document.querySelector(sel);
  const state = { chosen: decodeURIComponent(location.hash.slice(1)), userChose: false,
    nodeHist: { t: [], nodes: [], rows: {} }, shardHist: { key: "", t: [], nodes: [], rows: {} },
    nodeChart: null, shardChart: null };
  if (state.chosen) state.userChose = true;

  async function api(method, path, body) {
    const r = await fetch(path, { method, headers: body ? { "Content-Type": "application/json" } : {},
      body: body ? JSON.stringify(body) : undefined, cache: "no-store" });
    const j = await r.json().catch(() => ({}));
    if (!r.ok) { const e = new Error(j.error || r.statusText); e.status = r.status; throw e; }
    return j;
  }

  function fill(tbody, rows) {
    const tb = $(tbody);
    tb.replaceChildren(...rows.map((cells) => {
      const tr = document.createElement("tr");
      for (const c of cells.cells) {
        const td = document.createElement("td");
        td.textContent = c.text;
        if (c.cls) td.className = c.cls;
        tr.appendChild(td);
      }
      if (cells.key !== undefined) tr.dataset.key = cells.key;
      if (cells.chosen) tr.className = "chosen";
      return tr;
    }));
  }

  const fmtRate = (v) => v >= 100 ? v.toFixed(0) : v.toFixed(2);

  // push appends one sample per node to a history and reports whether the
  // node set changed (the chart must then be rebuilt).
  function push(hist, now, values) {
    const names = Object.keys(values).sort();
    const changed = names.join("\n") !== hist.nodes.join("\n");
    if (changed) { hist.t = []; hist.rows = {}; hist.nodes = names; }
    hist.t.push(now);
    for (const n of names) (hist.rows[n] = hist.rows[n] || []).push(values[n]);
    if (hist.t.length > HISTORY) { hist.t.shift(); for (const n of names) hist.rows[n].shift(); }
    return changed;
  }

  const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

  function draw(chart, el, hist, changed, title) {
    const data = [hist.t, ...hist.nodes.map((n) => hist.rows[n])];
    if (chart && !changed) { chart.setData(data); return chart; }
    if (chart) chart.destroy();
    const opts = { width: Math.max(320, el.clientWidth || 400), height: 200, title,
      series: [{}, ...hist.nodes.map((n, i) => ({ label: n, stroke: palette[i % palette.length], width: 2 }))],
      axes: [{}, { size: 60 }] };
    return new uPlot(opts, data, el);
  }

  async function tick() {
    const now = Date.now() / 1000;
    try {
      const [nodes, hot] = await Promise.all([api("GET", "/v1/nodes"), api("GET", "/v1/hotkeys?n=10")]);
      const rates = {};
      for (const n of nodes.nodes) rates[n.node] = n.rate;
      fill("#nodes tbody", nodes.nodes.map((n) => ({ cells: [{ text: n.node }, { text: fmtRate(n.rate), cls: "rate" }] })));
      state.nodeChart = draw(state.nodeChart, $("#node-chart"), state.nodeHist, push(state.nodeHist, now, rates), "writes/s");

      let values = {};
      if (hot.keys.length) values = (await api("POST", "/v1/counters:get", { keys: hot.keys.map((k) => k.key) })).values;
      if (!state.userChose && hot.keys.length) state.chosen = hot.keys[0].key;
      fill("#hotkeys tbody", hot.keys.map((k) => ({ key: k.key, chosen: k.key === state.chosen, cells: [
        { text: k.key, cls: "key" }, { text: fmtRate(k.arrivals), cls: "rate" }, { text: String(k.n || "?"), cls: "n" },
        { text: String(values[k.key] ?? ""), cls: "value" }, { text: k.reason || "" }] })));
      const ds = (hot.decisions || []).slice(-8).reverse();
      fill("#decisions tbody", ds.length ? ds.map((d) => ({ cells: [
        { text: new Date(d.at).toLocaleTimeString() }, { text: d.key, cls: "key" },
        { text: d.from + " → " + d.to, cls: "n" }, { text: d.error ? d.reason + " (" + d.error + ")" : d.reason }] }))
        : [{ cells: [{ text: "none yet" }, { text: "" }, { text: "" }, { text: "" }] }]);
      await showChosen(now);
      $("#status").textContent = "live · updated " + new Date().toLocaleTimeString();
      $("#status").className = "";
    } catch (e) {
      $("#status").textContent = "error: " + e.message;
      $("#status").className = "err";
    }
  }

  async function showChosen(now) {
    const key = state.chosen;
    if (!key) { $("#chosen-msg").textContent = "No counter chosen yet."; return; }
    let rep;
    try {
      rep = await api("GET", "/v1/counters/" + encodeURIComponent(key) + "/shards");
    } catch (e) {
      $("#chosen-msg").textContent = key + ": " + e.message;
      return;
    }
    const byNode = {}, count = {};
    for (const s of rep.shards) { byNode[s.node] = (byNode[s.node] || 0) + s.value; count[s.node] = (count[s.node] || 0) + 1; }
    $("#chosen-msg").textContent = key + " = " + rep.value + " (N=" + rep.n + " on " + rep.distinct_nodes + " nodes)";
    fill("#shards tbody", Object.keys(byNode).sort().map((n) => ({ cells: [{ text: n }, { text: String(count[n]) }, { text: String(byNode[n]), cls: "value" }] })));
    const h = state.shardHist;
    let changed = false;
    if (h.key !== key) { h.key = key; h.nodes = []; changed = true; }
    changed = push(h, now, byNode) || changed;
    state.shardChart = draw(state.shardChart, $("#shard-chart"), h, changed, "sub-counter sums of " + key);
  }

  $("#hotkeys tbody").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr");
    if (!tr || tr.dataset.key === undefined) return;
    state.chosen = tr.dataset.key; state.userChose = true; $("#key").value = state.chosen;
    location.hash = encodeURIComponent(state.chosen);
    tick();
  });
  $("#pick").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const k = $("#key").value.trim();
    state.chosen = k; state.userChose = k !== "";
    location.hash = encodeURIComponent(k);
    tick();
  });

  async function loop() { await tick(); setTimeout(loop, POLL_MS); }
  loop();
})();
