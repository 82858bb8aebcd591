"""The dashboard page: one HTML template plus CSS and JS shipped in ``flodl/monitor/assets``.

The same page serves the live dashboard (data arrives over Server-Sent Events) and the offline
archive (data embedded). Everything user-controlled (metric names, labels, hardware strings,
metadata) travels as JSON inside a ``<script type="application/json">`` block with ``<``, ``>`` and
``&`` escaped, and the page JS writes it with ``textContent`` only, so no name can inject markup.
The graph SVG is shown through ``<img>``, where SVG scripts never run.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import secrets
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["render_page", "safe_json", "strict_json"]

_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")


@cache
def _asset(name: str) -> str:
    return resources.files("flodl.monitor").joinpath("assets", name).read_text(encoding="utf-8")


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def strict_json(value: Any, **kw: Any) -> str:
    """Standard JSON (never ``NaN``), compact."""
    return json.dumps(finite(value), allow_nan=False, separators=(",", ":"), **kw)


def safe_json(value: Any) -> str:
    """JSON that is inert inside an HTML ``<script>`` element (no ``</script>``, no ``<!--``)."""
    text = strict_json(value, ensure_ascii=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def svg_data_uri(svg: str | None) -> str | None:
    if not svg:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def content_security_policy(nonce: str) -> str:
    """Only the page's own inline script runs; it may talk back to its own origin only."""
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
        "img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'"
    )


def render_page(boot: dict[str, Any], *, title: str, nonce: str | None = None) -> tuple[str, str]:
    """The page with ``boot`` embedded; returns (html, the script nonce used)."""
    nonce = nonce or secrets.token_urlsafe(16)
    values = {
        "TITLE": html.escape(title),
        "CSP": html.escape(content_security_policy(nonce)),
        "NONCE": nonce,
        "STYLE": _asset("dashboard.css"),
        "SCRIPT": _asset("dashboard.js"),
        "BOOT": safe_json(boot),
    }
    # one pass, so nothing substituted (e.g. a metric named "{{SCRIPT}}") is substituted again
    page = _PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), _asset("dashboard.html"))
    return page, nonce
