"""Whether ``torch.fx`` is tracing right now: ``torch.fx.symbolic_trace``, and ``torch.export``,
which traces a module's Python with fx.

A graph's pass under fx computes proxies, not tensors, so what it would keep on its modules
(tagged values, state across calls, loop traces) must not outlive the pass. torch keeps the
flag as a module global up to 2.13 and per thread from 2.14; its public readers either leave
out ``torch.export`` (``is_fx_symbolic_tracing``) or log a warning (``is_fx_tracing``).
"""

from __future__ import annotations

from collections.abc import Callable

from torch.fx import _symbolic_trace as _fx

fx_tracing: Callable[[], bool] = getattr(_fx, "_get_is_fx_tracing", None) or (
    lambda: bool(_fx._is_fx_tracing_flag)
)
