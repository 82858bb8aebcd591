"""Self-contained HTML pages: epoch curves (``plot_html``) and the graph tree (``html_view``).

Everything is inline (CSS, JS, data); the pages load no URL, so they open offline and can be
embedded in the monitor's dashboard. Data goes in as escaped JSON, names as escaped text.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from flodl.graph.visual import PALETTE, esc, json_for_script

if TYPE_CHECKING:
    from flodl.graph.graph import Graph

_CHART_JS = """
const data = JSON.parse(document.getElementById('series').textContent);
const palette = JSON.parse(document.getElementById('palette').textContent);
const canvas = document.getElementById('chart'), tip = document.getElementById('tip');
let view = null;
function draw() {
  const dpr = window.devicePixelRatio || 1, w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const c = canvas.getContext('2d'); c.setTransform(dpr, 0, 0, dpr, 0, 0); c.clearRect(0, 0, w, h);
  const all = data.flatMap(s => s.values.filter(v => v !== null));
  let lo = Math.min(...all), hi = Math.max(...all);
  if (lo === hi) { lo -= 1; hi += 1; } else { const p = (hi - lo) * 0.05; lo -= p; hi += p; }
  const n = Math.max(...data.map(s => s.values.length)), L = 60, R = 20, T = 20, B = 40;
  const x = i => L + (n > 1 ? i / (n - 1) : 0.5) * (w - L - R);
  const y = v => T + (1 - (v - lo) / (hi - lo)) * (h - T - B);
  c.strokeStyle = '#ccc'; c.fillStyle = '#555'; c.font = '11px sans-serif';
  for (let k = 0; k <= 4; k++) {
    const v = lo + (hi - lo) * k / 4; c.beginPath(); c.moveTo(L, y(v)); c.lineTo(w - R, y(v));
    c.stroke(); c.fillText(v.toPrecision(4), 4, y(v) + 4);
  }
  const step = Math.max(1, Math.floor(n / 10));
  for (let i = 0; i < n; i += step) c.fillText(String(i + 1), x(i) - 3, h - B + 16);
  c.fillText('Epoch', w / 2, h - 6);
  data.forEach((s, k) => {
    c.strokeStyle = c.fillStyle = palette[k % palette.length]; c.lineWidth = 2; c.beginPath();
    let pen = false;
    s.values.forEach((v, i) => { if (v === null) { pen = false; return; }
      if (pen) c.lineTo(x(i), y(v)); else c.moveTo(x(i), y(v)); pen = true; });
    c.stroke();
    s.values.forEach((v, i) => { if (v !== null) { c.beginPath(); c.arc(x(i), y(v), 3, 0, 7); c.fill(); } });
  });
  view = {x, n};
}
canvas.addEventListener('mousemove', e => {
  if (!view) return; const r = canvas.getBoundingClientRect(), mx = e.clientX - r.left;
  let best = -1, dist = 21;
  for (let i = 0; i < view.n; i++) { const d = Math.abs(view.x(i) - mx); if (d < dist) { dist = d; best = i; } }
  if (best < 0) { tip.style.display = 'none'; return; }
  tip.textContent = 'epoch ' + (best + 1) + ': ' + data.map(s => s.name + '=' +
    (s.values[best] === null || s.values[best] === undefined ? '-' : s.values[best].toPrecision(5))).join('  ');
  tip.style.display = 'block'; tip.style.left = (e.clientX + 12) + 'px'; tip.style.top = (e.clientY + 12) + 'px';
});
window.addEventListener('resize', draw); draw();
const legend = document.getElementById('legend');
data.forEach((s, k) => { const li = document.createElement('li'); li.textContent = s.name;
  li.style.color = palette[k % palette.length]; legend.appendChild(li); });
"""


def _clean(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def curves_page(title: str, series: dict[str, list[float]]) -> str:
    data = [{"name": name, "values": _clean(values)} for name, values in series.items()]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
#chart {{ width: 100%; height: 420px; border: 1px solid #ddd; }}
#legend {{ list-style: none; padding: 0; display: flex; gap: 16px; flex-wrap: wrap; }}
#tip {{ position: fixed; display: none; background: #fff; border: 1px solid #aaa;
  padding: 4px 8px; font-size: 12px; pointer-events: none; }}
</style></head>
<body><h1>{esc(title)}</h1>
<canvas id="chart"></canvas><ul id="legend"></ul><div id="tip"></div>
<script type="application/json" id="series">{json_for_script(data)}</script>
<script type="application/json" id="palette">{json_for_script(list(PALETTE))}</script>
<script>{_CHART_JS}</script>
</body></html>
"""


def _tree_html(graph: Graph, path: str) -> str:
    from flodl.graph.graph import Graph as _Graph
    from flodl.graph.visual import _describe

    rows = []
    for node in graph.nodes:
        module = graph.module_of(node.id) if node.attr else None
        tags = "".join(f' <span class="tag">#{esc(t)}</span>' for t in node.tags)
        if isinstance(module, _Graph):
            seg = module.label or node.id
            sub = f"{path}.{seg}" if path else seg
            n = sum(p.numel() for p in module.parameters())
            rows.append(
                f'<li><details open><summary><b>{esc(seg)}</b> <span class="path">{esc(sub)}'
                f'</span>{tags} <span class="n">{n:,} params</span></summary>'
                f"{_tree_html(module, sub if module.label else path)}</details></li>"
            )
            continue
        n = sum(p.numel() for p in module.parameters()) if module is not None else 0
        frozen = (
            module is not None and n > 0 and not any(p.requires_grad for p in module.parameters())
        )
        rows.append(
            f'<li class="{esc(node.kind)}"><code>{esc(node.id)}</code> '
            f"{esc(_describe(graph, node, module))}{tags}"
            + (f' <span class="n">{n:,} params{" (frozen)" if frozen else ""}</span>' if n else "")
            + "</li>"
        )
    return "<ul>" + "".join(rows) + "</ul>"


def tree_page(graph: Graph) -> str:
    title = graph.label or "graph"
    total = sum(p.numel() for p in graph.parameters())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
ul {{ list-style: none; padding-left: 18px; border-left: 1px solid #ddd; }}
li {{ margin: 3px 0; }} summary {{ cursor: pointer; }}
.tag {{ color: #2980b9; }} .path, .n {{ color: #888; font-size: 12px; }}
code {{ background: #f4f4f4; padding: 0 3px; }}
</style></head>
<body><h1>{esc(title)} <span class="n">[{esc(graph.short_hash())}] {total:,} params</span></h1>
{_tree_html(graph, "")}
</body></html>
"""
