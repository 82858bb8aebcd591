"""The Timeline's self-contained HTML page (``Timeline.save_html`` and the dashboard's
``/timeline.html``): lanes of CPU, RAM and each GPU on one time axis, events as markers, syncs as
spans per rank, idle GPU gaps shaded. Everything is inline; the page loads no URL."""

from __future__ import annotations

import html
import secrets
from typing import TYPE_CHECKING

from flodl.monitor.page import content_security_policy, safe_json

if TYPE_CHECKING:
    from flodl.monitor.timeline import Timeline

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 20px; color: #222; background: #fafafa; }
h1 { font-size: 20px; margin: 0 0 8px; } .sub { color: #666; font-size: 13px; }
table { border-collapse: collapse; margin: 10px 0; font-size: 13px; }
td, th { padding: 2px 10px; border-bottom: 1px solid #e4e4e4; text-align: left; }
#lanes { width: 100%; border: 1px solid #ddd; background: #fff; }
#tip { position: fixed; display: none; background: #fff; border: 1px solid #999;
  padding: 4px 8px; font-size: 12px; pointer-events: none; white-space: pre; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
"""

_SCRIPT = """
const D = JSON.parse(document.getElementById('timeline-data').textContent);
const S = D.samples, E = D.events, GAPS = D.idle_gaps;
const COLORS = new Map([['sync_start', '#2980b9'], ['sync_end', '#2980b9'],
  ['anchor_changed', '#8e44ad'], ['checkpoint_saved', '#27ae60'], ['epoch_end', '#e67e22']]);
// your own event kinds: a colour each, in order of appearance (a Map: any name is just a name)
const EXTRA = ['#c0392b', '#16a085', '#d35400', '#7f8c8d', '#2c3e50', '#b7950b'];
E.forEach(e => { if (!COLORS.has(e.kind)) COLORS.set(e.kind, EXTRA[(COLORS.size - 5) % EXTRA.length]); });
const color = k => COLORS.get(k) || '#7f8c8d';
// a loop, not Math.max(...array): spreading 100k+ samples overflows the call stack
const maxOf = (xs, f, floor) => { let m = floor; for (const x of xs) { const v = f(x); if (v > m) m = v; } return m; };
const devices = [...new Set(S.flatMap(s => s.gpus.map(g => g.d)))].sort((a, b) => a - b);
const ranks = [...new Set(E.filter(e => e.kind.startsWith('sync')).map(e => e.rank))];
const lanes = [{name: 'CPU %', get: s => s.cpu, max: 100},
  {name: 'RAM GB', get: s => s.ram[0] / 1e9, max: maxOf(S, s => s.ram[1] / 1e9, 1e-9)}];
devices.forEach(d => {
  const g = s => s.gpus.find(x => x.d === d) || {};
  lanes.push({name: 'GPU' + d + ' %', get: s => g(s).u, max: 100, dev: d});
  lanes.push({name: 'GPU' + d + ' mem GB', get: s => (g(s).vu ?? g(s).va) / 1e9,
    max: maxOf(S, s => (g(s).vt || 0) / 1e9, 1e-9)});
});
const syncLanes = ranks.map(r => ({name: 'sync ' + (r === null ? '' : 'rank ' + r), rank: r}));
const canvas = document.getElementById('lanes'), tip = document.getElementById('tip');
const LANE = 56, LEFT = 110, RIGHT = 16, TOP = 8, AXIS = 24;
const t1 = Math.max(maxOf(S, s => s.t, 1), maxOf(E, e => e.t, 1));
// the time axis in the unit the run's length needs: 0.5s, 2m 30s, 1h 05m
const two = x => String(x).padStart(2, '0');
function clock(ms) {
  const s = ms / 1000;
  if (t1 < 120e3) return (t1 < 10e3 ? s.toFixed(1) : s.toFixed(0)) + 's';
  const w = Math.round(s), h = Math.floor(w / 3600), m = Math.floor((w % 3600) / 60);
  return t1 < 7200e3 ? Math.floor(w / 60) + 'm ' + two(w % 60) + 's' : h + 'h ' + two(m) + 'm';
}
let X = null;
function draw() {
  const n = lanes.length + syncLanes.length, h = TOP + n * LANE + AXIS;
  const dpr = window.devicePixelRatio || 1, w = canvas.clientWidth;
  canvas.style.height = h + 'px'; canvas.width = w * dpr; canvas.height = h * dpr;
  const c = canvas.getContext('2d'); c.setTransform(dpr, 0, 0, dpr, 0, 0); c.clearRect(0, 0, w, h);
  X = t => LEFT + (t / t1) * (w - LEFT - RIGHT);
  c.font = '11px sans-serif';
  lanes.forEach((lane, i) => {
    const y0 = TOP + i * LANE, y = v => y0 + LANE - 6 - (v / lane.max) * (LANE - 12);
    c.fillStyle = '#444'; c.fillText(lane.name, 6, y0 + LANE / 2 + 4);
    c.strokeStyle = '#eee'; c.strokeRect(LEFT, y0, w - LEFT - RIGHT, LANE);
    if (lane.dev !== undefined) (GAPS[lane.dev] || []).forEach(([a, b]) => {
      c.fillStyle = 'rgba(231,76,60,0.18)'; c.fillRect(X(a), y0, Math.max(1, X(b) - X(a)), LANE); });
    c.strokeStyle = '#2c3e50'; c.beginPath(); let pen = false;
    S.forEach(s => { const v = lane.get(s); if (v === undefined || v === null || isNaN(v)) { pen = false; return; }
      if (pen) c.lineTo(X(s.t), y(v)); else c.moveTo(X(s.t), y(v)); pen = true; });
    c.stroke();
  });
  syncLanes.forEach((lane, j) => {
    const y0 = TOP + (lanes.length + j) * LANE;
    c.fillStyle = '#444'; c.fillText(lane.name, 6, y0 + LANE / 2 + 4);
    c.strokeStyle = '#eee'; c.strokeRect(LEFT, y0, w - LEFT - RIGHT, LANE);
    let open = null;
    E.filter(e => e.rank === lane.rank).forEach(e => {
      if (e.kind === 'sync_start') open = e.t;
      if (e.kind === 'sync_end') { const a = open ?? e.t - (e.data.duration_ms || 0);
        c.fillStyle = 'rgba(41,128,185,0.55)'; c.fillRect(X(a), y0 + 8, Math.max(2, X(e.t) - X(a)), LANE - 16); open = null; }
    });
  });
  E.forEach(e => { if (e.kind.startsWith('sync')) return; c.strokeStyle = color(e.kind); c.beginPath();
    c.moveTo(X(e.t), TOP); c.lineTo(X(e.t), TOP + n * LANE); c.stroke(); });
  c.fillStyle = '#555';
  for (let k = 0; k <= 8; k++) {  // the last label ends at the right edge instead of past it
    const t = t1 * k / 8;
    c.textAlign = k === 0 ? 'left' : k === 8 ? 'right' : 'center';
    c.fillText(clock(t), X(t), h - 6);
  }
  c.textAlign = 'left';
  canvas.dataset.timeLabels = Array.from({length: 9}, (_, k) => clock(t1 * k / 8)).join('|');
}
canvas.addEventListener('mousemove', ev => {
  if (!X) return; const r = canvas.getBoundingClientRect(), mx = ev.clientX - r.left;
  let best = null, dist = 6;
  E.forEach(e => { const d = Math.abs(X(e.t) - mx); if (d < dist) { dist = d; best = e; } });
  let text;
  if (best) text = (best.t / 1000).toFixed(3) + 's  ' + best.kind + (best.rank === null ? '' : '  rank ' + best.rank) + '\\n' + JSON.stringify(best.data);
  else { let s = null, sd = 1e9; S.forEach(x => { const d = Math.abs(X(x.t) - mx); if (d < sd) { sd = d; s = x; } });
    if (!s) { tip.style.display = 'none'; return; }
    text = (s.t / 1000).toFixed(2) + 's  CPU ' + s.cpu + '%  RAM ' + (s.ram[0] / 1e9).toFixed(2) + ' GB' +
      s.gpus.map(g => '\\nGPU' + g.d + ' ' + (g.u ?? '-') + '%  ' + ((g.vu ?? g.va ?? 0) / 1e9).toFixed(2) + ' GB').join(''); }
  tip.textContent = text; tip.style.display = 'block';
  tip.style.left = (ev.clientX + 12) + 'px'; tip.style.top = (ev.clientY + 12) + 'px';
});
canvas.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
window.addEventListener('resize', draw); draw();
const legend = document.getElementById('legend');
[...COLORS].filter(([k]) => k !== 'sync_start').forEach(([k, v]) => {
  const s = document.createElement('span'); s.textContent = '\\u2503 ' + (k === 'sync_end' ? 'sync' : k);
  s.style.color = v; legend.appendChild(s); });
"""


def render_timeline(timeline: Timeline, *, title: str = "flodl timeline") -> tuple[str, str]:
    """(the page, its script nonce) for ``timeline`` as it is now."""
    data = timeline.to_json()
    summary = timeline.summary()
    data["idle_gaps"] = {d: timeline.idle_gaps(d) for d in summary.gpu_idle_pct}
    rows = [
        ("duration", f"{summary.total_ms / 1e3:.1f} s"),
        ("samples", f"{summary.sample_count} (every {timeline.poll_interval_ms:g} ms)"),
        ("events", ", ".join(f"{k} {n}" for k, n in sorted(summary.kinds.items())) or "none"),
        ("CPU mean", f"{summary.cpu_mean_pct:.0f}%"),
        ("RAM peak", f"{summary.ram_peak / 1e9:.2f} GB"),
    ]
    if summary.sync_count:
        rows.append(("syncs", f"{summary.sync_count}, {summary.avg_sync_ms:.1f} ms average"))
    rows += [(f"GPU{d} idle", f"{p:.0f}% of samples") for d, p in summary.gpu_idle_pct.items()]
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    nonce = secrets.token_urlsafe(16)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{html.escape(content_security_policy(nonce))}">
<link rel="icon" href="data:,">
<title>{html.escape(title)}</title><style>{_STYLE}</style></head>
<body><h1>{html.escape(title)}</h1>
<div class="sub">red: GPU idle gaps (&lt;5% for 0.5 s or more); blue: syncs per rank</div>
<table>{table}</table>
<div class="legend" id="legend"></div>
<canvas id="lanes"></canvas><div id="tip"></div>
<script type="application/json" id="timeline-data">{safe_json(data)}</script>
<script nonce="{nonce}">{_SCRIPT}</script>
</body></html>
"""
    return page, nonce
