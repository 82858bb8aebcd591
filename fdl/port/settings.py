"""The settings a forward reads while traced, and the check that a port is used with them.

A forward that reads a plain setting of its module (``self.heads``, ``self.eps``,
``self.causal``) computes with its value: fx records ``x.view(b, t, 4, c // 4)``, not
``self.heads``, and a branch on ``self.causal`` is decided. The port is then written for those
values, while ``build(heads=8)`` and ``from_torch(model_with_8_heads)`` accept a module with
others and would compute something else, with no error. So while the tracer runs, every plain
setting a traced forward reads is recorded (an attribute of the module, or a public one declared
on its class, whose value is a number, a string, a bool, None, a dtype, a device, an enum
member, or a tuple or list of them), and the port's ``flow(m)`` checks each against ``m`` first: a module with another value
is refused.

A config object a module holds (a dataclass instance such as nanoGPT's ``GPTConfig``, an
``argparse`` namespace, transformers' ``PretrainedConfig``) is watched the same way:
``self.config.block_size`` is the setting ``config.block_size``. A class with a lookup of its own
(transformers' configs map ``num_attention_heads`` to ``n_head``) is watched through it.

Not recorded: ``training`` (the port follows the graph's mode), an attribute the forward assigns
(a call counter is state, not a setting), torch's own bookkeeping on every module, values of
other types (an enum defined inside a function or a class, which the port cannot import), other config objects (OmegaConf's keep their values outside
the instance), a value computed on each read (a property, an alias mapped by the class's own
lookup: the attribute it reads is recorded when it is read as itself), and a setting read only
by a module kept whole (its ``forward`` runs with its own values).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import enum
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

SETTINGS_HELPER = '''
def settings_checked(m, settings):
    """``m``, once each setting its forward read as a constant when it was ported has that
    value (``settings``: holder path -> {name: value}): this port is written for those values,
    so a module with another is an error, never a graph that computes something else."""
    for owner, values in settings.items():
        holder = m  # a submodule, or a config object one holds (``config``)
        for part in owner.split(".") if owner else ():
            holder = getattr(holder, part)
        for name, expected in values.items():
            found = getattr(holder, name, settings_checked)
            if type(found) is not type(expected) or not (
                found == expected or (found != found and expected != expected)  # NaN is NaN
            ):
                path = f"{owner}.{name}" if owner else name
                has = (
                    f"no {path}" if found is settings_checked else f"{path}={shown_setting(found)}"
                )
                raise ValueError(
                    f"this port is written for {path}={shown_setting(expected)} (its forward "
                    "computes with it as a constant), and this module has "
                    f"{has}: port again from a model built with these settings"
                )
    return m


def shown_setting(value):
    """``value`` as written in Python: an enum member by its name (``Pool.MEAN``)."""
    if hasattr(type(value), "__members__"):
        return f"{type(value).__qualname__}.{value.name}"
    return repr(value)
'''
_helper: dict[str, Any] = {"__name__": __name__}
exec(SETTINGS_HELPER, _helper)  # our own source, above: the check the port writes, to run here
settings_checked = _helper["settings_checked"]

# torch's own per-module bookkeeping (``training``, ``_parameters``, ``_compiled_call_impl``...):
# read by every call, never a setting of the model's
_INTERNAL = frozenset(vars(nn.Module()))


def is_setting(value: Any) -> bool:
    """A value the port can write and compare: a number, a string, a bool, None, a dtype, a
    device, a member of an enum the port can import, or a tuple or list of them (exact types: a
    subclass, as numpy's scalars are, may not compare back)."""
    kind = type(value)
    if kind is tuple or kind is list:
        return all(is_setting(v) for v in value)
    return (
        value is None
        or kind in (bool, int, float, str, torch.dtype, torch.device)
        or (_importable_enum(value))
    )


def _importable_enum(value: Any) -> bool:
    """A member of an enum class defined at the top level of an importable module (the script
    itself, imported under its stem, or a library): the port imports the class by name."""
    if not isinstance(value, enum.Enum):
        return False
    cls = type(value)
    module = sys.modules.get(cls.__module__)
    return (
        cls.__module__ != "__main__"
        and "." not in cls.__qualname__
        and getattr(module, cls.__qualname__, None) is cls
    )


def imports(settings: dict[str, Any]) -> set[str]:
    """The import lines the port's ``SETTINGS`` need: the enum classes of its values."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if type(value) in (tuple, list):
            for v in value:
                visit(v)
        elif isinstance(value, enum.Enum):
            found.add(f"from {type(value).__module__} import {type(value).__qualname__}")

    for value in settings.values():
        visit(value)
    return found


class SettingReads:
    """The settings read on the modules of ``root`` (and on the config objects they hold) while
    :meth:`recording` is on, as ``{"path.to.module.name": value}`` in the order first read
    (:attr:`found`); a config object's settings by its attribute's path,
    ``"config.block_size"``."""

    def __init__(self, root: nn.Module) -> None:
        self.paths = {id(m): path for path, m in root.named_modules()}
        self.classes = {type(m) for m in root.modules()}
        for path, module in root.named_modules():  # config objects held by a module
            for name, value in vars(module).items():
                if _is_config(value) and id(value) not in self.paths:
                    self.paths[id(value)] = f"{path}.{name}" if path else name
                    self.classes.add(type(value))
        self.found: dict[str, Any] = {}
        self.declared: set[str] = set()  # the paths in found read from a class declaration
        self.written: set[str] = set()  # the paths the forward assigns: its state, not settings
        self.on = False

    def read(self, owner: Any, name: str, value: Any) -> None:
        path = self.paths.get(id(owner))
        if path is None or name in _INTERNAL or not is_setting(value):
            return
        key = f"{path}.{name}" if path else name
        if key in self.found:
            return
        if name in object.__getattribute__(owner, "__dict__"):
            self.found[key] = copy.deepcopy(value)
        elif _class_setting(owner, name):
            self.found[key] = copy.deepcopy(value)
            self.declared.add(key)

    def wrote(self, owner: Any, name: str) -> None:
        """The forward assigned ``owner.name`` (``self.calls += 1``): a value it keeps as
        state, which no check may pin to the value it had when traced."""
        path = self.paths.get(id(owner))
        if path is not None:
            self.written.add(f"{path}.{name}" if path else name)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record the reads until the block ends. Each class of the tree (and of the config
        objects) gets a ``__getattribute__`` that looks up as the class did (its own lookup, if it
        has one) and reports plain reads (built-in classes are left alone); the classes are
        given back as they were, whatever happens."""
        with lookups_wrapped(self.classes, lambda lookup: _reader(self, lookup)):
            self.on = True
            try:
                yield
            finally:
                self.on = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No reads recorded in the block (the tracer running a kept-whole module on fakes)."""
        was, self.on = self.on, False
        try:
            yield
        finally:
            self.on = was


def _is_config(value: Any) -> bool:
    """An object a module holds for its settings: a dataclass instance (nanoGPT's
    ``GPTConfig``), an ``argparse`` namespace or a transformers config (a dataclass from
    transformers 5 on). Other objects (a logger, a tokenizer) are not watched: their reads are
    not settings."""
    if isinstance(value, type):
        return False
    return (
        dataclasses.is_dataclass(value)
        or isinstance(value, argparse.Namespace)
        or any(
            k.__name__ == "PretrainedConfig" and k.__module__.startswith("transformers.")
            for k in type(value).__mro__
        )  # transformers' model config, without importing transformers
    )


def _class_setting(module: Any, name: str) -> bool:
    """``name`` is a plain setting declared on the module's class (``heads = 4`` in the class
    body), read where the instance sets none: an instance that sets one later must be
    checked too. Not a name of torch's classes, nor a private one (``_version``)."""
    if name.startswith("_"):
        return False
    for cls in type(module).__mro__:
        if name in vars(cls):
            return not cls.__module__.startswith("torch.") and is_setting(vars(cls)[name])
    return False


@contextlib.contextmanager
def lookups_wrapped(classes: Iterable[type], wrap: Callable[[Any], Any]) -> Iterator[None]:
    """Each class of ``classes`` gets ``wrap(its lookup)`` as its ``__getattribute__`` until
    the block ends (built-in classes are left alone), and back what it had, whatever happens.
    The lookups are resolved before any class is patched (a class and its base may both be
    among them); one already wrapped is wrapped again, so wrappers compose."""
    lookups = [(cls, cls.__getattribute__, vars(cls).get("__getattribute__")) for cls in classes]
    patched = []
    try:
        for cls, lookup, own in lookups:
            with contextlib.suppress(TypeError):  # a built-in class takes no attribute
                cls.__getattribute__ = wrap(lookup)  # type: ignore[method-assign]
                patched.append((cls, own))
        yield
    finally:
        for cls, own in patched:
            if own is None:
                del cls.__getattribute__
            else:
                cls.__getattribute__ = own  # type: ignore[method-assign]


def _reader(reads: SettingReads, lookup: Any) -> Any:
    """A ``__getattribute__`` that looks up as ``lookup`` (the class's own) and reports."""

    def __getattribute__(module: Any, name: str) -> Any:
        value = lookup(module, name)
        if reads.on:
            reads.read(module, name, value)
        return value

    return __getattribute__


def lines(settings: dict[str, Any], literal: Any) -> list[str]:
    """``SETTINGS = {...}`` for the port: one line a module, its settings in the order read."""
    if not settings:
        return []
    by_owner: dict[str, dict[str, Any]] = {}
    for path, value in settings.items():
        owner, _, name = path.rpartition(".")
        by_owner.setdefault(owner, {})[name] = value

    def text(value: Any) -> str:  # strings quoted as the formatted port quotes them
        if type(value) is str:
            return json.dumps(value)
        if isinstance(value, enum.Enum):  # its class imported by the port (imports())
            return f"{type(value).__qualname__}.{value.name}"
        if isinstance(value, torch.device):
            return f"torch.device({json.dumps(str(value))})"
        if type(value) in (tuple, list):
            items = [text(v) for v in value]
            if type(value) is list:
                return "[" + ", ".join(items) + "]"
            return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        return literal(value)

    body = [
        f"    {text(owner)}: {{"
        + ", ".join(f"{text(n)}: {text(v)}" for n, v in values.items())
        + "},"
        for owner, values in by_owner.items()
    ]
    return [
        "# The settings the forward computes with as constants, by module: this port is written",
        "# for these values, and flow() refuses a module with others.",
        "# fmt: off",
        "SETTINGS = {",
        *body,
        "}",
        "# fmt: on",
    ]


def as_json(value: Any) -> Any:
    """``value`` as JSON holds it: a dtype or a device as its name (``"torch.float64"``,
    ``"cpu"``), an enum member as ``"Pool.MEAN"``, an infinite or NaN float as its repr
    (``"inf"``), a tuple as a list."""
    if type(value) in (tuple, list):
        return [as_json(v) for v in value]
    if isinstance(value, torch.dtype | torch.device):
        return str(value)
    if isinstance(value, enum.Enum):
        return str(_shown(value))
    if type(value) is float and not math.isfinite(value):
        return repr(value)
    return value


class _Named(str):
    """A name shown as it is written (``Pool.MEAN``), not quoted."""

    def __repr__(self) -> str:
        return str(self)


def _shown(value: Any) -> Any:
    """``value`` as the report shows it: an enum member by its name (``Pool.MEAN``)."""
    if isinstance(value, enum.Enum):
        return _Named(f"{type(value).__qualname__}.{value.name}")
    if type(value) in (tuple, list):
        return type(value)(_shown(v) for v in value)
    return value


def summary(settings: dict[str, Any], shown: int = 6) -> str:
    """``heads=4, eps=1e-05`` (the first ``shown``, then how many more)."""
    listed = [f"{path}={_shown(value)!r}" for path, value in settings.items()]
    more = len(listed) - shown
    text = ", ".join(listed[:shown])
    return f"{text} and {more} more" if more > 0 else text


__all__ = [
    "SETTINGS_HELPER",
    "SettingReads",
    "as_json",
    "imports",
    "is_setting",
    "lines",
    "lookups_wrapped",
    "settings_checked",
    "summary",
]
