"""Composite nodes: loops, gates, switches and maps, as ordinary torch modules.

This module is the one definition of what composites compute. The data-dependent ones
(per-sample switches, maps) are methods (:meth:`Switch.run`, :meth:`Map.run`) that the generated
forward calls. The parts that the generated forward writes out in full, so that a graph costs
what the hand-written model costs (loops, a gate's weighted sum), are :class:`Source` texts
here: the code generator fills them with its locals, and the functions a composite runs on its
own (:func:`for_n`, :func:`while_cond`, :func:`until_cond`, :func:`combine_gate`) are compiled
from the same text. Each composite also works on its own through ``forward``.
"""

from __future__ import annotations

import contextlib
import linecache
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from flodl.graph.fx_tracing import fx_tracing
from flodl.graph.nodes import LoopKind, MapMode


@dataclass(frozen=True)
class Source:
    """Python statements with ``{hole}``s: a composite's semantics, written once.

    ``lines`` are (indent level, text, what a failure on that line means: the detail of the
    error note). :meth:`fill` gives the lines with the holes filled, for the generated forward;
    :meth:`function` compiles the same lines into a function.
    """

    lines: tuple[tuple[int, str, str], ...]

    def fill(self, **holes: str) -> list[tuple[int, str, str]]:
        """The lines with the holes filled; a line filled to nothing (an empty ``free``) goes."""
        filled = ((indent, text.format(**holes), detail) for indent, text, detail in self.lines)
        return [line for line in filled if line[1]]

    def function(self, name: str, params: str, result: str, **holes: str) -> Callable[..., Any]:
        """``def name(params): <lines>; return result``, with :data:`SOURCE_GLOBALS` as its
        globals (as in the generated forward); its source is registered so tracebacks show it."""
        body = [f"{'    ' * (1 + indent)}{text}" for indent, text, _ in self.fill(**holes)]
        source = "\n".join([f"def {name}({params}):", *body, f"    return {result}"]) + "\n"
        filename = f"<flodl composite {name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = dict(SOURCE_GLOBALS)
        exec(compile(source, filename, "exec"), namespace)
        function: Callable[..., Any] = namespace[name]
        function.__module__ = __name__
        return function


FOR_N = Source(
    (
        (0, "{state} = {x}", ""),
        (0, "{free}", ""),  # the input goes if nothing reads it after the loop
        (0, "for {i} in range({n}):", ""),
        (1, "{state} = {step}", "loop"),  # "loop": the note names the iteration ({i})
    )
)
"""A ``for_n`` loop: the state goes through ``step`` ``n`` times, every iteration on the
autograd tape. Holes: ``state`` (the loop's local), ``x`` (the input), ``free`` (``del x``
when nothing reads the input after the loop, as ``x = layer(x)`` by hand frees it on the first
iteration; else empty), ``i`` (the iteration counter), ``n`` (the count) and ``step`` (an
expression of ``state`` and ``i``)."""


def halt_verdict(verdict: Any, state: Any, done: torch.Tensor | None) -> tuple[bool, Any]:
    """(stop the loop?, the samples halted so far) from a halting condition's ``verdict``.

    One value halts the whole batch when it is ``> 0``: a single host read, what a hand-written
    ``if cond(x).item() > 0: break`` costs. One value per sample (``[B]`` or ``[B, 1]``) halts
    those samples; the loop stops when all have halted.
    """
    if type(verdict) is torch.Tensor and done is None and verdict.numel() == 1:
        return verdict.item() > 0, None  # the common case first, with nothing else to check
    if not isinstance(verdict, torch.Tensor):
        verdict = torch.as_tensor(verdict)
    if verdict.numel() == 1:
        return verdict.item() > 0, done
    batch = state.shape[0] if isinstance(state, torch.Tensor) and state.dim() else None
    if batch is None or verdict.numel() != batch:
        raise ValueError(
            f"halting condition returned shape {list(verdict.shape)}; it must return one value "
            f"for the whole batch or one per sample ([{batch}] or [{batch}, 1])"
        )
    halted = verdict.reshape(batch) > 0
    done = halted if done is None else done | halted
    return bool(done.all()), done


def keep_halted(done: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """``new`` for the samples still running, ``old`` for those that halted (``done``)."""
    return torch.where(done.reshape(-1, *([1] * (new.dim() - 1))), old, new)


def gate_weights_error(weights: torch.Tensor, stacked: torch.Tensor) -> None:
    """Raise: a router's ``weights`` do not have the rank of the experts' outputs."""
    n = stacked.shape[-2]
    out = [*stacked.shape[:-2], stacked.shape[-1]]
    raise ValueError(
        f"gate router returned weights of shape {list(weights.shape)} for expert outputs of "
        f"shape {out}: the weights must have shape outputs.shape[:-1] + ({n},) = "
        f"{[*out[:-1], n]}, one weight per expert at each position; a size-1 dimension "
        "broadcasts ([B, 1, n] weights for [B, T, D] outputs: one weight vector per sequence), "
        "and [n] is one weight per expert for all; other shapes of fewer dimensions would "
        "broadcast against the wrong ones"
    )


SOURCE_GLOBALS: dict[str, Any] = {
    "_torch": torch,
    "_halt": halt_verdict,
    "_keep": keep_halted,
    "_gate_weights": gate_weights_error,
}
"""The names every :class:`Source` text may use, in the generated forward and in the functions
compiled here."""

_ADVANCE = "{state} = {step} if {done} is None else _keep({done}, {state}, {step})"

WHILE_COND = Source(
    (
        (0, "{state} = {x}", ""),
        (0, "{free}", ""),  # the input goes if nothing reads it after the loop
        (0, "{done} = None", ""),
        (0, "for {i} in range({n}):", ""),
        (1, "{stop}, {done} = _halt({verdict}, {state}, {done})", "halt"),
        (1, "if {stop}:", ""),
        (2, "break", ""),
        (1, _ADVANCE, "loop"),
    )
)
"""A ``while_cond`` loop: ask the condition, then step, at most ``n`` times. Holes as
:data:`FOR_N`, plus ``verdict`` (the condition's call on ``state``), ``done`` and ``stop``
(locals for the halted samples and the decision). Halted samples keep their state."""

UNTIL_COND = Source(
    (
        (0, "{state} = {x}", ""),
        (0, "{free}", ""),  # the input goes if nothing reads it after the loop
        (0, "{done} = None", ""),
        (0, "for {i} in range({n}):", ""),
        (1, _ADVANCE, "loop"),
        (1, "if {i} < {n} - 1:", ""),  # after the last iteration there is nothing to decide
        (2, "{stop}, {done} = _halt({verdict}, {state}, {done})", "halt"),
        (2, "if {stop}:", ""),
        (3, "break", ""),
    )
)
"""An ``until_cond`` loop: step, then ask the condition, at most ``n`` times (holes as
:data:`WHILE_COND`)."""

GATE_SUM = Source(
    (
        (
            0,
            "{stacked} = _torch.stack(({outs},), dim=-2)",
            "stacking the experts' outputs (each expert must give the same shape)",
        ),
        # Weights of lower rank would broadcast from the right: [B, n] against [B, T, D]
        # outputs weights along time when B == T, silently. One global weight per expert ([n])
        # is unambiguous. (Not a tensor: fx's proxies.)
        (
            0,
            "if isinstance({weights}, _torch.Tensor) and 1 < {weights}.dim() < {stacked}.dim() - 1:",
            "",
        ),
        (1, "_gate_weights({weights}, {stacked})", "router weights"),
        # stacked: the outputs go now, before the product, as a hand-written gate's list does
        (0, "{free}", ""),
        (
            0,
            "{out} = ({stacked} * {weights}.unsqueeze(-1)).sum(dim=-2)",
            "weighted sum of the experts (weights [..., n] must match outputs [..., D])",
        ),
    )
)
"""A gate's combination ``Σ_i weights[..., i] * outs[i]``. Holes: ``out`` (the result's
local), ``stacked`` (a local for the stacked outputs), ``outs`` (the experts' outputs,
comma-separated), ``free`` (``del`` of the locals holding them, once stacked) and ``weights``
(the router's)."""

for_n: Callable[[Callable[[Any, int], Any], Any, int], Any] = FOR_N.function(
    "for_n", "step, x, n", "state", state="state", x="x", free="del x", i="i", n="n",
    step="step(state, i)",
)  # fmt: skip
"""``for_n(step, x, n)``: :data:`FOR_N` as a function (``step(state, i)`` gives the next state)."""

_HALTING = {"state": "state", "x": "x", "free": "del x", "i": "i", "n": "n",
            "step": "step(state, i)",
            "verdict": "cond(state, i)", "done": "done", "stop": "stop"}  # fmt: skip

while_cond: Callable[..., Any] = WHILE_COND.function(
    "while_cond", "step, cond, x, n", "state", **_HALTING
)
"""``while_cond(step, cond, x, n)``: :data:`WHILE_COND` as a function (``cond(state, i)`` gives
the verdict)."""

until_cond: Callable[..., Any] = UNTIL_COND.function(
    "until_cond", "step, cond, x, n", "state", **_HALTING
)
"""``until_cond(step, cond, x, n)``: :data:`UNTIL_COND` as a function."""

combine_gate: Callable[[list[torch.Tensor] | tuple[torch.Tensor, ...], torch.Tensor], Any] = (
    GATE_SUM.function("combine_gate", "outs, weights", "out", out="out", stacked="stacked",
                      outs="*outs", free="del outs", weights="weights")
)  # fmt: skip
"""``combine_gate(outs, weights)``: :data:`GATE_SUM` as a function."""


_module_mod = nn.modules.module
_tracing = torch._C._get_tracing_state
_NONE = object()


def _call_observed(own: dict[str, Any]) -> bool:
    """Whether ``nn.Module.__call__`` on the module whose ``__dict__`` is ``own`` would do more
    than call ``forward``: a forward, pre-forward or backward hook of its own or a global one
    (what FSDP2's ``fully_shard``, pruning and quantization observers register), or
    ``torch.jit.trace`` recording the call."""
    m = _module_mod
    return bool(
        own.get("_forward_hooks")
        or own.get("_forward_pre_hooks")
        or own.get("_backward_hooks")
        or own.get("_backward_pre_hooks")
        or m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
        or _tracing() is not None
    )


def call_named(module: Any, x: Any, refs: dict[str, Any]) -> Any:
    """``module.forward_named(x, refs)``, called as a step: through ``nn.Module.__call__``
    with ``forward_named`` standing for ``forward`` (its hooks see ``args == (x, refs)``)
    whenever :func:`_call_observed` says the call could be told apart; directly otherwise,
    which is what ``__call__`` would do then.

    ``__call__`` reads ``module.forward`` once, before the hooks run: for this call it finds
    ``forward_named``, which puts the module's own ``forward`` back as it starts, so a
    ``forward_named`` calling ``self.forward`` (the routers do) gets the real one. (Another
    thread calling the same module while its pre-hooks run would find the stand-in too.)
    """
    own = module.__dict__
    if not _call_observed(own):
        return module.forward_named(x, refs)
    named = module.forward_named
    kept = own.get("forward", _NONE)  # an instance-level forward (accelerate's) stays

    def put_back() -> None:
        if own.get("forward") is forward:
            if kept is _NONE:
                del own["forward"]
            else:
                own["forward"] = kept

    def forward(*args: Any, **kwargs: Any) -> Any:
        put_back()
        return named(*args, **kwargs)

    own["forward"] = forward
    try:
        return module(x, refs)
    finally:
        put_back()


def call_with_refs(module: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call ``module`` with the primary stream and its refs, as the builder wired them.

    A module with ``forward_named`` receives every ref in one dict (the generated code passes
    them all as ``kwargs`` then: :func:`call_named`); otherwise ``module(x, *args, **kwargs)``.
    """
    if not args and not kwargs:
        return module(x)
    if not args and callable(getattr(module, "forward_named", None)):
        return call_named(module, x, kwargs)
    return module(x, *args, **kwargs)


def _note(exc: BaseException, text: str) -> None:
    """Record composite-level detail (iteration, branch, element) for the node's error note."""
    # Exceptions without a __dict__ get no detail; the node note still comes.
    with contextlib.suppress(AttributeError):
        exc.__dict__.setdefault("_flodl_detail", text)


class Loop(nn.Module):
    """Run ``body`` repeatedly: ``for_n``, ``while_cond`` or ``until_cond``.

    Halting rule (``while``/``until``): the condition returns one value (the whole batch halts
    together) or one value per sample (``[B]`` or ``[B, 1]``). A value ``> 0`` halts. Halted
    samples keep the state they had when they halted while the others go on, so a sample's result
    does not depend on the rest of its batch. The loop stops when every sample has halted or
    after ``max_iter`` iterations. Every iteration is on the autograd tape (BPTT).

    Body state: before each run of the loop the body is reset — its ``reset()`` method when it
    has one, else ``reset_state()`` (a Graph body: its forward-reference state) — so a stateful
    body starts every forward pass fresh and no state leaks from one pass into the next.

    Traces: a body that defines ``trace(self)`` is asked after every iteration; it returns a
    tensor (kept in :attr:`traces`), a dict of named tensors (kept per name in
    :attr:`named_traces`) or None. Each run of the loop replaces the previous run's traces.
    """

    node_name = "loop"

    def __init__(
        self,
        body: nn.Module,
        kind: LoopKind | str,
        n: int,
        cond: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.body = body
        if cond is not None:
            self.cond = cond
        self.kind = LoopKind(kind)
        self.n = n
        self.traces: list[torch.Tensor] = []
        self.named_traces: dict[str, list[torch.Tensor]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = nn.Module.__getstate__(self).copy()
        state["kind"] = self.kind.value  # the plain name: pickles do not depend on the enum
        state["traces"], state["named_traces"] = [], {}  # per-forward values, never saved
        state.pop("_hook_cache", None)  # bound methods of the body: found again after loading
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__["kind"] = LoopKind(self.kind)

    def _hooks(self) -> tuple[Any, Any]:
        """(what resets the body before a run or None, the body's ``trace`` or None), looked up
        once per loop (a module's methods do not change between forward passes)."""
        cached = self.__dict__.get("_hook_cache")
        if cached is None or cached[0] is not self.body:
            cached = self.__dict__["_hook_cache"] = (self.body, *self._find_hooks())
        return cached[1], cached[2]

    def _find_hooks(self) -> tuple[Any, Any]:
        body = self.body
        reset = getattr(body, "reset", None)
        if not callable(reset):
            needs = getattr(body, "_needs_reset", None)  # a Graph: skip one with no state at all
            reset = getattr(body, "reset_state", None)
            if not callable(reset) or (callable(needs) and not needs()):
                reset = None
        trace = getattr(body, "trace", None)
        return reset, trace if callable(trace) else None

    def inlinable(self) -> bool:
        """True when nothing must happen around the iterations (no reset, no trace): the
        generated forward may then unroll a ``for_n`` loop itself instead of calling :meth:`run`."""
        return self._hooks() == (None, None)

    def _begin(self) -> Any:
        """Start a run: forget the previous run's traces, reset the body; return the tracer."""
        reset, trace = self._hooks()
        self.__dict__["traces"], self.__dict__["named_traces"] = [], {}
        if reset is not None:
            reset()
        return trace

    def _keep_trace(self, trace: Any, i: int) -> None:
        try:
            value = trace()
        except Exception as exc:
            _note(exc, f"trace() after iteration {i + 1}")
            raise
        if value is None or fx_tracing():  # under torch.fx: proxies, not kept
            return
        if isinstance(value, torch.Tensor):
            self.traces.append(value)
        elif isinstance(value, dict):
            for name, tensor in value.items():
                if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
                    raise TypeError(
                        f"{type(self.body).__name__}.trace() returned a dict with {name!r}: "
                        f"{type(tensor).__name__}; a named trace maps str -> tensor"
                    )
                self.named_traces.setdefault(name, []).append(tensor)
        else:
            raise TypeError(
                f"{type(self.body).__name__}.trace() must return a tensor, a dict of named "
                f"tensors or None, got {type(value).__name__}"
            )

    def _apply(self, fn: Any, recurse: bool = True) -> Loop:
        super()._apply(fn, recurse)
        # The last run's traces hold tensors of the old device or dtype: forgotten, as a graph's
        # tagged values are; the next run records new ones.
        self.__dict__["traces"], self.__dict__["named_traces"] = [], {}
        return self

    def detach_state(self) -> None:
        """Cut the autograd history of the kept traces (``graph.detach_state`` calls this)."""
        self.__dict__["traces"] = [t.detach() for t in self.traces]
        self.__dict__["named_traces"] = {
            k: [t.detach() for t in v] for k, v in self.named_traces.items()
        }

    def extra_repr(self) -> str:
        return f"kind={self.kind}, {'n' if self.kind is LoopKind.FOR_N else 'max_iter'}={self.n}"

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return self.run(x, args, kwargs)

    def _step(self, state: Any, args: tuple[Any, ...], kwargs: dict[str, Any], i: int) -> Any:
        try:
            return call_with_refs(self.body, state, args, kwargs)
        except Exception as exc:
            bound = "" if self.kind is LoopKind.FOR_N else "at most "  # for_n runs exactly n
            _note(exc, f"iteration {i + 1} of {bound}{self.n}")
            raise

    def _iterate(
        self, state: Any, args: tuple[Any, ...], kwargs: dict[str, Any], i: int, trace: Any
    ) -> Any:
        """One iteration: the body's step, then its trace (when it has one)."""
        state = self._step(state, args, kwargs, i)
        if trace is not None:
            self._keep_trace(trace, i)
        return state

    def _verdict(self, state: Any, i: int) -> Any:
        try:
            return self.cond(state)
        except Exception as exc:
            _note(exc, f"halting condition at iteration {i + 1}")
            raise

    def run(self, x: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        trace = self._begin()

        def step(state: Any, i: int) -> Any:
            return self._iterate(state, args, kwargs, i, trace)

        if self.kind is LoopKind.FOR_N:
            return for_n(step, x, self.n)
        halting = while_cond if self.kind is LoopKind.WHILE else until_cond
        return halting(step, self._verdict, x, self.n)


class _Routed(nn.Module):
    """A chooser module plus a list of modules to choose from, named after their ``roles``."""

    roles: tuple[str, str]

    def __init__(self, chooser: nn.Module, choices: list[nn.Module]) -> None:
        super().__init__()
        setattr(self, self.roles[0], chooser)
        setattr(self, self.roles[1], nn.ModuleList(choices))

    def extra_repr(self) -> str:
        return f"{self.roles[1]}={len(getattr(self, self.roles[1]))}"


class Gate(_Routed):
    """Soft routing: ``Σ_i router(x)[..., i] * expert_i(x)`` (every expert runs on ``x``).

    The router's weights have shape ``S[:-1] + [n]`` where ``S`` is an expert output's shape
    (``[B, D]`` outputs take ``[B, n]`` weights). Normalising them is the router's job.
    """

    node_name = "gate"
    roles = ("router", "experts")
    router: nn.Module
    experts: nn.ModuleList

    def __init__(self, router: nn.Module, experts: list[nn.Module]) -> None:
        super().__init__(router, experts)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        weights = call_with_refs(self.router, x, args, kwargs)
        outs = [expert(x) for expert in self.experts]
        return combine_gate(outs, weights)


class Switch(_Routed):
    """Hard routing: ``selector(x)`` picks a branch, only the picked branch runs.

    The selector returns one index (the whole batch takes that branch) or one index per sample
    (``[B]``: each sample runs through its own branch, the outputs are put back in batch order).
    Gradients reach the branches that ran; the choice itself is not differentiable.
    """

    node_name = "switch"
    roles = ("selector", "branches")
    selector: nn.Module
    branches: nn.ModuleList

    def __init__(self, selector: nn.Module, branches: list[nn.Module]) -> None:
        super().__init__(selector, branches)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return self.run(x, args, kwargs)

    def _check(self, index: torch.Tensor) -> torch.Tensor:
        n = len(self.branches)
        if index.is_floating_point() and not bool((index == index.floor()).all()):
            raise ValueError(
                f"switch selector returned non-integer index values {index.tolist()[:8]}; "
                "return branch indices (e.g. logits.argmax(-1))"
            )
        index = index.long()
        bad = (index < 0) | (index >= n)
        if bool(bad.any()):
            chosen = int(index[bad].reshape(-1)[0])
            raise IndexError(
                f"switch selector chose branch {chosen}, but there are only {n} branches "
                f"(valid indices 0..{n - 1})"
            )
        return index

    def _branch(self, k: int, x: Any) -> Any:
        try:
            return self.branches[k](x)
        except Exception as exc:
            _note(exc, f"branch {k} of {len(self.branches)}")
            raise

    def run(self, x: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        choice = call_with_refs(self.selector, x, args, kwargs or {})
        index = self._check(torch.as_tensor(choice).detach())
        if index.numel() == 1:
            return self._branch(int(index.reshape(())), x)
        batch = x.shape[0]
        if index.numel() != batch:
            raise ValueError(
                f"switch selector returned {index.numel()} indices for a batch of {batch}; "
                "return one index for the whole batch or one per sample"
            )
        index = index.reshape(batch)
        positions, outs = [], []
        for k in range(len(self.branches)):
            pos = (index == k).nonzero().squeeze(1)
            if pos.numel() == batch:
                return self._branch(k, x)
            if pos.numel():
                positions.append(pos)
                outs.append(self._branch(k, x.index_select(0, pos)))
        order = torch.cat(positions).argsort()
        return torch.cat(outs).index_select(0, order)


class Map(nn.Module):
    """Apply ``body`` to each element along dim 0 (``each``/``over``) or to ``n`` slices of the
    last dimension (``slices``); ``batched`` calls the body once on the whole tensor.
    """

    node_name = "map"

    def __init__(
        self, body: nn.Module, mode: MapMode | str, n: int = 0, batched: bool = False
    ) -> None:
        super().__init__()
        self.body = body
        self.mode = MapMode(mode)
        self.n = n
        self.batched = batched

    def __getstate__(self) -> dict[str, Any]:
        state = nn.Module.__getstate__(self).copy()
        state["mode"] = self.mode.value  # the plain name: pickles do not depend on the enum
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__["mode"] = MapMode(self.mode)

    def extra_repr(self) -> str:
        extra = f", n={self.n}" if self.mode is MapMode.SLICES else ""
        return f"mode={self.mode}{extra}, batched={self.batched}"

    def forward(self, x: Any) -> Any:
        return self.run(x)

    def _each(self, x: torch.Tensor) -> torch.Tensor:
        if self.batched or x.shape[0] == 0:  # an empty batch still goes through the body once
            return self.body(x)
        outs = []
        for i in range(x.shape[0]):
            try:
                outs.append(self.body(x[i : i + 1]))
            except Exception as exc:
                _note(exc, f"element {i} of {x.shape[0]}")
                raise
        return torch.cat(outs, dim=0)

    def run(self, x: Any) -> Any:
        # a tuple of types: torch.compile before 2.10 breaks on a union
        if isinstance(x, (list, tuple)):
            return [self.body(item) for item in x]
        if self.mode is not MapMode.SLICES:
            return self._each(x)
        if x.dim() < 2:
            raise ValueError(f"map slices({self.n}): input must be at least 2-d (got {x.dim()}-d)")
        width = x.shape[-1]
        if width % self.n:
            raise ValueError(f"map slices({self.n}): last dim {width} is not divisible by {self.n}")
        lead = x.shape[:-1]
        out = self._each(x.reshape(-1, width // self.n))
        return out.reshape(*lead, -1)
