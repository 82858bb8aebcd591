"""Wrong location (fixed): a misplaced `from __future__` is reported at line 5, not in runpy."""

import flodl as fl

from __future__ import annotations

print(fl.__version__)
