"""Graph building blocks PyTorch does not have, and ``flodl.nn.functional`` / ``flodl.nn.init``.

Everything PyTorch already has (layers, losses) stays PyTorch: ``nn.Linear`` is ``nn.Linear``.
"""

from flodl.nn import functional, init
from flodl.nn.blur import GaussianBlur

__all__ = ["GaussianBlur", "functional", "init"]
