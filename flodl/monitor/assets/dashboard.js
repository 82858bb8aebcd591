// flodl monitor dashboard: live (Server-Sent Events) or archive (data embedded in the page).
// Every user-supplied string is written with textContent; nothing is parsed as HTML.
"use strict";
(function () {
  const boot = JSON.parse(document.getElementById("flodl-boot").textContent);
  const PALETTE = ["#3b6ef5", "#e8590c", "#1f9d55", "#c2255c", "#7048e8", "#0c8599",
                   "#d9480f", "#5c940d", "#9c36b5", "#1864ab", "#e67700", "#495057"];
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  };

  // ---- formatting (mirrors flodl.monitor.format) ----
  function fmtDur(s) {
    if (s === null || s === undefined || !isFinite(s) || s < 0) return "–";
    if (s < 1) return Math.trunc(s * 1000) + "ms";
    if (s < 60) { const w = Math.trunc(s), t = Math.trunc((s - w) * 10 + 1e-9); return t > 0 ? w + "." + t + "s" : w + "s"; }
    const x = Math.trunc(s), h = Math.trunc(x / 3600), m = Math.trunc((x % 3600) / 60), r = x % 60;
    return h > 0 ? h + "h " + String(m).padStart(2, "0") + "m" : m + "m " + String(r).padStart(2, "0") + "s";
  }
  function fmtVal(v) {
    if (typeof v !== "number") return "–";
    if (v === 0) return "0";
    const a = Math.abs(v);
    // exponent form below 0.001 and from a million, as the y-axis labels
    if (a < 0.001 || a >= 1e6) return v.toExponential(2).replace("e+", "e");
    if (a < 100) return v.toFixed(4);
    return v.toFixed(2);
  }
  function fmtBytes(n) {
    if (n === null || n === undefined) return "–";
    if (n >= 1073741824) return (n / 1073741824).toFixed(1) + " GB";
    if (n >= 1048576) return (n / 1048576).toFixed(0) + " MB";
    if (n >= 1024) return (n / 1024).toFixed(0) + " KB";
    return n + " B";
  }
  const fmtPct = (v) => (v === null || v === undefined ? "–" : v.toFixed(0) + "%");

  // ---- state ----
  // Metric names are user strings: looked up with Object.hasOwn / Map / Set only, so a metric
  // called "constructor" or "__proto__" is a metric like any other.
  const state = {
    byEpoch: new Map(),       // epoch (1-based) -> record; a re-sent epoch replaces, never duplicates
    recs: [],                 // the same records in epoch order (kept sorted as they arrive)
    metricNames: [],          // every name ever seen, first-appearance order
    metricSet: new Set(),
    total: boot.total || 0,
    complete: null,
    lastElapsed: null,
    lastElapsedAt: null,
    eta: null,
    run: boot.run || null,    // the run token of the events shown (live)
    lostAt: null,             // when the live stream was lost (null while connected)
    unreachable: false,       // the server no longer answers at all
  };
  const charts = new Map();   // metric name -> {card, canvas, last}
  const colorOf = (i) => PALETTE[i % PALETTE.length];
  const hasMetric = (r, name) => Object.hasOwn(r.metrics, name);
  // "NaN", "inf" or "-inf" for a metric logged non-finite (JSON carries it as null)
  const nonFinite = (r, name) => (r.nonfinite && Object.hasOwn(r.nonfinite, name) ? String(r.nonfinite[name]) : "NaN/inf");

  function records() {
    return state.recs;
  }

  // Records arrive in epoch order (replay, then live): appending is O(1); only a record out of
  // order (or re-sent) costs a binary search.
  function placeRecord(rec) {
    const recs = state.recs;
    if (!recs.length || rec.epoch > recs.at(-1).epoch) { recs.push(rec); return; }
    let lo = 0, hi = recs.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (recs[mid].epoch < rec.epoch) lo = mid + 1; else hi = mid; }
    if (lo < recs.length && recs[lo].epoch === rec.epoch) recs[lo] = rec; else recs.splice(lo, 0, rec);
  }

  function processEpoch(rec) {
    if (!rec || typeof rec.epoch !== "number") return;
    if (!rec.metrics || typeof rec.metrics !== "object") rec.metrics = {};
    state.byEpoch.set(rec.epoch, rec);
    placeRecord(rec);
    table.dirty.add(rec.epoch);
    if (rec.total) state.total = rec.total;
    for (const name of Object.keys(rec.metrics)) {
      if (!state.metricSet.has(name)) { state.metricSet.add(name); state.metricNames.push(name); }
    }
    if (state.recs.at(-1) === rec) {
      state.lastElapsed = rec.elapsed;
      state.lastElapsedAt = performance.now();
      state.eta = rec.eta;
    }
    if (!state.complete) setStatus("training", "Training");
    scheduleRender();
  }

  // A new run on the same port (a restarted script): forget everything shown, then show it.
  function resetRun() {
    state.byEpoch = new Map();
    state.recs = [];
    state.metricNames = [];
    state.metricSet = new Set();
    Object.assign(state, { total: 0, complete: null, lastElapsed: null, lastElapsedAt: null, eta: null });
    for (const chart of charts.values()) chart.card.remove();
    charts.clear();
    table.rows.clear();
    table.dirty.clear();
    table.columns = "";
    table.showAll = false;
    $("epoch-table").tBodies[0].replaceChildren();
    $("epoch-table").tHead.rows[0].replaceChildren();
    for (const id of ["run-label", "run-hash", "hardware", "meta"]) $(id).textContent = "";
    $("meta-card").hidden = true;
    $("graph-card").hidden = true;
    $("graph-img").removeAttribute("src");
    $("graph-frame").removeAttribute("srcdoc");
    shownGraph = null;
    $("timeline-link").hidden = true;
    $("epoch-counter").textContent = "Epoch –";
    $("progress").style.width = "0%";
    setStatus("waiting", "Waiting…");
    scheduleRender();
    const run = state.run;
    fetch("/api/meta", { cache: "no-store" })
      .then((r) => (r.ok ? r.json() : null))
      .then((meta) => { if (meta && meta.run === run && state.run === run) applyMeta(meta); })
      .catch(() => {});  // the stream's own meta events still come
  }

  function applyMeta(meta) {
    if (!meta) return;
    $("run-label").textContent = meta.label || "";
    $("run-hash").textContent = meta.hash ? "[" + String(meta.hash).slice(0, 8) + "]" : "";
    document.title = "flodl" + (meta.label ? " " + meta.label : "") +
      (boot.mode === "archive" ? " — Training Report" : " — Training Dashboard");
    $("hardware").textContent = meta.hardware || "";
    const link = $("timeline-link");
    if (boot.mode === "archive") {
      // the timeline page written beside the report (<report>.timeline.html), a relative link:
      // encoded, so a name with ":" (read as a scheme), "#", "?" or "%" still points at the file
      if (meta.timeline_page) link.href = "./" + encodeURIComponent(meta.timeline_page);
      link.hidden = !meta.timeline_page;
    } else {
      link.hidden = !meta.timeline;
    }
    if (meta.total) state.total = meta.total;
    if (meta.meta && Object.keys(meta.meta).length) {
      $("meta").textContent = JSON.stringify(meta.meta, null, 2);
      $("meta-card").hidden = false;
    }
    if (boot.mode === "archive") {
      if (meta.svg) showGraph("svg", meta.svg);
      else if (meta.graph_html) showGraph("html", meta.graph_html);
    } else if (meta.graph && meta.graph.kind + meta.graph.version !== shownGraph) {
      shownGraph = meta.graph.kind + meta.graph.version;  // meta events repeat it: load it once
      const url = "/graph." + (meta.graph.kind === "svg" ? "svg" : "html") + "?v=" + encodeURIComponent(meta.graph.version);
      if (meta.graph.kind === "svg") showGraph("svg", url);
      else fetch(url).then((r) => (r.ok ? r.text() : Promise.reject(new Error(url + ": " + r.status))))
        .then((text) => showGraph("html", text))
        .catch((err) => console.warn("graph view unavailable:", err.message));
    }
  }

  // The SVG goes through <img> (its scripts never run); the HTML tree view (drawn when Graphviz
  // is missing) into a sandboxed iframe: no scripts, an opaque origin, nothing reaches this page.
  let shownGraph = null;
  function showGraph(kind, source) {
    const img = $("graph-img"), frame = $("graph-frame");
    if (kind === "svg") img.src = source; else frame.srcdoc = source;
    img.hidden = kind !== "svg";
    frame.hidden = kind === "svg";
    $("graph-card").hidden = false;
  }

  // How the run ended: "complete", or "failed" / "interrupted" (an exception ended it).
  function endStatus(complete) {
    return complete.status === "failed" || complete.status === "interrupted" ? complete.status : "complete";
  }

  function setStatus(cls, text) {
    const s = $("status");
    s.className = "status " + cls;
    $("status-text").textContent = text;
  }

  // ---- rendering ----
  let pending = false;
  function scheduleRender() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; render(); });
  }

  function render() {
    const recs = records();
    const last = recs.at(-1);
    $("no-epochs").hidden = recs.length > 0;
    if (last) {
      $("epoch-counter").textContent = "Epoch " + last.epoch + "/" + state.total;
      $("progress").style.width = Math.min(100, (100 * last.epoch) / Math.max(1, state.total)) + "%";
    }
    $("eta").textContent = state.complete ? "done" : fmtDur(state.eta);
    tickElapsed();
    renderMetricCharts(recs);
    drawChart($("chart-duration"), [{ name: "epoch time", color: PALETTE[0],
      points: recs.map((r) => [r.epoch, r.duration]) }], { fmt: fmtDur, axis: "duration" });
    renderResources(recs);
    renderTable(recs);
  }

  function tickElapsed() {
    let secs = state.lastElapsed;
    if (state.complete) secs = state.complete.elapsed;
    else if (secs !== null && boot.mode === "live") {
      // a server that stopped answering: the clock stops where the connection was lost
      const now = state.unreachable && state.lostAt !== null ? Math.max(state.lostAt, state.lastElapsedAt) : performance.now();
      secs += (now - state.lastElapsedAt) / 1000;
    }
    $("elapsed").textContent = fmtDur(secs);
  }

  function renderMetricCharts(recs) {
    const container = $("metric-charts");
    state.metricNames.forEach((name, i) => {
      let chart = charts.get(name);
      if (!chart) {
        const card = el("div", "card");
        const title = el("h3", null, name);
        const lastVal = el("span", "last");
        const canvas = el("canvas", "chart");
        canvas.dataset.metric = name;
        card.append(title, lastVal, canvas);
        container.append(card);
        chart = { card, canvas, last: lastVal, color: colorOf(i) };
        charts.set(name, chart);
      }
      const points = recs.map((r) => [r.epoch, hasMetric(r, name) ? r.metrics[name] : null]);
      // the latest value, even when it is NaN or infinite: never an older finite one
      let latest = null;
      for (let k = recs.length - 1; k >= 0; k--) if (hasMetric(recs[k], name)) { latest = recs[k]; break; }
      const value = latest ? latest.metrics[name] : null;
      const bad = latest !== null && typeof value !== "number";
      chart.last.textContent = !latest ? "–" : bad ? nonFinite(latest, name) : fmtVal(value);
      chart.last.classList.toggle("bad", bad);
      drawChart(chart.canvas, [{ name, color: chart.color, points }], { fmt: fmtVal, axis: "value" });
    });
  }

  function renderResources(recs) {
    const pct = (a, b) => (a !== undefined && b ? (100 * a) / b : null);
    const series = [
      { name: "CPU", color: PALETTE[0], points: recs.map((r) => [r.epoch, r.resources.cpu ?? null]) },
      { name: "RAM", color: PALETTE[2], points: recs.map((r) => [r.epoch, pct(r.resources.ram_used, r.resources.ram_total)]) },
      { name: "GPU", color: PALETTE[1], points: recs.map((r) => [r.epoch, r.resources.gpu ?? null]) },
      { name: "VRAM", color: PALETTE[3], points: recs.map((r) => [r.epoch, pct(r.resources.vram_alloc, r.resources.vram_total)]) },
    ].filter((s) => s.points.some((p) => p[1] !== null));
    drawChart($("chart-resources"), series, { fmt: (v) => fmtPct(v), axis: "percent", yMin: 0, yMax: 100, legend: true });

    const bars = $("resource-bars");
    bars.replaceChildren();
    const last = recs.at(-1);
    if (!last) return;
    const r = last.resources;
    const bar = (name, text, fraction, rank) => {
      const box = el("div", "res");
      if (rank !== undefined) box.dataset.rank = rank;
      box.append(el("div", "name", name), el("div", "val", text));
      const track = el("div", "track"), fill = el("div");
      const f = Math.max(0, Math.min(1, fraction || 0));
      fill.style.width = (100 * f) + "%";
      if (f > 0.95) fill.className = "bad"; else if (f > 0.8) fill.className = "warn";
      track.append(fill);
      box.append(track);
      bars.append(box);
    };
    if (r.cpu !== undefined) bar("CPU", fmtPct(r.cpu), r.cpu / 100);
    if (r.ram_total) bar("RAM", fmtBytes(r.ram_used) + " / " + fmtBytes(r.ram_total), r.ram_used / r.ram_total);
    if (r.rss !== undefined) bar("Process RSS", fmtBytes(r.rss), r.ram_total ? r.rss / r.ram_total : 0);
    for (const g of r.gpus || []) {
      const tag = (r.gpus.length > 1 ? "GPU" + g.dev : "GPU") + (g.name ? " · " + g.name : "");
      if (g.util !== undefined) bar(tag + " util", fmtPct(g.util), g.util / 100);
      if (g.vram_alloc !== undefined) {
        bar(tag + " VRAM", fmtBytes(g.vram_alloc) + (g.vram_total ? " / " + fmtBytes(g.vram_total) : ""),
          g.vram_total ? g.vram_alloc / g.vram_total : 0);
      }
    }
    for (const [rank, s] of Object.entries(last.ranks || {})) {
      const parts = [];
      if (s.cpu !== undefined) parts.push("CPU " + fmtPct(s.cpu));
      if (s.gpu !== undefined) parts.push("GPU " + fmtPct(s.gpu));
      if (s.vram_alloc !== undefined) parts.push("VRAM " + fmtBytes(s.vram_alloc));
      bar("rank " + rank, parts.join("  ") || "–", s.vram_total ? s.vram_alloc / s.vram_total : (s.gpu ?? s.cpu ?? 0) / 100, rank);
    }
  }

  // The epoch log, newest first. Rows are built once per epoch (again only when the epoch is
  // re-sent or a new metric adds a column), and only the newest TABLE_ROWS are shown until
  // "Show all" is pressed: a long run costs a few DOM moves per frame, not a rebuilt table.
  const TABLE_ROWS = 500;
  const table = { rows: new Map(), dirty: new Set(), columns: "", showAll: false };

  function tableRow(r) {
    const tr = document.createElement("tr");
    tr.append(el("td", null, r.epoch + "/" + (r.total || state.total)), el("td", null, fmtDur(r.duration)));
    for (const name of state.metricNames) {
      if (!hasMetric(r, name)) { tr.append(el("td", null, "")); continue; }
      const v = r.metrics[name];
      tr.append(typeof v === "number" ? el("td", null, fmtVal(v)) : el("td", "bad", nonFinite(r, name)));
    }
    const res = r.resources || {}, parts = [];
    if (res.cpu !== undefined) parts.push("CPU " + fmtPct(res.cpu));
    if (res.rss !== undefined) parts.push("RSS " + fmtBytes(res.rss));
    if (res.gpu !== undefined) parts.push("GPU " + fmtPct(res.gpu));
    if (res.vram_alloc !== undefined) parts.push("VRAM " + fmtBytes(res.vram_alloc));
    tr.append(el("td", null, parts.join("  ")));
    return tr;
  }

  function renderTable(recs) {
    const node = $("epoch-table"), body = node.tBodies[0];
    const columns = ["Epoch", "Time", ...state.metricNames, "Resources"];
    const key = JSON.stringify(columns);
    if (key !== table.columns) {  // a new metric: every row gains a cell
      table.columns = key;
      node.tHead.rows[0].replaceChildren(...columns.map((c) => el("th", null, c)));
      table.rows.clear();
      body.replaceChildren();
    }
    const shown = table.showAll ? recs.length : Math.min(recs.length, TABLE_ROWS);
    let at = body.firstChild;
    for (let i = recs.length - 1; i >= recs.length - shown; i--) {
      const r = recs[i];
      let tr = table.rows.get(r.epoch);
      if (!tr || table.dirty.has(r.epoch)) {
        const fresh = tableRow(r);
        if (tr) { if (at === tr) at = fresh; tr.replaceWith(fresh); }
        tr = fresh;
        table.rows.set(r.epoch, tr);
      }
      if (tr === at) at = at.nextSibling; else body.insertBefore(tr, at);
    }
    while (at) {  // older rows past the limit
      const next = at.nextSibling;
      at.remove();
      at = next;
    }
    if (table.rows.size > shown) {
      for (const [epoch, tr] of table.rows) if (!tr.isConnected) table.rows.delete(epoch);
    }
    table.dirty.clear();
    const more = $("table-more");
    more.hidden = shown >= recs.length;
    more.textContent = "Show all " + recs.length + " epochs";
  }

  // ---- y-axis ticks: the same algorithm as flodl.monitor.axis (the tests compare the two) ----
  // Ticks on a nice step; each label shows the decimals its step needs, so neighbours differ.
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
  const MAX_TICKS = 64;  // never more (a degenerate step could ask for millions)
  // exact for |k| <= 22 (a division, not pow: pow may be off by one ulp); past 1e-300 in two
  // steps, so that subnormal values get a (subnormal) power instead of 1 / Infinity = 0
  const pow10 = (k) => (k >= 0 ? Number("1e" + k) : k >= -300 ? 1 / Number("1e" + -k) : 1 / Number("1e" + -(k + 300)) / 1e300);
  const round12 = (v) => { const r = +v.toPrecision(12); return r === 0 ? 0 : r; };

  function niceAxisStep(span, count, kind) {
    return niceRawStep(span / Math.max(1, count), kind);
  }

  // [0, 0] when no step fits (a span that underflows): the caller draws no ticks
  function niceRawStep(raw, kind) {
    if (!(raw > 0 && isFinite(raw))) return [0, 0];
    const e = Math.floor(Math.log10(raw));
    if (kind === "duration" && raw > 1) {
      for (const s of TIME_STEPS) if (s >= raw) return [s, 0];
      const [hours, he] = niceRawStep(raw / 3600, "value");
      return [round12(hours * 3600), Math.max(0, he)];
    }
    const n = raw / pow10(e);
    if (n > 5) return [round12(pow10(e + 1)), e + 1];
    return [round12((n <= 1 ? 1 : n <= 2 ? 2 : 5) * pow10(e)), e];
  }

  function clock(t, step) {
    const sign = t < 0 ? "-" : "";
    t = Math.abs(Math.round(t));
    const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), s = t % 60;
    const two = (x) => String(x).padStart(2, "0");
    if (h === 0) return sign + m + "m " + two(s) + "s";
    if (step % 60 === 0) return sign + h + "h " + two(m) + "m";
    return sign + h + "h " + two(m) + "m " + two(s) + "s";
  }

  function axisNumbers(ticks, e, extra) {
    const biggest = Math.max(...ticks.map(Math.abs));
    if (biggest === 0) return ticks.map(() => "0");
    if (biggest >= 1e6 || biggest < 1e-3) {
      const p = Math.max(0, Math.floor(Math.log10(biggest)) - e) + extra;
      return ticks.map((t) => (t === 0 ? "0" : t.toExponential(p).replace("e+", "e")));
    }
    return ticks.map((t) => t.toFixed(Math.max(0, -e) + extra));
  }

  function axisLabels(ticks, step, e, kind, extra) {
    const biggest = Math.max(...ticks.map(Math.abs));
    const fixed = (v, d) => v.toFixed(d);
    if (kind === "percent") return axisNumbers(ticks, e, extra).map((l) => l + "%");
    if (kind === "duration") {
      if (biggest >= 60 && step >= 1) return ticks.map((t) => (t === 0 ? "0s" : clock(t, step)));
      if (biggest < 1e-6) return axisNumbers(ticks, e, extra).map((l) => l + "s");
      if (biggest < 1e-3) return ticks.map((t) => fixed(t * 1e6, Math.max(0, -(e + 6)) + extra) + "µs");
      if (biggest < 1) return ticks.map((t) => fixed(t * 1e3, Math.max(0, -(e + 3)) + extra) + "ms");
      return ticks.map((t) => fixed(t, Math.max(0, -e) + extra) + "s");
    }
    return axisNumbers(ticks, e, extra);
  }

  function axisTicks(lo, hi, kind, count) {
    if (!(isFinite(lo) && isFinite(hi)) || hi <= lo) return [];
    let step = 0, e = 0, ticks = [];
    for (const parts of [count || 4, 2 * (count || 4), 4 * (count || 4)]) {  // finer if < 2 fit
      // (hi - lo) overflows for a range such as ±1e308: divide first then
      const span = hi - lo, raw = isFinite(span) ? span / parts : hi / parts - lo / parts;
      [step, e] = niceRawStep(raw, kind);
      if (!(step > 0 && isFinite(step))) return [];
      const a = lo / step - 1e-9, b = hi / step + 1e-9;
      if (!(isFinite(a) && isFinite(b)) || b - a > MAX_TICKS + 1) return [];
      const first = Math.ceil(a), last = Math.floor(b);
      ticks = [];
      for (let k = first; k <= last; k++) ticks.push(round12(k * step));
      if (ticks.length >= 2) break;
    }
    if (!ticks.length) return [];
    let labels = [];
    for (let extra = 0; extra <= 4; extra++) {
      labels = axisLabels(ticks, step, e, kind, extra);
      if (new Set(labels).size === labels.length) break;
    }
    return ticks.map((t, i) => [t, labels[i]]);
  }

  // ---- a small canvas line chart with hover ----
  function niceStep(range, count) {
    const raw = range / Math.max(1, count), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const n = raw / mag;
    return (n >= 5 ? 10 : n >= 2 ? 5 : n >= 1 ? 2 : 1) * mag;
  }

  // A chart scrolled out of view is painted when it comes back, not on every epoch: a run with
  // hundreds of metrics repaints the few charts on screen.
  const onScreen = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const canvas = entry.target;
      canvas._visible = entry.isIntersecting;
      if (canvas._visible && canvas._stale) { canvas._stale = false; paint(canvas, null); }
    }
  }, { rootMargin: "300px" }) : null;

  function drawChart(canvas, series, opts) {
    canvas._chart = { series, opts };
    // how many points are drawn: lets a test (or a curious user) see the chart follow the data
    canvas.dataset.points = series.reduce((n, s) => n + s.points.filter((p) => p[1] !== null && isFinite(p[1])).length, 0);
    if (canvas._visible === false) canvas._stale = true; else paint(canvas, null);
    if (!canvas._hooked) {
      canvas._hooked = true;
      if (onScreen) onScreen.observe(canvas);
      canvas.addEventListener("mousemove", (ev) => hover(canvas, ev));
      canvas.addEventListener("mouseleave", () => { $("tooltip").hidden = true; paint(canvas, null); });
    }
  }

  function layout(canvas) {
    const { series, opts } = canvas._chart;
    // loops, not Math.min(...array): a spread of a long run's points overflows the call stack
    let x0 = Infinity, x1 = -Infinity, lo = Infinity, hi = -Infinity;
    for (const s of series) for (const [x, y] of s.points) {
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (typeof y === "number" && isFinite(y)) { if (y < lo) lo = y; if (y > hi) hi = y; }
    }
    if (x0 > x1) { x0 = 1; x1 = 1; }
    let y0 = opts.yMin ?? lo, y1 = opts.yMax ?? hi;
    if (!(lo <= hi)) { y0 = opts.yMin ?? 0; y1 = opts.yMax ?? 1; }
    const BIG = Number.MAX_VALUE;
    if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 = Math.max(-BIG, y0 - d); y1 = Math.min(BIG, y1 + d); }
    if (opts.yMin === undefined) {  // 5% above and below, computed so that ±1e308 stays finite
      const pad = y1 * 0.05 - y0 * 0.05;
      y0 = Math.max(-BIG, y0 - pad); y1 = Math.min(BIG, y1 + pad);
    }
    const w = canvas.clientWidth, h = canvas.clientHeight;
    const box = { left: 58, right: w - 12, top: opts.legend ? 22 : 8, bottom: h - 22 };
    const sx = (x) => box.left + (x1 === x0 ? (box.right - box.left) / 2 : ((x - x0) / (x1 - x0)) * (box.right - box.left));
    const sy = (y) => box.bottom - ((y / 2 - y0 / 2) / (y1 / 2 - y0 / 2)) * (box.bottom - box.top);
    return { x0, x1, y0, y1, w, h, box, sx, sy };
  }

  function paint(canvas, hoverX) {
    const { series, opts } = canvas._chart;
    const dpr = window.devicePixelRatio || 1;
    const L = layout(canvas);
    canvas.width = Math.max(1, Math.round(L.w * dpr));
    canvas.height = Math.max(1, Math.round(L.h * dpr));
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, L.w, L.h);
    const css = getComputedStyle(document.documentElement);
    const muted = css.getPropertyValue("--muted").trim(), line = css.getPropertyValue("--line").trim();
    ctx.font = "11px ui-sans-serif, system-ui, sans-serif";
    ctx.fillStyle = muted;
    ctx.strokeStyle = line;
    ctx.lineWidth = 1;
    // y grid and labels (distinct at every scale; the drawn labels are kept for tests)
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    const yticks = axisTicks(L.y0, L.y1, opts.axis || "value", 4);
    canvas.dataset.yLabels = yticks.map((t) => t[1]).join("|");
    for (const [y, label] of yticks) {
      const py = Math.round(L.sy(y)) + 0.5;
      ctx.beginPath(); ctx.moveTo(L.box.left, py); ctx.lineTo(L.box.right, py); ctx.stroke();
      ctx.fillText(label, L.box.left - 6, py);
    }
    // x labels (1-based epochs, integers)
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    const xstep = Math.max(1, Math.round(niceStep(Math.max(1, L.x1 - L.x0), 6)));
    const first = Math.ceil(L.x0 / xstep) * xstep;
    if (series.some((s) => s.points.length) && (first - L.x0 >= xstep / 2 || L.x0 === L.x1)) {
      ctx.fillText(String(L.x0), L.sx(L.x0), L.box.bottom + 6);  // always label the first epoch
    }
    for (let x = first; x <= L.x1; x += xstep) ctx.fillText(String(x), L.sx(x), L.box.bottom + 6);
    // series
    for (const s of series) {
      ctx.strokeStyle = s.color; ctx.fillStyle = s.color; ctx.lineWidth = 2;
      ctx.beginPath();
      let open = false, lastPt = null;
      for (const [x, y] of s.points) {
        if (y === null || !isFinite(y)) { open = false; continue; }
        const px = L.sx(x), py = L.sy(y);
        if (open) ctx.lineTo(px, py); else ctx.moveTo(px, py);
        open = true; lastPt = [px, py];
      }
      ctx.stroke();
      if (lastPt) { ctx.beginPath(); ctx.arc(lastPt[0], lastPt[1], 3, 0, 2 * Math.PI); ctx.fill(); }
    }
    if (opts.legend) {
      ctx.textAlign = "left"; ctx.textBaseline = "middle";
      let lx = L.box.left;
      for (const s of series) {
        ctx.fillStyle = s.color; ctx.fillRect(lx, 7, 10, 10);
        ctx.fillStyle = muted; ctx.fillText(s.name, lx + 14, 12);
        lx += 24 + ctx.measureText(s.name).width;
      }
    }
    if (hoverX !== null) {
      ctx.strokeStyle = muted; ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(L.sx(hoverX), L.box.top); ctx.lineTo(L.sx(hoverX), L.box.bottom); ctx.stroke();
      ctx.setLineDash([]);
    }
  }

  function hover(canvas, ev) {
    const { series, opts } = canvas._chart;
    const L = layout(canvas), rect = canvas.getBoundingClientRect();
    const mx = ev.clientX - rect.left;
    let best = null;
    for (const s of series) for (const [x] of s.points) {
      const d = Math.abs(L.sx(x) - mx);
      if (d <= 30 && (best === null || d < best.d)) best = { x, d };
    }
    const tip = $("tooltip");
    if (!best) { tip.hidden = true; paint(canvas, null); return; }
    const lines = ["epoch " + best.x];
    for (const s of series) {
      const p = s.points.find((q) => q[0] === best.x);
      if (p && p[1] !== null) lines.push(s.name + ": " + opts.fmt(p[1]));
    }
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = ev.clientY + 12 + "px";
    paint(canvas, best.x);
  }

  window.addEventListener("resize", scheduleRender);
  $("table-more").addEventListener("click", () => { table.showAll = true; scheduleRender(); });

  // ---- data sources ----
  const RETRY_MS = 5000, LOST_MS = 6000, NEXT_RUN_MS = 3000;  // the live stream's timings (below)
  let source = null, lastId = null, probing = false, lastProbe = 0;
  applyMeta(boot);
  if (boot.mode === "archive") {
    $("mode").textContent = "archived report";
    try {
      for (const rec of boot.history || []) processEpoch(rec);
      state.complete = boot.complete;
      setStatus(boot.complete ? endStatus(boot.complete) : "waiting", boot.complete ? boot.complete.text : "Incomplete run");
      if (!boot.complete && state.lastElapsed !== null) state.lastElapsedAt = performance.now();
    } catch (err) {
      setStatus("disconnected", "Archive error — see console");
      throw err;
    }
    scheduleRender();
  } else {
    $("mode").textContent = "live";
    connect();
    setInterval(watchConnection, 1000);
  }

  // ---- the live stream ----
  // The browser reconnects a dropped stream itself (Last-Event-ID). It gives up for good on an
  // error status (503: max_clients tabs already open): then a new EventSource is opened after
  // RETRY_MS (the server's Retry-After), resuming with ?last=. A server that stops answering for
  // LOST_MS is reported as gone, and the elapsed clock stops where the connection was lost.

  function connect() {
    source = new EventSource("/events" + (lastId ? "?last=" + encodeURIComponent(lastId) : ""));
    const on = (name, handle) => source.addEventListener(name, (ev) => {
      seen(ev.lastEventId);
      handle(JSON.parse(ev.data));
    });
    on("epoch", processEpoch);
    on("meta", applyMeta);
    on("complete", (complete) => {
      state.complete = complete;
      setStatus(endStatus(complete), complete.text || "Complete");
      source.close();  // otherwise the browser would reconnect when the stream ends
      scheduleRender();
    });
    source.addEventListener("open", () => {
      connected();
      if (!state.complete) setStatus(state.recs.length ? "training" : "waiting", state.recs.length ? "Training" : "Waiting…");
    });
    source.addEventListener("error", () => {
      if (state.complete) return;
      if (state.lostAt === null) state.lostAt = performance.now();
      if (!state.unreachable) setStatus("disconnected", "Reconnecting…");
      if (source.readyState === EventSource.CLOSED) setTimeout(() => { if (!state.complete) connect(); }, RETRY_MS);
    });
  }

  // Every event id is "<run token>-<number>": another token is another run on this port.
  function seen(id) {
    if (!id) return;
    const run = id.split("-")[0];
    if (state.run !== null && run !== state.run) { state.run = run; resetRun(); }
    state.run = run;
    lastId = id;
    connected();
  }

  function connected() {
    if (state.lostAt === null) return;
    state.lostAt = null;
    state.unreachable = false;
  }

  function watchConnection() {
    if (state.complete) { watchForNextRun(); return; }
    tickElapsed();
    const now = performance.now();
    if (state.lostAt === null || now - state.lostAt < LOST_MS || probing || now - lastProbe < 3000) return;
    probing = true;  // is the server there at all (a busy one answers, a stopped one does not)?
    lastProbe = now;
    fetch("/api/history", { method: "HEAD", cache: "no-store" })
      .then(() => false, () => true)
      .then((gone) => {
        probing = false;
        if (state.lostAt === null || state.complete) return;
        state.unreachable = gone;
        if (gone) setStatus("disconnected", "Disconnected — the training process may have ended");
        else setStatus("disconnected", "Reconnecting…");
        tickElapsed();
      });
  }

  // A finished run's stream is closed; the tab keeps asking (HEAD, every NEXT_RUN_MS) which run
  // the port serves, and follows the next training process that serves it.
  function watchForNextRun() {
    const now = performance.now();
    if (probing || now - lastProbe < NEXT_RUN_MS) return;
    probing = true;
    lastProbe = now;
    fetch("/api/history", { method: "HEAD", cache: "no-store" })
      .then((r) => r.headers.get("X-Flodl-Run"), () => null)
      .then((run) => {
        probing = false;
        if (!state.complete || !run || run === state.run) return;
        state.run = run;
        lastId = null;
        resetRun();
        connect();
      });
  }

  window.flodlDashboard = { state, records, axisTicks };  // for tests and the curious
})();
