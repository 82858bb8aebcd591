"""Optimizer state in the Rust flodl's stream format (its ``Stateful::save_state``).

Writing and reading this format lets optimizer state move between the two, so a run started in
one continues in the other. The Rust flodl saves four optimizers, each as a bare little-endian
stream with no magic:

=========  ================================================================================
SGD        u32 param count, f64 lr, f64 weight_decay, per param: velocity?, groups
Adam       u32 param count, f64 lr, i64 t, per param: m?, v?, groups
AdamW      f64 weight_decay, then Adam's stream
RMSprop    u32 param count, f64 lr, f64 alpha, f64 eps, f64 weight_decay, f64 momentum,
           per param: v?, buf?, groups
=========  ================================================================================

``x?`` is a u8 presence flag (0: none) followed, when 1, by a tensor as in a checkpoint entry
without its name (u32 rank, i64 dims, u8 dtype tag, u64 byte count, bytes). ``groups`` is a u32
count, then per group f64 lr, i64 start, i64 end: a range of the flat parameter list. A
``.gz`` name means gzip, as for checkpoints. Adagrad, RAdam and NAdam exist in the Rust flodl but
have no saved-state format there, so they are refused.

Mapping to torch (one table; parameters are numbered across ``param_groups`` in order, as in
torch's ``state_dict``):

=============  ========================================================================
Rust stream    torch
=============  ========================================================================
lr             ``param_groups[0]["lr"]``; with no group records every group gets it
groups         one record per torch group when there are several (ranges must match)
weight_decay   every group's ``weight_decay`` (the stream holds one value)
velocity       SGD ``state[i]["momentum_buffer"]``
t, m, v        Adam/AdamW ``state[i]["step"]`` (the largest is saved), ``exp_avg``,
               ``exp_avg_sq``; AMSGrad's ``max_exp_avg_sq`` has no slot (refused)
alpha, eps,    RMSprop's group settings; ``v`` is ``square_avg``, ``buf`` is
momentum       ``momentum_buffer``; the stream holds no step count (loaded as 0); centered
               RMSprop's ``grad_avg`` has no slot (refused)
=============  ========================================================================
"""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any

import torch

from flodl.checkpoint import format as fmt
from flodl.checkpoint.errors import CheckpointError

_F64 = struct.Struct("<d")
_I64 = struct.Struct("<q")

RUST_OPTIMIZERS = ("SGD", "Adam", "AdamW", "RMSprop")
_WITHOUT_STREAM = ("Adagrad", "RAdam", "NAdam")


def rust_kind(optimizer: torch.optim.Optimizer) -> str:
    """Which Rust-format stream ``optimizer`` uses (raises when it has none)."""
    for kind in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD, torch.optim.RMSprop):
        if type(optimizer) is kind:
            return kind.__name__
    name = type(optimizer).__name__
    if name in _WITHOUT_STREAM:
        why = f"the original's {name} has no save_state"
    else:
        why = f"the original has no {name}"
    raise CheckpointError(
        f"cannot use the Rust original's format for {name}: {why} (it saves only "
        f"{', '.join(RUST_OPTIMIZERS)}) — save with the default format"
    )


# ---------------------------------------------------------------------------------- writing


def _tensor(out: bytearray, tensor: torch.Tensor | None, what: str) -> None:
    if tensor is None:
        out += b"\0"
        return
    tag = fmt.TAG_OF_DTYPE.get(tensor.dtype)
    if tag not in fmt.ORIGINAL_TAGS:
        raise CheckpointError(
            f"cannot write {what} for the Rust original: dtype {fmt.dtype_name(tensor.dtype)}"
        )
    t = tensor.detach().cpu().contiguous()
    out += b"\1" + fmt.U32.pack(t.dim()) + struct.pack(f"<{t.dim()}q", *t.shape)
    payload = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    out += fmt.DTYPE_AND_BYTES.pack(tag, len(payload)) + payload


def _one(optimizer: torch.optim.Optimizer, key: str, kind: str) -> float:
    """A group setting the stream holds once: it must be the same in every group."""
    values = {float(g[key]) for g in optimizer.param_groups}
    if len(values) > 1:
        raise CheckpointError(
            f"cannot write {kind} for the Rust original: its {key} differs between param "
            f"groups ({sorted(values)}), and the original keeps one value"
        )
    return values.pop()


def _refuse(optimizer: torch.optim.Optimizer, key: str, kind: str, why: str) -> None:
    if any(g.get(key) for g in optimizer.param_groups):
        raise CheckpointError(f"cannot write {kind} with {key}=True for the Rust original: {why}")


def _groups(out: bytearray, optimizer: torch.optim.Optimizer) -> None:
    groups = optimizer.param_groups
    if len(groups) == 1:  # zero records: what the Rust flodl's plain constructor writes
        out += fmt.U32.pack(0)
        return
    out += fmt.U32.pack(len(groups))
    start = 0
    for group in groups:
        end = start + len(group["params"])
        out += _F64.pack(float(group["lr"])) + _I64.pack(start) + _I64.pack(end)
        start = end


def encode_rust_optimizer(optimizer: torch.optim.Optimizer) -> bytes:
    """The bytes the Rust flodl's ``save_state`` writes for the equivalent optimizer.

    >>> import torch
    >>> from flodl.checkpoint.rust_optim import encode_rust_optimizer
    >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.5)
    >>> data = encode_rust_optimizer(opt)  # count, lr, weight_decay, no velocity, no groups
    >>> len(data), data[:4]
    (25, b'\\x01\\x00\\x00\\x00')
    """
    kind = rust_kind(optimizer)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    states = [optimizer.state.get(p, {}) for p in params]
    lr = float(optimizer.param_groups[0]["lr"]) if optimizer.param_groups else 0.0
    out = bytearray()
    if kind == "AdamW":
        out += _F64.pack(_one(optimizer, "weight_decay", kind))
    out += fmt.U32.pack(len(params)) + _F64.pack(lr)
    if kind == "SGD":
        out += _F64.pack(_one(optimizer, "weight_decay", kind))
        for i, state in enumerate(states):
            _tensor(out, state.get("momentum_buffer"), f"SGD velocity of parameter {i}")
    elif kind in ("Adam", "AdamW"):
        _refuse(optimizer, "amsgrad", kind, "its max_exp_avg_sq has no slot there")
        steps = [float(s["step"]) for s in states if "step" in s]
        out += _I64.pack(int(max(steps, default=0)))
        for i, state in enumerate(states):
            _tensor(out, state.get("exp_avg"), f"{kind} m of parameter {i}")
            _tensor(out, state.get("exp_avg_sq"), f"{kind} v of parameter {i}")
    else:
        _refuse(optimizer, "centered", kind, "its grad_avg has no slot there")
        for key in ("alpha", "eps", "weight_decay", "momentum"):
            out += _F64.pack(_one(optimizer, key, kind))
        for i, state in enumerate(states):
            _tensor(out, state.get("square_avg"), f"RMSprop v of parameter {i}")
            _tensor(out, state.get("momentum_buffer"), f"RMSprop buf of parameter {i}")
    _groups(out, optimizer)
    return bytes(out)


# ---------------------------------------------------------------------------------- reading


class _Stream:
    def __init__(self, data: bytes, source: str, kind: str):
        self.data = memoryview(data)
        self.pos = 0
        self.source = source
        self.kind = kind

    def fail(self, message: str) -> CheckpointError:
        return CheckpointError(
            f"not the Rust original's {self.kind} state: {message}",
            source=self.source,
            offset=self.pos,
        )

    def take(self, n: int, what: str) -> memoryview:
        if n > len(self.data) - self.pos:
            raise self.fail(f"truncated: {what} needs {n} bytes, {len(self.data) - self.pos} left")
        part = self.data[self.pos : self.pos + n]
        self.pos += n
        return part

    def u32(self, what: str) -> int:
        return fmt.U32.unpack(self.take(4, what))[0]

    def f64(self, what: str) -> float:
        return _F64.unpack(self.take(8, what))[0]

    def i64(self, what: str) -> int:
        return _I64.unpack(self.take(8, what))[0]

    def tensor(self, what: str) -> torch.Tensor | None:
        flag = self.take(1, what)[0]
        if flag == 0:
            return None
        if flag != 1:
            raise self.fail(f"{what}: presence flag {flag} (expected 0 or 1)")
        ndim = self.u32(f"the rank of {what}")
        if ndim > fmt.MAX_NDIM:
            raise self.fail(f"{what}: {ndim} dimensions")
        dims = struct.unpack(f"<{ndim}q", self.take(8 * ndim, f"the shape of {what}"))
        tag, nbytes = fmt.DTYPE_AND_BYTES.unpack(self.take(9, f"the dtype of {what}"))
        if tag not in fmt.ORIGINAL_TAGS:
            raise self.fail(f"{what}: unknown dtype tag: {tag}")
        if any(d < 0 for d in dims) or math.prod(dims) * fmt.ELEMENT_SIZE[tag] != nbytes:
            raise self.fail(f"{what}: {nbytes} bytes do not fit shape {fmt.shape_str(dims)}")
        raw = bytearray(self.take(nbytes, what))
        flat = (
            torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        )
        return flat.view(fmt.DTYPE_TAGS[tag]).reshape(dims)


def decode_rust_optimizer(
    data: bytes, optimizer: torch.optim.Optimizer, source: str
) -> dict[str, Any]:
    """A validated torch ``state_dict`` for ``optimizer`` from a Rust-format stream."""
    kind = rust_kind(optimizer)
    s = _Stream(data, source, kind)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    settings: dict[str, float] = {}
    if kind == "AdamW":
        settings["weight_decay"] = s.f64("weight_decay")
    count = s.u32("the parameter count")
    if count != len(params):
        raise CheckpointError(
            f"{kind}: param count mismatch: checkpoint={count} optimizer={len(params)} "
            "— it was saved for another model (or is another optimizer's state)",
            source=source,
        )
    lr = s.f64("lr")
    slots: list[dict[str, torch.Tensor | None]] = []
    step = 0
    if kind == "SGD":
        settings["weight_decay"] = s.f64("weight_decay")
        slots = [{"momentum_buffer": s.tensor(f"velocity {i}")} for i in range(count)]
    elif kind in ("Adam", "AdamW"):
        step = s.i64("t")
        if step < 0:
            raise s.fail(f"negative step count {step}")
        for i in range(count):
            slots.append({"exp_avg": s.tensor(f"m {i}"), "exp_avg_sq": s.tensor(f"v {i}")})
    else:
        for key in ("alpha", "eps", "weight_decay", "momentum"):
            settings[key] = s.f64(key)
        for i in range(count):
            slots.append(
                {"square_avg": s.tensor(f"v {i}"), "momentum_buffer": s.tensor(f"buf {i}")}
            )
    ranges = []
    for g in range(s.u32("the group count")):
        ranges.append((s.f64(f"group {g} lr"), s.i64(f"group {g} start"), s.i64(f"group {g} end")))
    if s.pos != len(s.data):
        raise s.fail(f"{len(s.data) - s.pos} unexpected bytes after the groups")
    return _to_state_dict(optimizer, kind, params, lr, settings, slots, step, ranges, source)


def _to_state_dict(
    optimizer: torch.optim.Optimizer,
    kind: str,
    params: list[torch.Tensor],
    lr: float,
    settings: dict[str, float],
    slots: list[dict[str, torch.Tensor | None]],
    step: int,
    ranges: list[tuple[float, int, int]],
    source: str,
) -> dict[str, Any]:
    def fail(message: str) -> CheckpointError:
        return CheckpointError(f"{kind}: {message}", source=source)

    current = optimizer.state_dict()
    groups = [dict(g) for g in current["param_groups"]]
    if ranges:
        starts = [0]
        for g in groups:
            starts.append(starts[-1] + len(g["params"]))
        mine = list(itertools.pairwise(starts))
        theirs = [(a, b) for _, a, b in ranges]
        if mine != theirs:
            raise fail(
                f"param groups {theirs} in the file, {mine} in the optimizer — it was saved "
                "with another grouping"
            )
        for group, (group_lr, _, _) in zip(groups, ranges, strict=True):
            group["lr"] = group_lr
    else:
        for group in groups:
            group["lr"] = lr
    for group in groups:
        group.update(settings)
    state: dict[int, dict[str, Any]] = {}
    for i, (param, slot) in enumerate(zip(params, slots, strict=True)):
        for key, value in slot.items():
            if value is not None and value.shape != param.shape:
                raise fail(
                    f"state {key!r} of parameter {i} has shape {fmt.shape_str(value.shape)}, "
                    f"the parameter {fmt.shape_str(param.shape)}"
                )
        present = {k: v for k, v in slot.items() if v is not None}
        if not present:
            continue
        if kind in ("Adam", "AdamW"):
            if len(present) != 2:
                raise fail(f"parameter {i} has only one of m and v — the stream is corrupted")
            present["step"] = torch.tensor(float(step))
        elif kind == "RMSprop":
            if "square_avg" not in present:
                raise fail(f"parameter {i} has buf but no v — the stream is corrupted")
            if settings["momentum"] > 0 and "momentum_buffer" not in present:
                present["momentum_buffer"] = torch.zeros_like(present["square_avg"])
            present["step"] = torch.tensor(0.0)
        state[i] = {
            k: v if k == "step" or not v.is_floating_point() else v.to(param.dtype)
            for k, v in present.items()
        }
    return {"state": state, "param_groups": groups}
