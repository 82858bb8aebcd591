"""Graph building blocks PyTorch does not have: ``StateAdd``, routers, selectors, halting
conditions, ``Reshape`` and ``Fn`` (a callable as a module).

Everything PyTorch already has stays PyTorch (``torch.nn.Linear`` is still ``nn.Linear``).
Contract: DESIGN.md §3.1.
"""

from flodl.nn.fn import Fn
from flodl.nn.halting import LearnedHalt, ThresholdHalt
from flodl.nn.routing import ArgmaxSelector, FixedSelector, SigmoidRouter, SoftmaxRouter
from flodl.nn.shape import Reshape
from flodl.nn.state import StateAdd

__all__: list[str] = [
    "ArgmaxSelector",
    "FixedSelector",
    "Fn",
    "LearnedHalt",
    "Reshape",
    "SigmoidRouter",
    "SoftmaxRouter",
    "StateAdd",
    "ThresholdHalt",
]
