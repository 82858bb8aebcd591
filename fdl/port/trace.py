"""Record a model's forward with ``torch.fx``; what cannot be traced becomes an opaque leaf.

torch's own layers (``torch.nn``) and ``nn.Sequential`` containers made only of them are kept
whole (the port reuses them as they are). A module whose forward cannot be traced symbolically
(data-dependent control flow, calls fx cannot follow) is retried as a leaf, with every other
instance of its class, so the rest of the model is still translated; the module that failed and
the line that stopped the tracer are kept for the report.
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import inspect
import itertools
import operator
import re
import sys
import traceback
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import fx, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd import grad_mode
from torch.utils import checkpoint as checkpointing

from fdl.port.errors import ShapesDisagreeError
from fdl.port.settings import SettingReads, is_setting, lookups_wrapped

TORCH_DIR = str(Path(torch.__file__).parent)
_LEN = builtins.len  # (replaced while a forward is traced: see PortTracer._len_recorded)
# code that is not the model's own: what it reads of the model is not the forward's
_NOT_THE_MODELS = (TORCH_DIR, str(Path(__file__).resolve().parents[1]))
MAX_RETRIES = 32


@dataclass
class Opaque:
    """A part of the model kept as one opaque step: its path ('' is the whole model)."""

    path: str
    cls: str
    location: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"module": self.path or "<model>", "class": self.cls, "location": self.location,
                "reason": self.reason}  # fmt: skip


def is_torch_module(module: nn.Module) -> bool:
    """A layer from torch itself (``nn.Conv2d``, ``nn.LSTM``, ...)."""
    return type(module).__module__.startswith(("torch.nn", "torch.ao.nn"))


def _all_torch(module: nn.Module) -> bool:
    return all(is_torch_module(m) for m in module.modules())


# Tensor factories a forward may size from an input (``torch.zeros(x.shape[0], 12)``): fx
# cannot see through them (they are not overridable by tensors), so while a tracer runs they
# record a call whenever an argument is a traced value.
FACTORIES = (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "eye", "linspace",
    "logspace",
)  # fmt: skip
# A dtype's limits read off a traced tensor (``torch.finfo(key.dtype).min``, as attention masks
# are filled): fx cannot pass a traced dtype to ``torch.finfo``, so the call is recorded and the
# port reads the limit from the tensor's dtype at each call, as the original does.
DTYPE_INFO = ("finfo", "iinfo")
# Library functions fx cannot follow on traced values (einops parses its pattern and asks the
# tensor's type), by library: while a tracer runs, each call on a traced value is recorded as
# one call, which the port writes as it is (``rearrange(t, "b n (h d) -> b h n d", h=4)``).
LIBRARY_CALLS: dict[str, tuple[str, ...]] = {"einops": ("rearrange", "reduce", "repeat", "einsum")}
# Libraries whose layers are kept whole like torch's own (``einops.layers.torch.Rearrange``)
LAYER_LIBRARIES = ("einops.",)


def library_calls() -> list[tuple[Any, str]]:
    """(library, function name) for each :data:`LIBRARY_CALLS` function of the libraries the
    script has imported (a library it does not use is not imported here)."""
    found = []
    for library, names in LIBRARY_CALLS.items():
        module = sys.modules.get(library)
        if module is not None:
            found += [(module, name) for name in names if callable(getattr(module, name, None))]
    return found


def stored(value: Any, owner: str, name: str, *constant: Any) -> Any:
    """``self.last_attn = attn`` in a forward, as a traced value: ``value``, which the port
    writes into the attribute ``name`` of the module at ``owner`` (``Store``) each time the
    graph runs; with a ``constant`` (``self.last_loss = None``), that constant instead, and
    ``value`` is the forward's input, which places the step. Here, where only the traced graph
    runs (on fake tensors), nothing is written."""
    return value


def assign(target: torch.Tensor, key: Any, value: Any) -> torch.Tensor:
    """``target[key] = value``, returning ``target``: an item assignment as a value later
    readers of ``target`` can read (fx records ``operator.setitem``, which returns None)."""
    target[key] = value
    return target


# A branch the forward takes on shapes alone (sdpa's ``query.shape[2] > 1``) is decided as for
# the example the port traced; this check runs in the traced graph and, the same source, in the
# module the port writes (standalone: it imports nothing of fdl's).
GUARD_HELPER = '''
def shape_checked(x, value, expected, test="a test on the input's shape"):
    """``x``, once the shape ``test`` the original branched on (here ``value``) is ``expected``,
    as it was for the example the port traced: this port follows the branch taken then, so an
    input taking the other is an error, never a wrong result."""
    if bool(value) != expected:
        if ".dtype" in test:  # the model or its inputs converted (.half()), not autocast
            again = "the model and its inputs in this dtype"
        else:
            again = "example inputs of each shape it meets (--example-input, repeated)"
        raise ValueError(
            f"this port follows the branch its original took where {test} was {expected}, "
            f"and for this input it is {not expected}: port again with {again}"
        )
    return x
'''
_guard: dict[str, Any] = {"__name__": __name__}  # (fx names functions by module)
exec(GUARD_HELPER, _guard)  # our own source, above
shape_checked = _guard["shape_checked"]


# the splits of a tensor into pieces whose number the size of the dimension split decides, and
# the position of their ``dim`` argument (see PortTracer._pieces)
_SPLITS = {"chunk": 2, "split": 2, "unbind": 1}
# what reads only a tensor's shape, the way to that tensor (see PortTracer.to_bool)
_SHAPE_READS = {"size", "dim", "ndimension", "numel", "__len__"}
_SHAPE_ATTRIBUTES = {"shape", "ndim"}


def _shaped_tensor(node: fx.Node, is_tensor: Callable[[fx.Node], bool]) -> fx.Node | None:
    """The tensor whose shape ``node`` (a test computed from shapes) reads first, or the read
    of another attribute of a tensor it finds first (``x.is_cuda``, ``x.dtype``). An
    item (``operator.getitem``) is arithmetic on a shape (``x.shape[1]``) unless ``is_tensor``
    says it is a tensor itself (a piece of ``x.unbind(-1)``, ``x[0]``)."""
    seen: set[fx.Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "call_function" and n.target is operator.getitem and is_tensor(n):
            return n
        if n.op == "call_function" and n.target is getattr and n.args[1] not in _SHAPE_ATTRIBUTES:
            return n  # a device, a dtype, a flag: not a shape (see to_bool)
        arithmetic = n.op == "call_function" and (
            n.target in (getattr, len)
            or getattr(n.target, "__module__", "") in ("_operator", "operator", "math", "builtins")
        )
        if arithmetic or (n.op == "call_method" and n.target in _SHAPE_READS):
            stack.extend(reversed(n.all_input_nodes))
        elif n.op in ("placeholder", "call_function", "call_method", "call_module", "get_attr"):
            return n
    return None


def _patches_reverted() -> contextlib.AbstractContextManager[None]:
    """fx's own patches (``nn.Module.__call__`` records a call while tracing) lifted for a while."""
    revert = getattr(fx._symbolic_trace, "_maybe_revert_all_patches", None)
    return revert() if revert is not None else contextlib.nullcontext()


class _FakeRun(fx.Interpreter):
    """Runs a traced graph on fake tensors, the model's own parameters and buffers included:
    an operation on real tensors alone (``steps.add_(1)``, a batch norm's batch count) would
    otherwise run for real under ``FakeTensorMode`` and write into the model."""

    def __init__(self, root: nn.Module, graph: fx.Graph, mode: FakeTensorMode) -> None:
        super().__init__(root, graph=graph)
        self.mode = mode

    def fake(self, value: Any) -> Any:
        return self.mode.from_tensor(value) if isinstance(value, torch.Tensor) else value

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self.fake(super().get_attr(target, args, kwargs))

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        module = self.fetch_attr(target)
        tensors = itertools.chain(module.named_parameters(), module.named_buffers())
        state = {name: self.fake(t) for name, t in tensors}
        return torch.func.functional_call(module, state, tuple(args), dict(kwargs))


class _Fakes:
    """One example's run of a graph being traced, on fake tensors, node by node as the graph
    grows: a query runs the nodes added since the last one. Once a node cannot run, every
    later query is unknown (as a run from the start would fail there)."""

    def __init__(
        self,
        root: nn.Module,
        graph: fx.Graph,
        example: tuple[Any, ...],
        autocast: torch.dtype | None = None,
    ) -> None:
        self.autocast = autocast  # the run as under torch.autocast("cpu", dtype=autocast)
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.run = _FakeRun(root, graph, self.mode)
        self.graph = graph
        self.example = example
        self.placeholders = 0  # how many the run has bound
        self.last: fx.Node | None = None  # the last node run
        self.failed = False

    def value(self, node: fx.Node) -> Any:
        env = self.run.env
        if node not in env:
            if self.failed:
                return None
            autocast = (
                torch.autocast("cpu", dtype=self.autocast)
                if self.autocast is not None
                else contextlib.nullcontext()
            )
            try:
                with self.mode, autocast:
                    self._run_to(node)
            except Exception:
                self.failed = True
                return None
        return env.get(node)

    def _run_to(self, node: fx.Node) -> None:
        env = self.run.env
        current = self.last.next if self.last is not None else next(iter(self.graph.nodes))
        while True:
            if current.op == "placeholder":
                # the forward's parameters: the example's, then the ones fixed while tracing
                # (each placeholder holds its fixed value: fx may rename it, ``targets`` to
                # ``targets_1``)
                i = self.placeholders
                if i >= len(self.example) and not current.args:
                    raise LookupError(f"no value for {current.target}")
                given = self.example[i] if i < len(self.example) else current.args[0]
                env[current] = self.run.fake(given)
                self.placeholders += 1
            else:
                env[current] = self.run.run_node(current)
            self.last = current
            if current is node:
                return
            current = current.next
            if current.op == "root":
                raise LookupError("the node is not in the graph")


class _Proxy(fx.Proxy):
    """fx's traced value, which also records an item assignment (``h[:, 0] = 0``)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})

    def __len__(self) -> int:
        """``len(x.shape)``: a shape's length (the example's rank) is known; a tensor's is its
        batch size, which the port does not fix."""
        tracer = self.tracer
        n = tracer.shape_length(self) if isinstance(tracer, PortTracer) else None
        if n is None and isinstance(tracer, PortTracer):
            n = tracer.sequence_length(self)  # a list passed in: its length, checked
        if n is None:
            return super().__len__()
        return n

    def __getattr__(self, name: str) -> Any:
        return _Attribute(self, name)


class _Attribute(fx.proxy.Attribute, _Proxy):
    """fx's traced attribute (``x.shape``), with :class:`_Proxy`'s additions."""


class PortTracer(fx.Tracer):
    """fx's tracer, keeping torch layers, all-torch Sequentials and opaque modules whole, and
    recording item assignments and tensor factories sized by traced values."""

    def __init__(
        self,
        opaque: set[str],
        example: tuple[Any, ...] | None = None,
        reads: SettingReads | None = None,
        others: Sequence[tuple[Any, ...]] = (),
        regions: bool = True,
    ) -> None:
        # a library function the forward's module imported by name (``from einops import
        # rearrange``) is recorded by fx itself; one reached through its library
        # (``einops.rearrange``), by _calls_recorded
        calls = tuple(getattr(library, name) for library, name in library_calls())
        super().__init__(autowrap_functions=calls)
        self.opaque = opaque
        self.example = example  # the forward's positional arguments of one example, if known
        self.others = others  # the other examples' (as many arguments, other shapes)
        self.reads = reads  # where the settings the forward reads are recorded, if anywhere
        self._fixed: dict[str, Any] = {}
        self._buffer_names: dict[int, str] | None = None  # id -> qualified name, once per trace
        self._proxies: dict[str, Any] = {}  # fx's cache of the parameters and buffers read
        # id(example) -> (the example, its run on fake tensors so far): see example_value
        self._fakes: dict[int, tuple[tuple[Any, ...], _Fakes]] = {}
        self._autocast_fakes: dict[Any, _Fakes] = {}  # the example's runs under autocast
        # path of a module whose forward assigned attributes of the tree -> their names
        self.writers: dict[str, list[str]] = {}
        # path of a module whose forward enters a mode fx does not record -> the first one
        self.modes: dict[str, str] = {}
        self.checkpointing: list[str] = []  # paths of the modules calling torch's checkpoint
        # ``with torch.no_grad():`` in a traced forward: its operations are marked (NO_GRAD)
        # to run in that mode in the port; without ``regions``, the module is kept whole
        self.regions = regions
        self._open_regions: list[int] = []  # ids of the no_grad objects entered, innermost last
        self.no_grad_paths: list[str] = []  # the modules whose forward entered one
        self._attributes_on = False  # plain tensor attributes read as traced values (see below)
        self._attribute_proxies: dict[str, Any] = {}
        # (id(module), name) of the plain attributes read (or looked for) while tracing, and
        # of those recorded as stores (see _stores)
        self._plain_reads: set[tuple[int, str]] = set()
        self._stored: set[tuple[int, str]] = set()

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.opaque:
            return True
        if isinstance(m, nn.Sequential):
            return _all_torch(m)
        return is_torch_module(m) or type(m).__module__.startswith(LAYER_LIBRARIES)

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _Proxy(node, self)

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        if self._open_regions and node.op in ("call_function", "call_method", "call_module"):
            node.meta[NO_GRAD] = True
        return node

    def iter(self, obj: fx.Proxy) -> Iterator[Any]:
        """``(*x.shape[:-1], -1, d)``: a shape (or a slice of one) iterates as its items, one
        traced value each, as many as the example's shape has. A tensor still cannot iterate."""
        n = self.shape_length(obj)
        if n is None:
            pieces = self._pieces(obj)
            if pieces is None:
                pieces = self._items(obj)
            return super().iter(obj) if pieces is None else iter(pieces)
        # ``x.shape[a:b]``'s items are ``x.shape[a + i]``: read from the shape itself
        base: Any = obj
        start = 0
        node = obj.node
        if node.op == "call_function" and node.target is operator.getitem:
            whole, key = node.args
            if (
                isinstance(whole, fx.Node)
                and isinstance(key, slice)
                and key.step is None
                and (key.start is None or (type(key.start) is int and key.start >= 0))
            ):
                base, start = self.proxy(whole), key.start or 0
        return iter([base[start + i] for i in range(n)])

    def _pieces(self, obj: fx.Proxy) -> list[Any] | None:
        """``for t in x.chunk(3, -1)``, ``map(f, x.unbind(1))``: the pieces of a tensor split
        (``chunk``, ``split``, ``unbind``) iterate as one traced value each, as many as the
        example has. How many depends on the size of the dimension split, so the port is
        written for that size and checks it (:meth:`to_bool`): an input of another size is an
        error, never a loop over the wrong number of pieces. None: not such a split."""
        node = obj.node
        name = str(getattr(node.target, "__name__", node.target))
        if node.op not in ("call_method", "call_function"):
            return None
        if node.op == "call_function" and getattr(torch, name, None) is not node.target:
            return None  # (torch.chunk(x, 3) and torch.unbind(x, 1) are splits too)
        at = _SPLITS.get(name)
        if at is None or not node.args or not isinstance(node.args[0], fx.Node):
            return None
        tensor = node.args[0]
        dim = node.args[at] if len(node.args) > at else node.kwargs.get("dim", 0)
        value, whole = self.example_value(obj), self.example_value(self.proxy(tensor))
        if type(dim) is not int or type(value) not in (tuple, list):
            return None
        if not isinstance(whole, torch.Tensor):
            return None
        traced: Any = self.proxy(tensor)
        if not self.to_bool(traced.shape[dim] == whole.shape[dim]):  # (recorded as a check)
            return None
        pieces: Any = obj
        return [pieces[i] for i in range(len(value))]

    def sequence_length(self, obj: fx.Proxy) -> int | None:
        """``len(xs)`` of an input passed as a list or tuple (``forward(self, xs)``): the
        example's length, which the port is written for and checks (:meth:`to_bool`), so a
        list of another length is an error, never items ignored or missing. None: not such an
        input."""
        if obj.node.op != "placeholder":
            return None
        value = self.example_value(obj)
        if type(value) not in (list, tuple):
            return None
        length: Any = self.create_proxy("call_function", _LEN, (obj,), {})
        if not self.to_bool(length == len(value)):  # (recorded as a check)
            return None
        return len(value)

    def _items(self, obj: fx.Proxy) -> list[Any] | None:
        """``for x in xs`` over an input passed as a list or tuple: one traced value per item,
        as many as the example has (checked, see :meth:`sequence_length`)."""
        n = self.sequence_length(obj)
        if n is None:
            return None
        items: Any = obj
        return [items[i] for i in range(n)]

    def to_bool(self, obj: fx.Proxy) -> bool:
        """``if query.shape[2] > 1:``: a test on shapes alone is decided as it is for the
        example, and the graph checks that decision when it runs (:func:`shape_checked`). A
        test on a tensor's values is still control flow the tracer cannot follow."""
        value = self.example_value(obj)

        def is_tensor(node: fx.Node) -> bool:
            return isinstance(self.example_value(self.proxy(node)), torch.Tensor)

        tensor = _shaped_tensor(obj.node, is_tensor) if type(value) is bool else None
        if tensor is not None and tensor.target is getattr:  # a tensor's x.is_cuda, x.dtype
            read = [str(tensor.args[1])]
            while isinstance(tensor.args[0], fx.Node) and tensor.args[0].target is getattr:
                tensor = tensor.args[0]  # x.device.type: the whole attribute path
                read.insert(0, str(tensor.args[1]))
            base = tensor.args[0]
            if not (
                read[0] in _MODEL_DTYPE
                and isinstance(base, fx.Node)
                and is_tensor(base)
                and (base.op == "get_attr" or self._same_under_autocast(obj, value))
            ):
                raise fx.proxy.TraceError(
                    f"a branch on a tensor's {'.'.join(read)} (not its shape): decided for the "
                    f"example, a port would refuse {_differing(read[0])}"
                )
            # a dtype autocast does not change: a weight's (T5's layer norm, ``self.weight.dtype
            # in [torch.float16, ...]``), or an activation's that is the same under autocast
            # (T5's residual stream, float32 there too); decided and checked, as a shape
            tensor = base

        def is_sequence_input(node: fx.Node) -> bool:  # ``len(xs)`` of a list passed in
            return node.op == "placeholder" and type(self.example_value(self.proxy(node))) in (
                list,
                tuple,
            )

        if tensor is None or not (is_tensor(tensor) or is_sequence_input(tensor)):
            return super().to_bool(obj)  # (a check on no tensor would not run: no branch)
        for other in self.others:  # one port follows one branch: the examples must agree
            decided = self.example_value(obj, other)
            if type(decided) is bool and decided != value:
                raise ShapesDisagreeError(
                    "the example inputs take different branches on a test of their shapes "
                    f"({value} for the first, {decided} for one of another shape)"
                )
        self.create_proxy("call_function", shape_checked, (self.proxy(tensor), obj, value), {})
        return bool(value)

    def _same_under_autocast(self, obj: fx.Proxy, value: bool) -> bool:
        """Whether the test ``obj`` on a tensor's dtype decides as it does for the example
        (``value``) when the forward runs under autocast, to bfloat16 and to float16: then a
        port deciding it refuses only a model (or inputs) converted to another dtype."""
        if self.example is None:
            return False
        for dtype in (torch.bfloat16, torch.float16):
            key = ("autocast", dtype)
            kept = self._autocast_fakes.get(key)
            if kept is None:
                kept = self._autocast_fakes[key] = _Fakes(
                    self.root, self.graph, self.example, autocast=dtype
                )
            decided = self._fake_value(kept, obj.node)
            if type(decided) is not bool or decided != value:
                return False
        return True

    def shape_length(self, obj: fx.Proxy) -> int | None:
        """The length of the shape ``obj`` traces on the example (None: not a shape, or no
        example)."""
        value = self.example_value(obj)
        return len(value) if isinstance(value, torch.Size) else None

    def example_value(self, obj: fx.Proxy, example: tuple[Any, ...] | None = None) -> Any:
        """The value ``obj`` traces on the example (or on ``example``; None: unknown): the graph
        traced so far is run up to ``obj`` on fake tensors (nothing of the model's is
        written). Each example's run goes on from where its last query left it (the graph only
        grows while tracing), so a trace asking n times costs one run, not n."""
        example = self.example if example is None else example
        if example is None or self.root is None:
            return None
        node = obj.node  # first: an attribute (``x.shape``) records its node when asked
        kept = self._fakes.get(id(example))
        if kept is None:
            kept = self._fakes[id(example)] = (example, _Fakes(self.root, self.graph, example))
        return self._fake_value(kept[1], node)

    def _fake_value(self, fakes: _Fakes, node: fx.Node) -> Any:
        """``node``'s value in the run ``fakes``, which neither records into the trace nor
        counts as the forward's reads (settings, the model's own tensors)."""
        paused = self.reads.paused() if self.reads is not None else contextlib.nullcontext()
        attributes, self._attributes_on = self._attributes_on, False  # the model's own tensors
        try:
            with paused, _patches_reverted():  # the run must not record into the trace
                return fakes.value(node)
        finally:
            self._attributes_on = attributes

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        """A buffer read by the forward is a traced value, as a parameter is: what the forward
        computes from it (``self.index.view(-1)``) is recorded, not frozen into a constant."""
        if isinstance(attr_val, torch.Tensor) and not isinstance(attr_val, nn.Parameter):
            if self._buffer_names is None:
                self._buffer_names = {id(b): name for name, b in self.root.named_buffers()}
            name = self._buffer_names.get(id(attr_val))
            self._proxies = parameter_proxy_cache  # the buffers read so far, for their writes
            if name is not None:
                if name not in parameter_proxy_cache:
                    parameter_proxy_cache[name] = self.create_proxy("get_attr", name, (), {})
                return parameter_proxy_cache[name]
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def trace(self, root: Any, concrete_args: dict[str, Any] | None = None) -> fx.Graph:
        # torch._dynamo records torch.finfo, torch.zeros... in tables when it is first imported,
        # which a trace does (fake tensors): imported while they are replaced (below), it would
        # keep the stand-ins, and torch.compile would fail in this process from then on
        import torch._dynamo.utils

        buffers = [(m, n, b) for m in root.modules() for n, b in m._buffers.items()]
        self._fixed = dict(concrete_args or {})
        reading = self.reads.recording() if self.reads is not None else contextlib.nullcontext()
        try:
            with (
                reading,
                self._calls_recorded(
                    [(torch, name) for name in (*FACTORIES, *DTYPE_INFO)] + library_calls()
                ),
                self._buffer_writes_recorded(root),
                self._modes_recorded(root),
                self._len_recorded(),
                self._checkpoints_recorded(root),
                self._functions_recorded(),
                self._calls_recorded(_scripted(root)),
                self._tensor_attributes_traced(root),  # (after reading: it wraps that lookup)
            ):
                return super().trace(root, concrete_args)
        finally:  # whatever happened, the model keeps its own buffers
            for module, name, buffer in buffers:
                if module._buffers.get(name) is not buffer:
                    module._buffers[name] = buffer

    @contextlib.contextmanager
    def _buffer_writes_recorded(self, root: nn.Module) -> Iterator[None]:
        """``self.steps = self.steps + 1`` (``+=`` on a buffer) records a write of the new value
        into the buffer, ``steps[...] = value``, instead of handing the model a traced value.

        Any other attribute the model's own code assigns on a module of the tree (a call
        counter, ``self.last_attn = attn``) is state a port would not keep: the module whose
        forward assigns it is noted in :attr:`writers` (to be kept whole), and every attribute
        assigned gets its value back when the block ends (the model never keeps a traced or a
        fake value, nor a count of the tracer's runs)."""
        paths = {id(m): path for path, m in root.named_modules()}
        original = nn.Module.__setattr__
        before: dict[tuple[int, str], tuple[nn.Module, Any]] = {}

        def setattr_(module: nn.Module, name: str, value: Any) -> None:
            buffers = module.__dict__.get("_buffers")
            if isinstance(value, fx.Proxy) and buffers is not None and name in buffers:
                path = paths.get(id(module))
                qualified = f"{path}.{name}" if path else name
                if path is not None and buffers[name] is not None:
                    target = self._proxies.get(qualified)
                    if target is None:
                        target = self._proxies[qualified] = self.create_proxy(
                            "get_attr", qualified, (), {}
                        )
                    self.create_proxy("call_function", assign, (target, Ellipsis, value), {})
                    return
            if self.reads is not None:  # (a counter the forward keeps is state, not a setting)
                self.reads.wrote(module, name)
            if id(module) in paths and _plain_attribute(module, name):
                before.setdefault((id(module), name), (module, module.__dict__.get(name, _UNSET)))
                writer = _receiver(sys._getframe(1))  # whose code assigns it
                path = paths.get(id(writer)) if isinstance(writer, nn.Module) else None
                if path is not None and not self._within_opaque(path):
                    if self._stores(module, paths[id(module)], name, value):
                        original(module, name, value)  # read back as the traced value
                        return
                    names = self.writers.setdefault(path, [])
                    if name not in names:
                        names.append(name)
            original(module, name, value)

        nn.Module.__setattr__ = setattr_  # type: ignore[method-assign, assignment]
        try:
            yield
        finally:
            nn.Module.__setattr__ = original  # type: ignore[method-assign]
            for (_, name), (module, value) in before.items():  # the model's own values back
                if value is _UNSET:
                    module.__dict__.pop(name, None)
                else:
                    module.__dict__[name] = value

    @contextlib.contextmanager
    def _len_recorded(self) -> Iterator[None]:
        """``len(x)`` of a traced tensor (``b = len(x)``, its first dimension's size) records a
        call of ``len``, which the port writes as it is, so it runs on other batch sizes (fx
        refuses a tensor's ``len``; a shape's, a split's and a list input's are known, see
        :meth:`_Proxy.__len__`). A ``range(len(x))`` still stops the trace: a loop over the
        batch is not something a port fixes. ``len`` is replaced in ``builtins`` for the
        trace: the forward's own modules and the helpers they call see it alike."""
        original = _LEN

        def len_(obj: Any, /) -> Any:
            if (
                isinstance(obj, fx.Proxy)
                and obj.tracer is self
                and isinstance(self.example_value(obj), torch.Tensor)
            ):
                return self.create_proxy("call_function", original, (obj,), {})
            return original(obj)

        builtins.len = len_
        try:
            yield
        finally:
            builtins.len = original

    @contextlib.contextmanager
    def _modes_recorded(self, root: nn.Module) -> Iterator[None]:
        """``with torch.no_grad():`` (or ``enable_grad``, ``set_grad_enabled``,
        ``inference_mode``, ``autocast``) in a forward: fx records the operations, not the mode
        they run in, so a port would build the gradients the original does not (or compute in
        another precision under autocast). The operations recorded inside a ``no_grad`` block
        are marked (:data:`NO_GRAD`, see :meth:`create_node`), for the port to run them in
        that mode; a module whose code enters any other mode (or no_grad, without
        :attr:`regions`) is noted in :attr:`modes`, to be kept whole."""
        paths = {id(m): path for path, m in root.named_modules()}
        originals = [  # (a torch without one of them: that one is not watched)
            (cls, name, mode, vars(cls)[name]) for cls, name, mode in _MODES if name in vars(cls)
        ]

        def recording(original: Any, mode: str) -> Any:
            def entered(*args: Any, **kwargs: Any) -> Any:
                owner = _entering(sys._getframe(1))
                path = paths.get(id(owner)) if isinstance(owner, nn.Module) else None
                if path is not None and not self._within_opaque(path):
                    if mode == NO_GRAD_MODE and self.regions:
                        self._open_regions.append(id(args[0]))
                        if path not in self.no_grad_paths:
                            self.no_grad_paths.append(path)
                    else:
                        self.modes.setdefault(path, mode)
                return original(*args, **kwargs)

            return entered

        exit_ = vars(grad_mode.no_grad)["__exit__"]

        def exited(manager: Any, *args: Any) -> Any:
            if self._open_regions and self._open_regions[-1] == id(manager):
                self._open_regions.pop()
            return exit_(manager, *args)

        try:
            for cls, name, mode, original in originals:
                setattr(cls, name, recording(original, mode))
            grad_mode.no_grad.__exit__ = exited  # type: ignore[method-assign]
            yield
        finally:
            for cls, name, _, original in originals:
                setattr(cls, name, original)
            grad_mode.no_grad.__exit__ = exit_  # type: ignore[method-assign]
            self._open_regions.clear()

    @contextlib.contextmanager
    def _checkpoints_recorded(self, root: nn.Module) -> Iterator[None]:
        """``torch.utils.checkpoint.checkpoint(block, x)`` in a forward (by any name: imported,
        a ``functools.partial`` as transformers keeps one): fx records the operations the
        block runs, not that their activations were to be recomputed. The calling module is
        noted in :attr:`checkpointing` (the port says what it does not keep). Seen where both
        of torch's ways of checkpointing start, which ``checkpoint`` looks up when called."""
        paths = {id(m): path for path, m in root.named_modules()}
        replaced: list[tuple[str, Any]] = []

        def note() -> None:
            owner = _entering(sys._getframe(2))
            path = paths.get(id(owner)) if isinstance(owner, nn.Module) else None
            if path is None or path in self.checkpointing or self._within_opaque(path):
                return
            self.checkpointing.append(path)

        generator = getattr(checkpointing, "_checkpoint_without_reentrant_generator", None)
        reentrant = getattr(checkpointing, "CheckpointFunction", None)

        def without_reentrant(*args: Any, **kwargs: Any) -> Any:
            note()
            return generator(*args, **kwargs)  # type: ignore[misc]

        class Reentrant:
            @staticmethod
            def apply(*args: Any) -> Any:
                note()
                return reentrant.apply(*args)  # type: ignore[union-attr]

        try:
            if generator is not None:
                replaced.append(("_checkpoint_without_reentrant_generator", generator))
                checkpointing._checkpoint_without_reentrant_generator = without_reentrant
            if reentrant is not None:
                replaced.append(("CheckpointFunction", reentrant))
                checkpointing.CheckpointFunction = Reentrant  # type: ignore[misc, assignment]
            yield
        finally:
            for name, original in replaced:
                setattr(checkpointing, name, original)

    @contextlib.contextmanager
    def _functions_recorded(self) -> Iterator[None]:
        """``GradReverse.apply(x, alpha)``: fx would trace into the autograd Function's
        ``forward`` and lose its ``backward``, so a call of a Function of the model's own code
        (or a library's; not torch's) on traced values is recorded as one call of its
        ``apply``, which the port imports and calls as the original does."""
        base = torch.autograd.function.Function
        original = vars(base)["apply"]
        tracer = self

        def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
            traced: list[bool] = []
            fx.node.map_aggregate((args, kwargs), lambda v: traced.append(isinstance(v, fx.Proxy)))
            if any(traced) and not cls.__module__.startswith("torch."):
                target = original.__get__(None, cls)  # torch's own apply, bound to the class
                return tracer.create_proxy("call_function", target, args, kwargs)
            return original.__func__(cls, *args, **kwargs)

        base.apply = classmethod(apply)  # type: ignore[method-assign, assignment]
        try:
            yield
        finally:
            base.apply = original  # type: ignore[method-assign]

    @contextlib.contextmanager
    def _tensor_attributes_traced(self, root: nn.Module) -> Iterator[None]:
        """``self.pe[:, : x.shape[1]]`` where ``pe`` is a plain tensor attribute (neither a
        parameter nor a buffer, as ``self.pe = torch.zeros(...)`` makes): fx would hand the
        forward the tensor itself, so a slice by a traced length fails and anything bigger than
        a small constant keeps the module whole. Read while the forward is traced, such a tensor
        is a traced value (``get_attr``), which the port reads from the module at each call."""
        paths = {id(m): path for path, m in root.named_modules()}
        tracer = self

        def traced(lookup: Any) -> Any:
            def __getattribute__(module: Any, name: str) -> Any:
                try:
                    value = lookup(module, name)
                except AttributeError:  # (``hasattr(self, "cache")`` reads it too)
                    if tracer._attributes_on:
                        tracer._plain_reads.add((id(module), name))
                    raise
                if not tracer._attributes_on:
                    return value
                if name in object.__getattribute__(module, "__dict__"):
                    tracer._plain_reads.add((id(module), name))
                if type(value) is not torch.Tensor:
                    return value
                if sys._getframe(1).f_code.co_filename.startswith(_NOT_THE_MODELS):
                    return value  # torch's and fdl's own reads (fx's constants among them)
                path = paths.get(id(module))
                if (
                    path is not None
                    and name in object.__getattribute__(module, "__dict__")
                    and not tracer._within_opaque(path)
                ):
                    return tracer._attribute_proxy(f"{path}.{name}" if path else name)
                return value

            return __getattribute__

        with lookups_wrapped({type(m) for m in root.modules()}, traced):
            self._attributes_on = True
            try:
                yield
            finally:
                self._attributes_on = False

    def _stores(self, module: nn.Module, path: str, name: str, value: Any) -> bool:
        """Whether ``module.name = value`` is recorded as a store the port writes out (a
        ``stored`` node): an output the forward leaves on its module (``self.last_attn =
        attn``, ``self.aux_loss = ...``, llama2.c's ``self.last_loss = None`` without targets),
        a traced tensor or a plain constant assigned once, to an attribute the
        forward has not read before (nor tested for: ``hasattr``). Anything else is state the
        next call depends on (a counter, a cache filled on the first call): the module is
        kept whole."""
        key = (id(module), name)
        if key in self._plain_reads or key in self._stored:  # (assigned again: kept whole)
            return False
        if not isinstance(value, fx.Proxy):  # a constant: written where the input is read
            anchor = next((n for n in self.graph.nodes if n.op == "placeholder"), None)
            # (an enum member would need its class imported by the port: kept whole instead)
            if anchor is None or not is_setting(value) or isinstance(value, enum.Enum):
                return False
            self.create_node("call_function", stored, (anchor, path, name, value), {})
        elif isinstance(self.example_value(value), torch.Tensor):
            self.create_proxy("call_function", stored, (value, path, name), {})
        else:
            return False
        self._stored.add(key)
        return True

    def _attribute_proxy(self, qualified: str) -> Any:
        """The traced value of the plain tensor attribute at ``qualified``, one per trace."""
        proxy = self._attribute_proxies.get(qualified)
        if proxy is None:
            proxy = self._attribute_proxies[qualified] = self.create_proxy(
                "get_attr", qualified, (), {}
            )
        return proxy

    def _within_opaque(self, path: str) -> bool:
        """``path`` is kept whole, or inside a module kept whole: the tracer never reads its
        forward (it runs only on fake tensors, to learn a shape)."""
        return any(path == p or path.startswith(f"{p}.") for p in self.opaque)

    @contextlib.contextmanager
    def _calls_recorded(self, calls: list[tuple[Any, str]]) -> Iterator[None]:
        """Each ``module.name`` of ``calls`` (torch's ``FACTORIES``, the libraries'
        ``LIBRARY_CALLS``) records a call when an argument (a size in a tuple included) is a
        traced value, and runs as usual otherwise."""
        originals = [(module, name, getattr(module, name)) for module, name in calls]

        def recording(fn: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                traced = []
                fx.node.map_aggregate(
                    (args, kwargs), lambda v: traced.append(isinstance(v, fx.Proxy))
                )
                if any(traced):
                    return self.create_proxy("call_function", fn, args, kwargs)
                return fn(*args, **kwargs)

            return call

        try:
            for module, name, fn in originals:
                setattr(module, name, recording(fn))
            yield
        finally:
            for module, name, fn in originals:
                setattr(module, name, fn)


_UNSET = object()
# the modes a forward may enter that fx does not record: (class, method entering, as written)
NO_GRAD_MODE = "torch.no_grad()"
_MODES = [
    (grad_mode.no_grad, "__enter__", NO_GRAD_MODE),
    (grad_mode.enable_grad, "__enter__", "torch.enable_grad()"),
    (grad_mode.set_grad_enabled, "__init__", "torch.set_grad_enabled()"),
    (grad_mode.inference_mode, "__enter__", "torch.inference_mode()"),
    (torch.amp.autocast_mode.autocast, "__enter__", "torch.autocast()"),
]


# a weight's attributes a branch may read, decided for the model as traced and checked: what
# changes them is converting the model (``.half()``), after which a port is refused
_MODEL_DTYPE = ("dtype", "is_floating_point", "is_complex")


def _differing(attribute: str) -> str:
    """The inputs a port deciding a branch on a tensor's ``attribute`` would refuse."""
    if attribute in ("device", "is_cuda", "is_mps", "is_cpu", "is_xpu", "is_meta"):
        return "inputs on another device (the model on a GPU)"
    if attribute in ("dtype", "is_floating_point", "is_complex"):
        return "inputs of another dtype (under autocast)"
    if attribute == "requires_grad":
        return "inputs that differ in it (under torch.no_grad(), or with frozen layers)"
    return "inputs that differ in it"


def _scripted(root: nn.Module) -> list[tuple[Any, str]]:
    """The TorchScript functions (``@torch.jit.script``) the forwards of the tree can call by a
    global name, as ``(globals, name)``: fx cannot pass traced values to one, so each records a
    call (see :meth:`PortTracer._calls_recorded`), which the port imports and calls."""
    found: dict[tuple[int, str], tuple[Any, str]] = {}
    for cls in {type(m) for m in root.modules()}:
        for klass in cls.__mro__:
            forward = vars(klass).get("forward")
            namespace = getattr(forward, "__globals__", None)
            if namespace is None or klass.__module__.startswith("torch."):
                continue
            for name, value in namespace.items():
                if isinstance(value, torch.jit.ScriptFunction):
                    found[id(namespace), name] = (_Globals(namespace), name)
    return list(found.values())


class _Globals:
    """A module's globals, read and set as attributes (what ``_calls_recorded`` patches)."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        object.__setattr__(self, "namespace", namespace)

    def __getattr__(self, name: str) -> Any:
        return self.namespace[name]

    def __setattr__(self, name: str, value: Any) -> None:
        self.namespace[name] = value


def _entering(frame: Any) -> Any:
    """The object whose method enters a mode, from the frame entering it: the innermost of the
    model's own code on the stack, or the module a ``@torch.no_grad()`` method is called on
    (torch's decorator holds the call's arguments)."""
    while frame is not None and frame.f_code.co_filename.startswith(TORCH_DIR):
        if frame.f_code.co_name == "decorate_context":
            args = frame.f_locals.get("args") or (None,)
            if isinstance(args[0], nn.Module):
                return args[0]
        frame = frame.f_back
    return _receiver(frame) if frame is not None else None


def _receiver(frame: Any) -> Any:
    """The first argument of the function running in ``frame`` (a method's ``self``, whatever
    it is called), or None."""
    code = frame.f_code
    return frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None


def _plain_attribute(module: nn.Module, name: str) -> bool:
    """``module.name`` is an attribute of the instance's own ``__dict__`` (or a new one): not a
    parameter, buffer or submodule, and not fx's own constants (``_tensor_constant0``)."""
    if name.startswith("_tensor_constant"):
        return False
    return not any(
        name in module.__dict__.get(d, ()) for d in ("_parameters", "_buffers", "_modules")
    )


def _failure(exc: BaseException, paths: dict[int, str]) -> tuple[str, str]:
    """(path of the module whose forward failed, 'file:line') from the traceback of ``exc``."""
    tb = exc.__traceback__
    found = ("", "")
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if (
            isinstance(owner, nn.Module)
            and id(owner) in paths
            and not frame.f_code.co_filename.startswith(TORCH_DIR)
        ):
            found = (
                paths[id(owner)],
                f"{_base(frame.f_code.co_filename)}:{tb.tb_lineno}",
            )
        tb = tb.tb_next
    if not found[1]:
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        found = ("", f"{_base(last[0].filename)}:{last[0].lineno}" if last else "?")
    return found


def _base(path: str) -> str:
    return Path(path).name


def reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, TypeError) and re.fullmatch(
        r"'_?(Proxy|Attribute)' object cannot be interpreted as an integer", first
    ):  # range(len(x)), range(x.shape[0])
        first = (
            "a size read off a tensor is used as a Python int (range(len(x)), a loop over "
            "the batch): a port runs on any size, so it cannot fix the count"
        )
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def concrete_args(model: nn.Module, n_args: int) -> dict[str, Any]:
    """The forward's parameters no example passes, fixed to their defaults while tracing."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return {}
    fixed = {}
    for param in params[n_args:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is not param.empty:
            fixed[param.name] = param.default
    return fixed


def trace(
    model: nn.Module,
    n_args: int,
    example: tuple[Any, ...] | None = None,
    whole_by_mode: Collection[str] | None = (),
    others: Sequence[tuple[Any, ...]] = (),
) -> tuple[fx.GraphModule | None, list[Opaque]]:
    """The traced model, or None when the whole forward stays opaque, and the opaque parts.
    ``example``: one example's positional arguments, which give the lengths of the shapes the
    forward unpacks (``*x.shape[:-1]``). What the forward runs in training only is marked to be
    written out (see :data:`TRAINING_ONLY`), except in the modules ``whole_by_mode`` names (or
    in every module, when it is None), which are kept whole. ``others``: the other examples'
    positional arguments (as many, of other shapes): a module branching on shapes that they
    decide differently from ``example`` is kept whole."""
    paths = {id(m): name for name, m in model.named_modules()}
    opaque_paths: set[str] = set()
    opaque: list[Opaque] = []
    fixed = concrete_args(model, n_args)
    before = set(vars(model))
    reads = SettingReads(model)
    regions = True  # no_grad regions written out (see PortTracer.regions)
    for _ in range(MAX_RETRIES):
        reads.found.clear()  # what an earlier try read, a module now kept whole among them
        reads.declared.clear()
        reads.written.clear()
        tracer = PortTracer(opaque_paths, example, reads, others, regions)
        versions = _versions(model)
        try:
            graph = tracer.trace(model, concrete_args=fixed or None)
        except Exception as exc:
            path, location = _failure(exc, paths)
            cls = type(model.get_submodule(path)).__name__ if path else type(model).__name__
            found = Opaque(path, cls, location, reason(exc))
            if not path or path in opaque_paths:
                return None, [found]
            opaque += _kept_whole(model, found, opaque_paths)
            continue
        if tracer.no_grad_paths and _versions(model) != versions:
            # the forward wrote into a parameter or buffer it did not read as a traced value
            # (an EMA update over self.teacher.parameters() under no_grad): fx recorded
            # nothing of it, so the modules entering no_grad are kept whole and run it
            regions = False
            continue
        kept_for = _kept_for(tracer)
        if kept_for is not None:  # what a graph does not keep: the module runs its own forward
            path, why = kept_for
            module = model.get_submodule(path) if path else model
            found = Opaque(path, type(module).__name__, _forward_location(module), why)
            if not path:
                return None, [found]
            opaque += _kept_whole(model, found, opaque_paths)
            continue
        # a module whose trace cannot be used as it is: kept whole, and the model traced again
        # (a big constant is kept whole where it is made, not in the whole model's place)
        moded, graph = _mode_dependent(
            model, graph, opaque_paths, fixed, example, whole_by_mode, reads, others, regions
        )
        big = _large_constant(model, graph) if moded is None else None
        kept, why = (moded, MODE_REASON) if moded is not None else (big, CONSTANT_REASON)
        if kept is not None:
            module = model.get_submodule(kept) if kept else model
            found = Opaque(kept, type(module).__name__, _forward_location(module), why)
            if not kept or kept in opaque_paths:
                return None, [found]
            opaque += _kept_whole(model, found, opaque_paths)
            continue
        _drop_fixed(graph, fixed, n_args)
        _assignments_as_values(graph)
        _thread_in_place(graph)
        gm = fx.GraphModule(tracer.root, graph, type(model).__name__)
        for name in set(vars(model)) - before:  # the traces' constants, now held by gm
            if re.fullmatch(r"_tensor_constant\d+", name):
                delattr(model, name)
        gm.graph.eliminate_dead_code(_has_effects)
        settings = {k: v for k, v in reads.found.items() if k not in reads.written}
        gm.meta[SETTINGS] = settings
        gm.meta[CHECKPOINTING] = tracer.checkpointing
        gm.meta[DECLARED] = reads.declared & set(settings)
        return gm, opaque
    where = _forward_location(model)
    why = f"more than {MAX_RETRIES} kinds of submodule could not be traced"
    return None, [Opaque("", type(model).__name__, where, why)]


def _versions(model: nn.Module) -> list[tuple[int, int]]:
    """Each parameter's and buffer's version counter and storage: what a write into it for
    real (``p.mul_(0.99)``, ``p.data = ...``) changes."""
    tensors = [*model.parameters(), *model.buffers()]
    return [(t._version, _storage(t)) for t in tensors if not t.is_inference()]


def _storage(t: torch.Tensor) -> int:
    try:
        return t.data_ptr()
    except RuntimeError:  # a layout with no single storage (sparse): its version says enough
        return -1


def _assignments_as_values(graph: fx.Graph) -> None:
    """``operator.setitem(t, key, v)`` (``t.__setitem__(key, v)`` when ``t`` is a buffer read as
    is) becomes ``assign(t, key, v)``, which returns ``t``."""
    for node in list(graph.nodes):
        if (node.op == "call_function" and node.target is operator.setitem) or (
            node.op == "call_method" and node.target == "__setitem__"  # on a tensor not traced
        ):
            with graph.inserting_before(node):
                value = graph.call_function(assign, node.args, dict(node.kwargs))
            node.replace_all_uses_with(value)
            graph.erase_node(node)


# ``t += v`` and the like: fx records the operator, which writes into a tensor ``t``.
AUGMENTED = frozenset({
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
    operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
})  # fmt: skip


def _in_place(node: fx.Node) -> bool:
    """``x.add_(y)``, ``torch.relu_(x)``, ``x[i] = v``: an operation that writes into its first
    argument."""
    if node.op == "call_function" and (node.target is assign or node.target in AUGMENTED):
        return True
    if node.op == "call_method":
        name = str(node.target)
    elif node.op == "call_function":
        name = getattr(node.target, "__name__", "")
    else:
        return False
    return name.endswith("_") and not name.startswith("_") and bool(node.args)


def _has_effects(node: fx.Node) -> bool:
    """Whether a value nobody reads must still be computed: a layer call (a dropout draws
    random numbers, a batch norm updates its running statistics in train mode), a random
    function, or what fx itself counts as impure."""
    from fdl.port.translate import RANDOM_NAMES

    if node.is_impure() or node.op == "call_module" or _in_place(node):
        return True  # a write may be into an input, a buffer or a value read later
    if node.target is shape_checked or node.target is stored:
        return True  # nobody reads it: it checks, or writes into the model
    name = str(node.target) if node.op == "call_method" else getattr(node.target, "__name__", "")
    return node.op in ("call_function", "call_method") and name in RANDOM_NAMES


def _thread_in_place(graph: fx.Graph) -> None:
    """Make the later readers of a value an in-place operation wrote into read that operation
    instead (it returns the same tensor): ``t.add_(y); return t`` keeps the write, where fx
    records it as a value nobody reads and dead-code elimination would drop it."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        target = node.args[0] if _in_place(node) else None
        if isinstance(target, fx.Node):
            for user in list(target.users):
                if user is not node and order[user] > order[node]:
                    user.replace_input_with(target, node)


def _kept_whole(model: nn.Module, found: Opaque, opaque_paths: set[str]) -> list[Opaque]:
    """``found`` and every other instance of its class, now kept whole: the class's forward
    is what could not be traced, so each copy would fail alike (a model of 50 identical blocks
    takes one retry, not 50)."""
    cls = type(model.get_submodule(found.path))
    same = [
        path
        for path, module in model.named_modules()
        if path and type(module) is cls and path not in opaque_paths
        and not any(path.startswith(f"{p}.") for p in opaque_paths)
    ]  # fmt: skip
    opaque_paths.update(same)
    return [found] + [replace(found, path=p) for p in same if p != found.path]


def _drop_fixed(graph: fx.Graph, fixed: dict[str, Any], n_args: int) -> None:
    """Remove the placeholders fx keeps for the fixed arguments (``ctx_1``, one per leaf of a
    structured value), with the guards it hangs on them: their value is baked into the trace,
    so declared as graph inputs they would be accepted and silently ignored. Not declared,
    passing one is an error."""
    pattern = re.compile("|".join(rf"{re.escape(name)}_\d+" for name in fixed))
    placeholders = [n for n in graph.nodes if n.op == "placeholder"][n_args:]
    for node in [n for n in placeholders if fixed and pattern.fullmatch(str(n.target))]:
        dependents: list[fx.Node] = []
        frontier = [node]
        while frontier:
            users = list(frontier.pop().users)
            dependents += users
            frontier += users
        if any(n.op == "output" for n in dependents):
            continue  # returned as it is: keep it (the translation refuses that case)
        for dependent in sorted(set(dependents), key=_position(graph), reverse=True):
            graph.erase_node(dependent)
        graph.erase_node(node)


def _position(graph: fx.Graph) -> Any:
    order = {n: i for i, n in enumerate(graph.nodes)}
    return order.__getitem__


def _kept_for(tracer: PortTracer) -> tuple[str, str] | None:
    """The first module whose forward does what a port's graph would not keep (assigns state,
    enters a mode), and why; None when there is none."""
    for path, names in tracer.writers.items():
        return path, _state(names, not path)
    for path, mode in tracer.modes.items():
        fix = "; move it out of the forward to port the rest" if not path else ""
        return path, (
            f"its forward enters {mode}, a mode a port's graph does not record (kept whole, the "
            f"{'model' if not path else 'module'} runs in it as the original does{fix})"
        )
    return None


def _state(names: list[str], root: bool) -> str:
    """Why a module whose forward assigns attributes is kept whole (the model itself: what to
    change to port its forward)."""
    assigned = ", ".join(f"self.{n}" for n in names)
    why = f"its forward assigns {assigned}: state a port's graph does not keep (kept whole, the "
    if root:
        return why + "model keeps it; return the value instead to port the forward)"
    return why + "module keeps it as the original does)"


MODE_REASON = (
    "its forward depends on self.training in a way the port cannot write out (traced in train "
    "and in eval mode, the two differ beyond operations run in one mode only and constants "
    "chosen by the mode)"
)
# torch's functional dropouts and their ``training`` default
DROPOUTS = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
            "alpha_dropout": False, "feature_alpha_dropout": False}  # fmt: skip
DROPOUT_PARAMS = ("input", "p", "training", "inplace")


def _dropout(node: fx.Node) -> dict[str, Any] | None:
    """A functional dropout's arguments by name, defaults filled in (None: another node)."""
    name = getattr(node.target, "__name__", "")
    if node.op != "call_function" or name not in DROPOUTS or len(node.args) > len(DROPOUT_PARAMS):
        return None
    bound: dict[str, Any] = {"p": 0.5, "training": DROPOUTS[name], "inplace": False}
    bound.update(zip(DROPOUT_PARAMS, node.args, strict=False))
    bound.update(node.kwargs)
    return bound if set(bound) <= set(DROPOUT_PARAMS) else None


def _off(dropout: dict[str, Any]) -> bool:
    """A dropout that passes its input through: not training, or ``p`` 0."""
    return dropout["training"] is False or (
        isinstance(dropout["p"], (int, float)) and dropout["p"] == 0
    )


def _forward_location(module: nn.Module) -> str:
    try:
        lines = inspect.getsourcelines(type(module).forward)
        return f"{_base(inspect.getsourcefile(type(module).forward) or '?')}:{lines[1]}"
    except (OSError, TypeError):
        return "?"


MAX_CONSTANT = 256  # values of a constant tensor the port writes out as a literal
CONSTANT_REASON = (
    f"its forward makes a tensor of more than {MAX_CONSTANT} constants, which the port does not "
    "write out"
)


def _large_constant(model: nn.Module, graph: fx.Graph) -> str | None:
    """The innermost module of ours making a constant tensor too big to write out as a literal
    ('' for the model itself; None: there is none)."""
    for node in graph.nodes:
        if is_constant(node) and getattr(model, str(node.target)).numel() > MAX_CONSTANT:
            return owner_of(model, node)
    return None


def owner_of(model: nn.Module, node: fx.Node) -> str:
    """The innermost module not from torch whose forward recorded ``node`` ('' for the model)."""
    stack = list((node.meta.get("nn_module_stack") or {}).keys())
    custom = [p for p in stack if p and not is_torch_module(model.get_submodule(p))]
    return custom[-1] if custom else ""


def is_constant(node: fx.Node) -> bool:
    """A tensor the forward makes from constants (``torch.tensor([0, 2])``): fx stores it on
    the traced module as ``_tensor_constant<N>`` and reads it back."""
    return (
        node.op == "get_attr" and re.fullmatch(r"_tensor_constant\d+", str(node.target)) is not None
    )


def _constant_value(node: fx.Node, root: nn.Module) -> tuple[Any, ...]:
    """A constant tensor as comparable data: each trace stores its own under another name."""
    value = getattr(root, str(node.target))
    return (value.dtype, tuple(value.shape), repr(value.detach().cpu().tolist()))


# node.meta: the arguments whose value depends on the mode, each with its value in eval mode
# (the node's own is training's): ``self.training`` itself, or ``0.5 if self.training else 1.0``
TRAINING_ARGS = "fdl_training_args"
# node.meta: an operation the forward runs in training only, and the value eval mode has in its
# place (None: no value, an effect only)
TRAINING_ONLY = "fdl_training_only"


# node.meta: an operation the forward runs in eval mode only (copied into the training trace),
# and the value training has in its place (None: read by no operation training runs)
EVAL_ONLY = "fdl_eval_only"
# node.meta key: the operation ran under ``torch.no_grad()`` (the port runs it in that mode)
NO_GRAD = "fdl_no_grad"
# GraphModule.meta: the settings the traced forwards read, in both modes ({path: value}; see
# :mod:`fdl.port.settings`)
SETTINGS = "fdl_settings"
# GraphModule.meta: those of the settings read from their class's declaration (``scale = 0.5``
# in the class body), not from the instance
DECLARED = "fdl_settings_declared"
# GraphModule.meta: the paths of the written-out modules whose forward calls torch's checkpoint
CHECKPOINTING = "fdl_checkpointing"


def checkpointing_note(gm: fx.GraphModule | None) -> str:
    """What the port does not keep of activation checkpointing in the forwards it writes out
    ('' when they call none)."""
    paths = gm.meta.get(CHECKPOINTING, []) if gm is not None else []
    if not paths:
        return ""
    names = [p or "the model" for p in paths[:3]] + (["more"] if len(paths) > 3 else [])
    where = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
    forwards = "the forward of" if len(names) == 1 else "the forwards of"
    calls = "calls" if len(names) == 1 else "call"
    return (
        f"{forwards} {where} {calls} torch.utils.checkpoint, which the port does not: the same "
        "values and gradients, but the graph keeps every activation for the backward (more "
        "memory in training)"
    )


@dataclass
class _Aligned:
    """The training trace's nodes matched to the eval trace's."""

    only_training: dict[fx.Node, fx.Node | None]  # node -> the value eval mode has instead
    flags: dict[fx.Node, dict[int | str, Any]]  # arguments by mode (see _match)
    # eval-only node -> (the training value in its place, the training nodes reading it so,
    # the training node it runs before)
    only_eval: dict[fx.Node, tuple[fx.Node | None, set[fx.Node], fx.Node]]
    mapped: dict[fx.Node, fx.Node]  # eval node -> training node


def _align(train: fx.Graph, evaluation: fx.Graph, root: nn.Module) -> _Aligned | fx.Node:
    """Match each node of the eval-mode trace to one of the training trace, in order. The
    training nodes left over run in training only (timm's ``num_batches_tracked.add_(1)``, a
    drop path's ``x * mask``); the eval nodes no training node matches run in eval mode only
    (``x.softmax(-1)`` returned in eval mode). When the two differ otherwise (a layer or an
    effect in one mode only, a call whose tensors differ), returns the first eval node no
    training node matches, or the node whose other mode's value is computed elsewhere."""
    ours = list(train.nodes)
    mapped: dict[fx.Node, fx.Node] = {}  # eval node -> training node
    only: dict[fx.Node, fx.Node | None] = {}
    evals: dict[fx.Node, list[Any]] = {}  # eval-only node -> [training value, readers, before]
    flags: dict[fx.Node, dict[int | str, Any]] = {}
    i = 0
    for theirs in evaluation.nodes:
        # the first training node from i it matches, those before it running in training only
        k, matched = i, None
        skipped = dict(only)  # with ours[i:k], running in training only should k match
        while k < len(ours):
            matched = _match(ours[k], theirs, mapped, skipped, evals, root)
            if matched is not None or not _skippable(ours[k]):
                break
            skipped.setdefault(ours[k], None)
            k += 1
        if matched is None:  # none: it runs in eval mode only, before ours[i]
            if theirs.op not in ("call_function", "call_method") or _has_effects(theirs):
                return theirs  # an input, a layer, an effect: no eval-only value
            if i == len(ours):
                return theirs
            evals[theirs] = [None, set(), ours[i]]
            continue
        for n in ours[i:k]:
            only.setdefault(n, None)
        _match(ours[k], theirs, mapped, only, evals, root)  # (records what it found)
        mapped[theirs] = ours[k]
        if matched:
            flags[ours[k]] = matched
        i = k + 1
    for node, instead in only.items():
        if instead is not None and instead not in node.all_input_nodes:
            return node  # eval's value is computed elsewhere: no one function has both
    for node, (value, _, _) in evals.items():
        if value is not None and value not in {mapped.get(n) for n in node.all_input_nodes}:
            return node  # training's value is computed elsewhere: no one function has both
    return _Aligned(only, flags, {n: (v, r, b) for n, (v, r, b) in evals.items()}, mapped)


def _skippable(node: fx.Node) -> bool:
    """Whether a training node may run in training only: not an input, the output, a layer or
    a store."""
    return node.op not in ("placeholder", "output", "call_module") and not _is_assignment(node)


def _is_assignment(node: fx.Node) -> bool:
    return (node.op == "call_function" and node.target is operator.setitem) or (
        node.op == "call_method" and node.target == "__setitem__"
    )


def _match(
    mine: fx.Node,
    theirs: fx.Node,
    mapped: dict[fx.Node, fx.Node],
    only: dict[fx.Node, fx.Node | None],
    evals: dict[fx.Node, list[Any]],
    root: nn.Module,
) -> dict[int | str, Any] | None:
    """Whether ``mine`` (training) does what ``theirs`` (eval) does in its mode: None when not,
    else the arguments whose constant value depends on the mode, with eval's value: the mode
    itself, ``True`` in training and ``False`` in eval (``stochastic_depth(x, p, mode,
    self.training)``, Swin's ``training=self.training``), or any other constant (sdpa's
    ``dropout_p=p if self.training else 0.0``). Where ``mine`` reads a training-only value and
    ``theirs`` another, that other is recorded as eval's value in its place; where ``theirs``
    reads an eval-only value and ``mine`` another, that other is training's value in its place.

    A dropout passes its input through in eval mode however it is written, so two dropouts of
    one input agree when their ``p`` does or when either is off: ``F.dropout(x, p,
    self.training)`` and transformers' ``p=0.0 if not self.training else p`` both port as one
    ``nn.Dropout(p)``, which follows the mode by itself."""
    if mine.op != theirs.op:
        return None
    if is_constant(mine) or is_constant(theirs):
        same = is_constant(mine) and is_constant(theirs)
        return {} if same and _constant_value(mine, root) == _constant_value(theirs, root) else None
    if mine.target != theirs.target:
        return None
    instead: dict[fx.Node, fx.Node] = {}
    trained: dict[fx.Node, fx.Node] = {}  # eval-only node -> the training value read instead

    def equal(a: Any, b: Any) -> bool:
        if isinstance(a, fx.Node) or isinstance(b, fx.Node):
            if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
                return False
            if is_constant(a) or is_constant(b):
                return _match(a, b, mapped, only, evals, root) == {}
            if b in evals:  # an eval-only value: training reads ``a`` in its place
                known = evals[b][0]
                if known not in (None, a) or trained.get(b, a) is not a:
                    return False
                trained[b] = a
                return True
            if b not in mapped:
                return False
            if mapped[b] is a:
                return True
            value = mapped[b]
            if a in only and only[a] in (None, value) and instead.get(a, value) is value:
                instead[a] = value  # a training-only value: eval mode reads this one instead
                return True
            return False
        if type(a) is not type(b):
            return False
        if isinstance(a, tuple | list):
            return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
        if isinstance(a, slice):
            return equal((a.start, a.stop, a.step), (b.start, b.stop, b.step))
        return repr(a) == repr(b)

    first, second = _dropout(mine), _dropout(theirs)
    one_dropout = (
        first is not None
        and second is not None
        and equal((first["input"], first["inplace"]), (second["input"], second["inplace"]))
        and (first["p"] == second["p"] or _off(first) or _off(second))
    )
    found: dict[int | str, Any] = {}
    if not one_dropout:
        if len(mine.args) != len(theirs.args) or mine.kwargs.keys() != theirs.kwargs.keys():
            return None
        pairs: list[tuple[int | str, tuple[Any, Any]]] = [
            *enumerate(zip(mine.args, theirs.args, strict=True))
        ]
        pairs += [(k, (mine.kwargs[k], theirs.kwargs[k])) for k in mine.kwargs]
        for key, (a, b) in pairs:
            if equal(a, b):
                continue
            if mine.op == "call_module" or not (_plain(a) and _plain(b)):
                return None
            found[key] = b  # a constant by mode: (a if training else b)
    if any(_occurrences(mine, value) != 1 for value in trained.values()):
        return None  # it reads that value elsewhere too: no one input to replace
    only.update(instead)
    for node, value in trained.items():
        evals[node][0] = value
        evals[node][1].add(mine)
    return found


def _occurrences(node: fx.Node, value: fx.Node) -> int:
    """How many times ``node``'s arguments name ``value``."""
    count = 0

    def visit(arg: fx.Node) -> fx.Node:
        nonlocal count
        count += arg is value
        return arg

    fx.node.map_arg((node.args, node.kwargs), visit)
    return count


def _plain(value: Any) -> bool:
    """A constant the port writes as a literal (a number, a string, None, a tuple of them)."""
    if isinstance(value, tuple | list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def _mode_dependent(
    model: nn.Module,
    graph: fx.Graph,
    opaque_paths: set[str],
    fixed: dict[str, Any],
    example: tuple[Any, ...] | None,
    whole_by_mode: Collection[str] | None = (),
    reads: SettingReads | None = None,
    others: Sequence[tuple[Any, ...]] = (),
    regions: bool = True,
) -> tuple[str | None, fx.Graph]:
    """The innermost module whose traced forward differs in eval mode beyond what the port
    writes out (None: none does), and the trace to port: the training one, whose mode-passing
    arguments and training-only operations are marked (``TRAINING_ARGS``, ``TRAINING_ONLY``)
    for the translation to follow the graph's mode."""
    was_training = model.training
    try:
        model.train(not was_training)
        tracer = PortTracer(opaque_paths, example, reads, others, regions)
        other = tracer.trace(model, concrete_args=fixed or None)
    except Exception:
        return None, graph  # the other mode fails to trace: the retry loop sees the same failure
    finally:
        model.train(was_training)
    train, evaluation = (graph, other) if was_training else (other, graph)
    aligned = _align(train, evaluation, model)
    if isinstance(aligned, fx.Node):
        return owner_of(model, aligned), graph
    for node in [*aligned.only_training, *aligned.only_eval]:
        owner = owner_of(model, node)
        if whole_by_mode is None or owner in whole_by_mode:
            return owner, graph
    for node, found in aligned.flags.items():  # the port passes the graph's mode there
        node.meta[TRAINING_ARGS] = found
    for node, instead in aligned.only_training.items():
        node.meta[TRAINING_ONLY] = instead
    _copy_eval_only(train, aligned)
    return None, train


def _copy_eval_only(train: fx.Graph, aligned: _Aligned) -> None:
    """Copy the operations eval mode runs alone into the training trace, each before the
    training node it preceded, and have the training nodes that read another value in their
    place read the copy (marked :data:`EVAL_ONLY`, with that value)."""
    copies: dict[fx.Node, fx.Node] = {}
    mapped = aligned.mapped
    for node, (value, readers, before) in aligned.only_eval.items():
        with train.inserting_before(before):
            copy = train.node_copy(node, lambda n: copies.get(n) or mapped[n])
        copy.meta[EVAL_ONLY] = value
        copies[node] = copy
        for reader in readers:
            assert value is not None
            reader.replace_input_with(value, copy)


def has_one_mode_operations(gm: fx.GraphModule | None) -> bool:
    """Whether the traced model runs something in one mode only, written out by mode."""
    return gm is not None and any(
        TRAINING_ONLY in node.meta or EVAL_ONLY in node.meta for node in gm.graph.nodes
    )
