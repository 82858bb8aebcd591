"""Graph building blocks PyTorch does not have: ``StateAdd``, routers, selectors, halting
conditions, ``Reshape``, ``Select`` (one element of a tuple output), ``Param`` (a learned
tensor), ``GaussianBlur`` and ``Fn`` (a callable as a module), plus
``flodl.nn.functional`` (``focal_loss``, ...) and ``flodl.nn.init``.

Everything PyTorch already has stays PyTorch (``torch.nn.Linear`` is still ``nn.Linear``).
Guide: docs/graph-builder.md.
"""

from flodl.nn import functional, init
from flodl.nn.blur import GaussianBlur
from flodl.nn.fn import Fn
from flodl.nn.halting import LearnedHalt, ThresholdHalt
from flodl.nn.param import Param
from flodl.nn.routing import ArgmaxSelector, FixedSelector, SigmoidRouter, SoftmaxRouter
from flodl.nn.select import Select
from flodl.nn.shape import Reshape
from flodl.nn.state import StateAdd

__all__: list[str] = [
    "ArgmaxSelector",
    "FixedSelector",
    "Fn",
    "GaussianBlur",
    "LearnedHalt",
    "Param",
    "Reshape",
    "Select",
    "SigmoidRouter",
    "SoftmaxRouter",
    "StateAdd",
    "ThresholdHalt",
    "functional",
    "init",
]
