// hotcount dashboard: polls the JSON API once a second and draws, for a
// chosen counter, the increments per second arriving against the cache
// writes per second reaching each node, with the node budget as a line;
// the loss window (unflushed deltas, oldest unflushed age, checkpoint
// age), errors and back-pressure; the hottest keys, the nodes, the
// chosen counter's sub-counters and automatic-N decisions; this region's
// links to its peer regions (lag, records and bytes shipped, link errors,
// last success) and whether this process holds the shipping lease.
//
// Tables are updated in place (a row is kept while its key is shown), so
// that rows under the cursor are not replaced every second. Every value
// from the API is written with textContent. When the server asks for a
// token, a field in the header takes one; it is kept in sessionStorage
// and sent as "Authorization: Bearer".
"use strict";
(function () {
  const POLL_MS = 1000, HISTORY = 120, TOKEN_KEY = "hotcount-token";
  const $ = (sel) => document.querySelector(sel);
  const state = {
    chosen: decodeURIComponent(location.hash.slice(1)), userChose: false,
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    abs: newHistory(), loss: newHistory(), absKey: "", regions: null,
  };
  if (state.chosen) state.userChose = true;

  class AuthError extends Error {}

  async function api(method, path, body) {
    const headers = {};
    if (body) headers["Content-Type"] = "application/json";
    if (state.token) headers["Authorization"] = "Bearer " + state.token;
    const r = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined, cache: "no-store" });
    const j = await r.json().catch(() => ({}));
    if (r.status === 401) throw new AuthError(j.error || "a token is needed");
    if (!r.ok) { const e = new Error(j.error || r.statusText); e.status = r.status; throw e; }
    return j;
  }

  // sync makes tbody's rows those of rows ({id, cells: [{text, cls, title}],
  // cls, key}), in order, updating kept rows in place.
  function sync(sel, rows) {
    const tb = $(sel);
    const existing = new Map();
    for (const tr of Array.from(tb.rows)) existing.set(tr.dataset.id, tr);
    const keep = new Set();
    let prev = null;
    for (const row of rows) {
      let tr = existing.get(row.id);
      if (!tr) {
        tr = document.createElement("tr");
        tr.dataset.id = row.id;
        for (let i = 0; i < row.cells.length; i++) tr.appendChild(document.createElement("td"));
      }
      row.cells.forEach((c, i) => {
        const td = tr.cells[i];
        if (td.textContent !== c.text) td.textContent = c.text;
        const cls = c.cls || "";
        if (td.className !== cls) td.className = cls;
        const title = c.title || "";
        if (td.title !== title) td.title = title;
      });
      const cls = row.cls || "";
      if (tr.className !== cls) tr.className = cls;
      if (row.key !== undefined && tr.dataset.key !== row.key) tr.dataset.key = row.key;
      const want = prev ? prev.nextSibling : tb.firstChild;
      if (want !== tr) tb.insertBefore(tr, want);
      prev = tr;
      keep.add(row.id);
    }
    for (const [id, tr] of existing) if (!keep.has(id)) tr.remove();
  }

  const fmtRate = (v) => v >= 100 ? v.toFixed(0) : v.toFixed(2);
  const fmtSecs = (ms) => ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
  const fmtBytes = (n) => n < 1024 ? n + " B" : n < 1048576 ? (n / 1024).toFixed(1) + " KiB" : (n / 1048576).toFixed(1) + " MiB";

  // A history is a time column and named value columns; a column that
  // appears later is filled with nulls before it.
  function newHistory() { return { t: [], cols: new Map() }; }
  function push(h, now, values) {
    h.t.push(now);
    for (const [name, v] of values) {
      if (!h.cols.has(name)) h.cols.set(name, new Array(h.t.length - 1).fill(null));
      h.cols.get(name).push(v);
    }
    for (const [name, col] of h.cols) if (col.length < h.t.length) col.push(null);
    if (h.t.length > HISTORY) { h.t.shift(); for (const col of h.cols.values()) col.shift(); }
  }

  // Distinct colours for nodes (no red, which is the budget's, and no
  // near-black, which is the arrivals').
  const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d"];

  // Every y axis starts at zero.
  const fromZero = (u, min, max) => [0, max > 0 ? max * 1.1 : 1];

  // draw creates or updates the uPlot chart of el from a history; styles
  // gives each column's series options. The chart is kept on the element
  // (el.hotcountChart) and rebuilt only when the columns change.
  function draw(el, h, styles, yLabel) {
    const names = Array.from(h.cols.keys());
    const data = [h.t, ...names.map((n) => h.cols.get(n))];
    const chart = el.hotcountChart;
    if (chart && chart.hotcountNames === names.join("\n")) { chart.setData(data); return; }
    if (chart) chart.destroy();
    const opts = {
      width: chartWidth(el), height: el.classList.contains("small") ? 160 : 240,
      scales: { y: { range: fromZero } },
      series: [{}, ...names.map((n, i) => Object.assign({ label: n, width: 2 }, styles(n, i)))],
      axes: [{ space: 70, incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600],
        values: (u, vals) => vals.map((v) => new Date(v * 1000).toLocaleTimeString()) }, { size: 60, label: yLabel }],
      legend: { live: false },
    };
    const c = new uPlot(opts, data, el);
    c.hotcountNames = names.join("\n");
    el.hotcountChart = c;
  }

  function chartWidth(el) { return Math.max(200, Math.floor(el.clientWidth || el.parentElement.clientWidth || 320)); }

  // Charts follow their container's width (down to a phone's).
  const resized = new ResizeObserver((entries) => {
    for (const e of entries) {
      const c = e.target.hotcountChart;
      if (c && Math.abs(c.width - chartWidth(e.target)) > 2) c.setSize({ width: chartWidth(e.target), height: c.height });
    }
  });
  resized.observe($("#absorption-chart"));
  resized.observe($("#loss-chart"));

  function absorptionStyle(name, i) {
    if (name.startsWith("arriving")) return { stroke: "#222", width: 3 };
    if (name === "node budget") return { stroke: "#d62728", dash: [8, 6], width: 2 };
    if (name.startsWith("cache writes of")) return { stroke: "#666", dash: [2, 4], width: 1 };
    return { stroke: palette[(i - 2) % palette.length] };
  }

  function setTile(id, text, bad) {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
    el.classList.toggle("bad", !!bad);
  }

  async function tick() {
    const now = Date.now() / 1000;
    try {
      const [nodes, hot, stats] = await Promise.all([api("GET", "/v1/nodes"), api("GET", "/v1/hotkeys?n=100"), api("GET", "/v1/stats")]);
      $("#token-form").hidden = true;
      if (!state.userChose && hot.keys.length) state.chosen = hot.keys[0].key;
      const top = hot.keys.slice(0, 10);
      let values = {};
      if (top.length) values = (await api("POST", "/v1/counters:get", { keys: top.map((k) => k.key) })).values;
      sync("#hotkeys tbody", top.map((k) => ({ id: k.key, key: k.key, cls: k.key === state.chosen ? "chosen" : "", cells: [
        { text: k.key, cls: "key" }, { text: fmtRate(k.arrivals), cls: "num rate" }, { text: fmtRate(k.writes), cls: "num" },
        { text: String(k.n || "?"), cls: "num n" }, { text: String(values[k.key] ?? ""), cls: "num value" }, { text: k.reason || "" }] })));
      const dl = $("#hot-key-list");
      if (dl.childElementCount !== top.length || top.some((k, i) => dl.children[i].value !== k.key)) {
        dl.replaceChildren(...top.map((k) => { const o = document.createElement("option"); o.value = k.key; return o; }));
      }

      const budget = stats.node_budget;
      sync("#nodes tbody", nodes.nodes.map((n) => ({ id: n.node, cells: [
        { text: n.node }, { text: fmtRate(n.rate), cls: "num rate" },
        { text: budget > 0 ? (100 * n.rate / budget).toFixed(1) + "%" : "", cls: "num" }, { text: String(n.total), cls: "num" }] })));

      // The absorption chart of the chosen counter.
      const key = state.chosen;
      if (key !== state.absKey) { state.abs = newHistory(); state.absKey = key; }
      const hk = hot.keys.find((k) => k.key === key);
      const cols = [["arriving: " + (key || "no counter"), hk ? hk.arrivals : 0], ["cache writes of " + (key || "it"), hk ? hk.writes : 0]];
      for (const n of nodes.nodes) cols.push(["→ " + n.node, n.rate]);
      cols.push(["node budget", budget]);
      push(state.abs, now, cols);
      draw($("#absorption-chart"), state.abs, absorptionStyle, "per second");
      $("#absorption-msg").textContent = key
        ? key + ": " + fmtRate(hk ? hk.arrivals : 0) + " increments/s arriving, " + fmtRate(hk ? hk.writes : 0) + " cache writes/s"
        : "No counter chosen yet: increment one, or type its key.";

      // Loss window, durability, errors.
      const b = stats.buffer, d = stats.durability;
      setTile("#t-unflushed", String(b.unflushed_abs_delta), false);
      setTile("#t-unflushed-keys", String(b.unflushed_keys), false);
      setTile("#t-oldest", fmtSecs(b.oldest_unflushed_ms), b.oldest_unflushed_ms > 5000);
      setTile("#t-checkpoint", d.checkpoint_age_ms == null ? "none yet" : fmtSecs(d.checkpoint_age_ms) + " ago", d.checkpoint_age_ms > 60000);
      setTile("#t-backpressure", String(b.backpressure), b.backpressure > 0);
      setTile("#t-flush-errors", String(b.flush_errors), b.flush_errors > 0);
      setTile("#t-dropped", String(b.dropped), b.dropped > 0);
      setTile("#t-failed-events", String(d.failed_events), d.failed_events > 0);
      setTile("#t-rollup-errors", String(d.rollup_errors), d.rollup_errors > 0);
      setTile("#t-view-misses", String(d.view_misses), d.view_misses > 0);
      push(state.loss, now, [["oldest unflushed (s)", b.oldest_unflushed_ms / 1000],
        ["checkpoint age (s)", d.checkpoint_age_ms == null ? null : d.checkpoint_age_ms / 1000]]);
      draw($("#loss-chart"), state.loss, (n, i) => ({ stroke: ["#1f77b4", "#ff7f0e"][i] }), "seconds");
      const errs = Object.entries(stats.errors || {}).sort((x, y) => y[1] - x[1]);
      sync("#errors tbody", errs.length ? errs.map(([c, n]) => ({ id: c, cells: [{ text: c }, { text: String(n), cls: "num" }] }))
        : [{ id: "none", cells: [{ text: "none" }, { text: "0", cls: "num" }] }]);

      showRegions(stats.regions, now);

      const ds = (hot.decisions || []).slice(-8).reverse();
      sync("#decisions tbody", ds.length ? ds.map((x) => ({ id: x.at + " " + x.key, cells: [
        { text: new Date(x.at).toLocaleTimeString() }, { text: x.key, cls: "key" },
        { text: x.from + " → " + x.to, cls: "num n" }, { text: x.error ? x.reason + " (" + x.error + ")" : x.reason }] }))
        : [{ id: "none", cells: [{ text: "none yet" }, { text: "" }, { text: "", cls: "num" }, { text: "" }] }]);

      await showShards(key);
      $("#status").textContent = "live · updated " + new Date().toLocaleTimeString();
      $("#status").className = "";
    } catch (e) {
      if (e instanceof AuthError) {
        $("#token-form").hidden = false;
        $("#status").textContent = (state.token ? "token refused: " : "token needed: ") + e.message;
      } else {
        $("#status").textContent = "error: " + e.message;
      }
      $("#status").className = "err";
    }
  }

  // showRegions fills the Regions panel from /v1/stats: this region, the
  // shipping lease, and a row per peer link; records/s is the change of
  // the shipped records since the previous poll.
  function showRegions(r, now) {
    const prev = state.regions;
    state.regions = { t: now, records: new Map() };
    $("#regions-msg").hidden = r.enabled;
    $("#region-links").hidden = !r.enabled;
    if (!r.enabled) {
      setTile("#t-region", "off", false);
      setTile("#t-lease", "–", false);
      $("#regions-msg").textContent = "Regions are off: this server was started without a region (region: and peers: in its configuration).";
      sync("#region-links tbody", []);
      return;
    }
    setTile("#t-region", r.region, false);
    setTile("#t-lease", r.shipping ? "held here" : r.peers.length ? "another process" : "no peers", false);
    sync("#region-links tbody", r.peers.map((p) => {
      state.regions.records.set(p.peer, p.shipped_records);
      const before = prev && prev.records.get(p.peer);
      const rate = before === undefined || now <= prev.t ? "" : fmtRate(Math.max(0, p.shipped_records - before) / (now - prev.t));
      return { id: p.peer, cells: [
        { text: p.peer }, { text: p.lag_ms == null ? "–" : fmtSecs(p.lag_ms), cls: "num lag" },
        { text: String(p.link_errors), cls: "num errors" + (p.last_error ? " bad" : ""), title: p.last_error },
        { text: p.last_success_age_ms != null ? fmtSecs(p.last_success_age_ms) + " ago" : r.shipping ? "never" : "–", cls: "num age" },
        { text: rate, cls: "num rate" }, { text: String(p.shipped_records), cls: "num records" },
        { text: fmtBytes(p.shipped_bytes), cls: "num bytes" }] };
    }));
  }

  async function showShards(key) {
    $("#shards-title").textContent = key ? "Sub-counters of " + key : "Sub-counters";
    if (!key) { sync("#shards tbody", []); return; }
    let rep;
    try {
      rep = await api("GET", "/v1/counters/" + encodeURIComponent(key) + "/shards");
    } catch (e) {
      if (e instanceof AuthError) throw e;
      sync("#shards tbody", [{ id: "error", cells: [{ text: e.message }, { text: "", cls: "num" }, { text: "", cls: "num" }] }]);
      return;
    }
    const byNode = new Map();
    for (const s of rep.shards) {
      const x = byNode.get(s.node) || { n: 0, sum: 0 };
      x.n++; x.sum += s.value; byNode.set(s.node, x);
    }
    sync("#shards tbody", Array.from(byNode.keys()).sort().map((n) => ({ id: n, cells: [
      { text: n }, { text: String(byNode.get(n).n), cls: "num" }, { text: String(byNode.get(n).sum), cls: "num value" }] })));
  }

  function choose(k) {
    state.chosen = k; state.userChose = k !== ""; $("#key").value = k;
    location.hash = encodeURIComponent(k);
    tick();
  }
  $("#hotkeys tbody").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr");
    if (tr && tr.dataset.key !== undefined) choose(tr.dataset.key);
  });
  $("#pick").addEventListener("submit", (ev) => { ev.preventDefault(); choose($("#key").value.trim()); });
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("#token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $("#token").value = "";
    tick();
  });

  async function loop() { await tick(); setTimeout(loop, POLL_MS); }
  loop();
})();
