"""The installed torch's release, ``(major, minor)``: where flodl follows a change torch made in
one release (``TORCH_RELEASE >= (2, 7)``)."""

from __future__ import annotations

import torch

TORCH_RELEASE: tuple[int, int] = tuple(int(p) for p in torch.__version__.split(".")[:2])  # type: ignore[assignment]
