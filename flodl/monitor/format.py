"""Text formatting shared by the terminal line, the text log and the finish summary.

The formats mirror the Rust original (``format_eta``, ``format_bytes``, ``format_metric``) so logs
read the same in both languages; Python's exponent padding is stripped to match (``1.00e-4``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flodl.monitor.resources import ResourceSample

__all__ = ["format_bytes", "format_eta", "format_metric"]

_KIB = 1024
_MIB = 1024**2
_GIB = 1024**3
_EXPONENT = re.compile(r"e([+-])0*(\d)")


def format_eta(secs: float) -> str:
    """A duration for people: ``42ms``, ``1.5s``, ``1m 30s``, ``1h 01m``.

    >>> [format_eta(s) for s in (0.042, 1.0, 1.5, 90, 3661)]
    ['42ms', '1s', '1.5s', '1m 30s', '1h 01m']
    >>> format_eta(-1), format_eta(float("nan"))
    ('—', '—')
    """
    if math.isnan(secs) or secs < 0:
        return "—"
    if math.isinf(secs):
        return "∞"
    if secs < 1:
        return f"{int(secs * 1000)}ms"
    if secs < 60:
        whole = int(secs)
        tenth = int((secs - whole) * 10 + 1e-9)  # 4.8 - 4 is 0.7999…
        return f"{whole}.{tenth}s" if tenth > 0 else f"{whole}s"
    s = int(secs)
    h, m, r = s // 3600, (s % 3600) // 60, s % 60
    return f"{h}h {m:02d}m" if h > 0 else f"{m}m {r:02d}s"


def format_bytes(n: int | float) -> str:
    """A byte count in binary units: ``512 B``, ``500 KB``, ``100 MB``, ``2.1 GB``.

    >>> format_bytes(512), format_bytes(500 * 1024), format_bytes(2_254_857_830)
    ('512 B', '500 KB', '2.1 GB')
    """
    if n >= _GIB:
        return f"{n / _GIB:.1f} GB"
    if n >= _MIB:
        return f"{n / _MIB:.0f} MB"
    if n >= _KIB:
        return f"{n / _KIB:.0f} KB"
    return f"{int(n)} B"


def format_metric(v: float) -> str:
    """A metric value with enough digits to follow training: ``0``, ``1.00e-4``, ``1.2345``, ``12345.67``.

    >>> [format_metric(v) for v in (0.0, 0.0001, 1.2345, 12345.67, float("nan"))]
    ['0', '1.00e-4', '1.2345', '12345.67', 'nan']
    """
    if v == 0:
        return "0"
    if math.isnan(v) or math.isinf(v):
        return str(v)  # nan, inf, -inf
    if abs(v) < 0.001:
        return _EXPONENT.sub(lambda m: f"e{'-' if m[1] == '-' else ''}{m[2]}", f"{v:.2e}")
    if abs(v) < 100:
        return f"{v:.4f}"
    return f"{v:.2f}"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(name: str) -> str:
    r"""``name`` with control characters escaped, so a metric name cannot drive the terminal.

    >>> printable("loss\x1b[2J")
    'loss\\x1b[2J'
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", name)


def digit_count(n: int) -> int:
    """Digits of ``n`` in base 10 (1 for 0); the epoch counter is padded to the total's width."""
    return len(str(abs(n)))


_DIM, _BOLD, _CYAN, _YELLOW, _RESET = "\x1b[2m", "\x1b[1m", "\x1b[36m", "\x1b[33m", "\x1b[0m"


def epoch_line(
    epoch: int,
    total: int,
    duration: float,
    metrics: dict[str, float],
    eta: float | None,
    resources: ResourceSample | None = None,
    *,
    color: bool = False,
) -> str:
    """The terminal line for one epoch (the Rust flodl's layout, so logs compare) plus CPU, RSS::

          epoch   1/100  loss=1.5264  [49ms  ETA 4.8s]  CPU: 12%  RSS: 812 MB

    With a GPU the VRAM part reads ``VRAM: 2.1 GB / 8.0 GB (82%)`` (this process's reservation
    over the device total, mean utilisation), plus ``spill: …`` when unified memory spills over.

    >>> epoch_line(0, 100, 0.049, {"loss": 1.52641}, 4.8)
    '  epoch   1/100  loss=1.5264  [49ms  ETA 4.8s]'
    """

    def paint(code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    counter = f"{epoch + 1:>{digit_count(total)}}/{total}"
    parts = [f"  epoch {paint(_BOLD, counter)}"]
    for name, value in metrics.items():
        parts.append(f"  {paint(_DIM, printable(name) + '=')}{format_metric(value)}")
    timing = format_eta(duration)
    if eta is not None and epoch + 1 < total:
        timing += f"  ETA {format_eta(eta)}"
    parts.append("  " + paint(_CYAN, f"[{timing}]"))
    if resources is not None:
        parts.append(_resource_text(resources, paint))
    return "".join(parts)


def _resource_text(res: ResourceSample, paint: Callable[[str, str], str]) -> str:
    text = ""
    gpu = res.gpus[0] if res.gpus else None
    if gpu is not None and gpu.vram_alloc is not None:
        text += f"  VRAM: {format_bytes(gpu.vram_alloc)}"
        if gpu.vram_total:
            text += f" / {format_bytes(gpu.vram_total)}"
            if gpu.vram_alloc > gpu.vram_total:
                text += paint(_YELLOW, f"  spill: {format_bytes(gpu.vram_alloc - gpu.vram_total)}")
    if (util := res.gpu_util_percent) is not None:
        text += f" ({util:.0f}%)" if text else f"  GPU: {util:.0f}%"
    extra = []
    if res.cpu_percent is not None:
        extra.append(f"CPU: {res.cpu_percent:.0f}%")
    if res.rss is not None:
        extra.append(f"RSS: {format_bytes(res.rss)}")
    if extra:
        text += "  " + paint(_DIM, "  ".join(extra))
    return text


def finish_line(
    total_secs: float,
    metrics: dict[str, float],
    *,
    status: str = "complete",
    where: str = "",
    reason: str = "",
) -> str:
    """``  training complete in 2.8s  | loss: 0.0012``; a run that ended otherwise (``status``
    ``"failed"`` or ``"interrupted"``) says where and why.

    >>> finish_line(2.8, {"loss": 0.0012}, status="failed", where="at epoch 3/10",
    ...             reason="ValueError: bad batch")
    '  training failed at epoch 3/10 after 2.8s (ValueError: bad batch)  | loss: 0.0012'
    """
    if status == "complete":
        text = f"  training complete in {format_eta(total_secs)}"
    else:
        text = f"  training {status} {where} after {format_eta(total_secs)}"
        if reason:
            text += f" ({printable(reason)})"
    for name, value in metrics.items():
        text += f"  | {printable(name)}: {format_metric(value)}"
    return text
