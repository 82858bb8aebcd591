"""An independent model of the Rust original's formats, written from its source for the tests.

Nothing here imports flodl: it mirrors, step by step, what the original does in
``flodl/src/nn/checkpoint.rs`` (file layout, reader), ``flodl/src/graph/flow.rs`` and
``graph.rs`` (node ids, ports, edges, Kahn levels, ``compute_structural_hash``,
``named_parameters``) and ``flodl/src/nn/optim/{sgd,adam,rmsprop}.rs`` (``Stateful`` streams).
Tests use it to produce files "from Rust" and to parse what flodl writes for Rust.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from dataclasses import dataclass, field
from pathlib import Path

import torch

TAGS = {
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.float32: 3,
    torch.float64: 4,
    torch.int32: 5,
    torch.int64: 6,
}
DTYPES = {tag: dtype for dtype, tag in TAGS.items()}


# ------------------------------------------------------------------------- tensor data


def tensor_data(t: torch.Tensor) -> bytes:
    """``write_tensor_data``: u32 ndim, i64 dims, u8 tag, u64 byte count, raw bytes."""
    t = t.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return (
        struct.pack("<I", t.dim())
        + b"".join(struct.pack("<q", d) for d in t.shape)
        + bytes([TAGS[t.dtype]])
        + struct.pack("<Q", len(raw))
        + raw
    )


class Cursor:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"io: failed to fill whole buffer at {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def i64(self) -> int:
        return struct.unpack("<q", self.take(8))[0]

    def f64(self) -> float:
        return struct.unpack("<d", self.take(8))[0]

    def tensor(self) -> torch.Tensor:
        shape = [self.i64() for _ in range(self.u32())]
        tag = self.take(1)[0]
        if tag not in DTYPES:
            raise ValueError(f"unknown dtype tag: {tag}")
        raw = bytearray(self.take(self.u64()))
        flat = (
            torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        )
        return flat.view(DTYPES[tag]).reshape(shape).clone()

    def optional(self) -> torch.Tensor | None:
        return None if self.take(1)[0] == 0 else self.tensor()


# ------------------------------------------------------------------------- checkpoint files


def checkpoint_bytes(params, buffers=(), structural_hash: str | None = None) -> bytes:
    """``save_checkpoint``: FDLC, version 2, 32 hash bytes, u32 count, (name, tensor data)*."""
    digest = bytes.fromhex(structural_hash) if structural_hash else bytes(32)
    entries = [*params, *buffers]
    out = b"FDLC" + struct.pack("<I", 2) + digest + struct.pack("<I", len(entries))
    for name, tensor in entries:
        raw = name.encode()
        out += struct.pack("<I", len(raw)) + raw + tensor_data(tensor)
    return out


def save_checkpoint_file(path: Path, params, buffers=(), structural_hash=None) -> None:
    """``save_checkpoint_file``: gzip exactly when the path ends in ``.gz``."""
    data = checkpoint_bytes(params, buffers, structural_hash)
    path.write_bytes(gzip.compress(data) if str(path).endswith(".gz") else data)


@dataclass
class Checkpoint:
    version: int
    structural_hash: bytes
    entries: dict[str, torch.Tensor]
    trailing: int  # bytes the original's reader never looks at


def read_checkpoint_file(path: Path) -> Checkpoint:
    """``load_checkpoint_file``'s parse: gunzip only for ``.gz`` names, tags 1-6 only."""
    data = path.read_bytes()
    if str(path).endswith(".gz"):
        data = gzip.decompress(data)
    c = Cursor(data)
    if c.take(4) != b"FDLC":
        raise ValueError("invalid checkpoint: bad magic (expected .fdl checkpoint)")
    version = c.u32()
    if version == 0 or version > 2:
        raise ValueError(f"unsupported checkpoint version {version}")
    digest = c.take(32)
    entries = {}
    for _ in range(c.u32()):
        name = c.take(c.u32()).decode("utf-8", errors="replace")
        entries[name] = c.tensor()
    return Checkpoint(version, digest, entries, len(data) - c.pos)


# ------------------------------------------------------------------------- graphs

# The original's module names and the parameters/buffers each one holds (from nn/*.rs).
MODULE_NAMES = {
    "Linear": "linear",
    "ReLU": "relu",
    "GELU": "gelu",
    "Tanh": "tanh",
    "LayerNorm": "layernorm",
    "BatchNorm1d": "batchnorm",
    "Conv2d": "conv2d",
    "Embedding": "embedding",
    "Dropout": "dropout",
    "Identity": "identity",
}
RUST_BUFFERS = {"BatchNorm1d": ("running_mean", "running_var")}


@dataclass
class Module:
    """One of the original's modules: its name, parameters and buffers (name, tensor)."""

    name: str
    params: list[tuple[str, torch.Tensor]]
    buffers: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    graph: RustGraph | None = None  # a nested graph

    @classmethod
    def of(cls, torch_module: torch.nn.Module) -> Module:
        kind = type(torch_module).__name__
        keep = RUST_BUFFERS.get(kind, ())
        return cls(
            MODULE_NAMES[kind],
            list(torch_module.named_parameters(recurse=False)),
            [(n, b) for n, b in torch_module.named_buffers(recurse=False) if n in keep],
        )

    @classmethod
    def nested(cls, graph: RustGraph) -> Module:
        return cls("graph", graph.parameters(), graph.buffers(), graph)


@dataclass
class Node:
    id: str
    input_ports: list[str]
    module: Module | None


class RustFlow:
    """``FlowBuilder``: a counter for node ids, edges pushed as the original pushes them."""

    def __init__(self, entry: Module):
        self.nodes: list[Node] = []
        self.edges: list[tuple[str, str, str, str]] = []
        self.taps: dict[str, str] = {}
        self.counter = 0
        self.current = [self._module(entry)]
        self.inputs = [("input", self.current[0], "input")]
        self.fork_target: str | None = None

    def _id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def _module(self, module: Module) -> str:
        node = Node(self._id(module.name), ["input"], module)
        self.nodes.append(node)
        return node.id

    def _add(self, prefix: str, n: int) -> str:
        node = Node(self._id(prefix), [f"input_{i}" for i in range(n)], None)
        self.nodes.append(node)
        return node.id

    def through(self, module: Module) -> RustFlow:
        prev = self.current[0]
        nid = self._module(module)
        self.edges.append((prev, "output", nid, "input"))
        self.current = [nid]
        return self

    def fork(self, module: Module) -> RustFlow:
        nid = self._module(module)
        self.edges.append((self.current[0], "output", nid, "input"))
        self.fork_target = nid
        return self

    def also(self, module: Module) -> RustFlow:
        prev = self.current[0]
        mid = self._module(module)
        aid = self._add("add", 2)
        self.edges += [
            (prev, "output", mid, "input"),
            (prev, "output", aid, "input_0"),
            (mid, "output", aid, "input_1"),
        ]
        self.current = [aid]
        return self

    def also_with(self, skip: Module, main: Module) -> RustFlow:
        prev = self.current[0]
        sid = self._module(skip)
        mid = self._module(main)
        aid = self._add("add", 2)
        self.edges += [
            (prev, "output", sid, "input"),
            (prev, "output", mid, "input"),
            (sid, "output", aid, "input_0"),
            (mid, "output", aid, "input_1"),
        ]
        self.current = [aid]
        return self

    def tag_group(self, name: str) -> RustFlow:
        for i, stream in enumerate(self.current):
            self.taps[f"{name}_{i}"] = stream
        return self

    def split(self, *modules: Module) -> RustFlow:
        prev = self.current[0]
        branches = []
        for module in modules:
            nid = self._module(module)
            self.edges.append((prev, "output", nid, "input"))
            branches.append(nid)
        self.current = branches
        return self

    def merge(self) -> RustFlow:
        mid = self._add("merge", len(self.current))
        for i, branch in enumerate(self.current):
            self.edges.append((branch, "output", mid, f"input_{i}"))
        self.current = [mid]
        return self

    def tag(self, name: str) -> RustFlow:
        target = self.fork_target or self.current[0]
        self.fork_target = None
        self.taps[name] = target
        return self

    def build(self) -> RustGraph:
        return RustGraph(self.nodes, self.edges, self.taps, self.inputs, self.current[0])


class RustGraph:
    def __init__(self, nodes, edges, taps, inputs, output):
        self.nodes = nodes
        self.index = {n.id: i for i, n in enumerate(nodes)}
        self.edges = edges
        self.tags = {name: (self.index[nid], 0) for name, nid in taps.items()}
        self.inputs = inputs
        self.outputs = [("output", output, "output")]
        self.order = self._levels()

    def _levels(self) -> list[int]:
        n = len(self.nodes)
        deps = [set() for _ in range(n)]
        dependents = [set() for _ in range(n)]
        for src, _, dst, _ in self.edges:
            deps[self.index[dst]].add(self.index[src])
            dependents[self.index[src]].add(self.index[dst])
        degree = [len(d) for d in deps]
        queue = [i for i in range(n) if degree[i] == 0]
        order = []
        while queue:
            order.extend(queue)
            nxt = []
            for i in queue:
                for j in sorted(dependents[i]):  # BTreeSet: node-index order
                    degree[j] -= 1
                    if degree[j] == 0:
                        nxt.append(j)
            queue = nxt
        return order

    def parameters(self) -> list[tuple[str, torch.Tensor]]:
        out, seen = [], set()
        for i in self.order:
            module = self.nodes[i].module
            for name, p in module.params if module else ():
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append((name, p))
        return out

    def buffers(self) -> list[tuple[str, torch.Tensor]]:
        out, seen = [], set()
        for i in self.order:
            module = self.nodes[i].module
            for name, b in module.buffers if module else ():
                if id(b) not in seen:
                    seen.add(id(b))
                    out.append((name, b))
        return out

    def structural_hash(self) -> str:
        h = hashlib.sha256()
        for i in self.order:
            node = self.nodes[i]
            h.update(node.id.encode() + b"\0")
            m = node.module
            if m is None:
                continue
            h.update(m.name.encode() + b"\0")
            for name, p in sorted(m.params, key=lambda item: item[0]):
                h.update(b"P" + name.encode() + b"\0")
                for d in p.shape:
                    h.update(struct.pack("<q", d))
            for name, b in sorted(m.buffers, key=lambda item: item[0]):
                h.update(b"B" + name.encode() + b"\0")
                for d in b.shape:
                    h.update(struct.pack("<q", d))
            if m.graph is not None:
                h.update(b"G" + m.graph.structural_hash().encode())
        h.update(b"EDGES")
        for src, src_port, dst, dst_port in self.edges:
            for part in (src, src_port, dst, dst_port):
                h.update(part.encode() + b"\0")
        h.update(b"TAGS")
        for name in sorted(self.tags):
            ni, pi = self.tags[name]
            h.update(name.encode() + b"\0" + struct.pack("<Q", ni) + struct.pack("<Q", pi))
        for label, ports in (("INPUTS", self.inputs), ("OUTPUTS", self.outputs)):
            h.update(label.encode())
            for name, node_id, port in ports:
                for part in (name, node_id, port):
                    h.update(part.encode() + b"\0")
        return h.hexdigest()

    def _named(self, buffers: bool) -> list[tuple[str, torch.Tensor]]:
        prefix_of: dict[int, str] = {}
        for tag, (ni, _) in self.tags.items():  # one tag per node in these tests
            prefix_of.setdefault(ni, tag)
        out, seen = [], set()
        for i in self.order:
            module = self.nodes[i].module
            if module is None:
                continue
            prefix = prefix_of.get(i, self.nodes[i].id)
            items = module.buffers if buffers else module.params
            counts: dict[str, int] = {}
            for name, _ in items:
                counts[name] = counts.get(name, 0) + 1
            idx: dict[str, int] = {}
            for name, t in items:
                if id(t) in seen:
                    continue
                seen.add(id(t))
                if counts[name] > 1:
                    out.append((f"{prefix}/{name}_{idx.get(name, 0)}", t))
                    idx[name] = idx.get(name, 0) + 1
                else:
                    out.append((f"{prefix}/{name}", t))
        return out

    def named_parameters(self):
        return self._named(False)

    def named_buffers(self):
        return self._named(True)

    def save_checkpoint(self, path: Path) -> None:
        save_checkpoint_file(
            path, self.named_parameters(), self.named_buffers(), self.structural_hash()
        )


# ------------------------------------------------------------------------- optimizer streams


def _groups(groups) -> bytes:
    out = struct.pack("<I", len(groups))
    for lr, start, end in groups:
        out += struct.pack("<d", lr) + struct.pack("<q", start) + struct.pack("<q", end)
    return out


def _opt(t: torch.Tensor | None) -> bytes:
    return b"\0" if t is None else b"\1" + tensor_data(t)


def sgd_state(lr, weight_decay, velocity, groups=()) -> bytes:
    out = struct.pack("<I", len(velocity)) + struct.pack("<d", lr) + struct.pack("<d", weight_decay)
    return out + b"".join(_opt(v) for v in velocity) + _groups(groups)


def adam_state(lr, t, m, v, groups=()) -> bytes:
    out = struct.pack("<I", len(m)) + struct.pack("<d", lr) + struct.pack("<q", t)
    for mi, vi in zip(m, v, strict=True):
        out += _opt(mi) + _opt(vi)
    return out + _groups(groups)


def adamw_state(weight_decay, lr, t, m, v, groups=()) -> bytes:
    return struct.pack("<d", weight_decay) + adam_state(lr, t, m, v, groups)


def rmsprop_state(lr, alpha, eps, weight_decay, momentum, v, buf, groups=()) -> bytes:
    out = struct.pack("<I", len(v)) + struct.pack("<5d", lr, alpha, eps, weight_decay, momentum)
    for vi, bi in zip(v, buf, strict=True):
        out += _opt(vi) + _opt(bi)
    return out + _groups(groups)


def read_optimizer_state(kind: str, data: bytes) -> dict:
    """``load_state`` of the original's ``kind``: every field, and nothing may be left over."""
    c = Cursor(data)
    out: dict = {}
    if kind == "AdamW":
        out["weight_decay"] = c.f64()
        kind = "Adam"
    count = c.u32()
    out["lr"] = c.f64()
    if kind == "SGD":
        out["weight_decay"] = c.f64()
        out["velocity"] = [c.optional() for _ in range(count)]
    elif kind == "Adam":
        out["t"] = c.i64()
        pairs = [(c.optional(), c.optional()) for _ in range(count)]
        out["m"], out["v"] = [p[0] for p in pairs], [p[1] for p in pairs]
    else:
        for key in ("alpha", "eps", "weight_decay", "momentum"):
            out[key] = c.f64()
        pairs = [(c.optional(), c.optional()) for _ in range(count)]
        out["v"], out["buf"] = [p[0] for p in pairs], [p[1] for p in pairs]
    out["groups"] = [(c.f64(), c.i64(), c.i64()) for _ in range(c.u32())]
    if c.pos != len(data):
        raise ValueError(f"{len(data) - c.pos} bytes left over")
    return out
