"""``fdl port`` end to end: load, trace, translate, render, prove parity, write, report."""

from __future__ import annotations

import importlib.util
import inspect
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fdl.port.errors import ModeUnsupportedError, PortError, UnsupportedError
from fdl.port.load import (
    construct,
    example_inputs,
    find_class,
    import_script,
    parse_init,
)
from fdl.port.settings import as_json as settings_json
from fdl.port.settings import summary as settings_summary

if TYPE_CHECKING:
    from fdl.port.render import Source

DEFAULT_SEEDS = 2  # each example input is drawn under seeds 0 and 1


@dataclass
class Report:
    script: Path
    model: str
    output: Path
    written: bool = False
    translated: list[dict[str, str]] = field(default_factory=list)
    opaque: list[Any] = field(default_factory=list)
    build: str = ""
    parity: Any = None
    refused: str = ""
    unchanged: bool = False  # the output already held exactly this port: nothing to write
    fixed: dict[str, Any] = field(default_factory=dict)  # forward arguments frozen by the trace
    note: str = ""  # a caveat the parity proof cannot cover (the translation's order note)
    # shape tests the forward branched on, decided for the example and checked on every input
    checks: list[tuple[str, bool]] = field(default_factory=list)
    # settings the translated forward computes with as constants: flow(m) checks them
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.written or self.unchanged

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "script": str(self.script),
            "model": self.model,
            "output": str(self.output),
            "written": self.written,
            "unchanged": self.unchanged,
            "translated": self.translated,
            "opaque": [o.to_dict() for o in self.opaque],
            "build": self.build,
            "fixed": {k: repr(v) for k, v in self.fixed.items()},
            "parity": self.parity.to_dict() if self.parity is not None else None,
            "shape_checks": [{"test": test, "value": value} for test, value in self.checks],
            "settings": {path: settings_json(v) for path, v in self.settings.items()},
            **({"note": self.note} if self.note else {}),
            **({"refused": self.refused} if self.refused else {}),
        }


def default_output(script: Path) -> Path:
    return script.with_name(f"{script.stem}_flodl.py")


def _load_generated(text: str, script_dir: Path) -> Any:
    """Import the generated source as a module (the script's directory on the path)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "_fdl_port_generated.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("_fdl_port_generated", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["_fdl_port_generated"] = module
        spec.loader.exec_module(module)
    return module


def _shapes(module: Any) -> list[tuple[int, ...]]:
    return sorted(tuple(p.shape) for p in module.parameters())


def command_line(
    script: Path, model: str, init: str | None, exprs: list[str], seeds: int = DEFAULT_SEEDS
) -> str:
    parts = ["fdl", "port", script.name, "--model", model]
    if init is not None:
        parts += ["--init", init]
    for expr in exprs:
        parts += ["--example-input", expr]
    if seeds != DEFAULT_SEEDS:
        parts += ["--seeds", str(seeds)]
    return shlex.join(parts)


def port(
    script: Path,
    model: str,
    init: str | None,
    exprs: list[str],
    output: Path | None = None,
    force: bool = False,
    overwrite: bool = False,
    seeds: int = DEFAULT_SEEDS,
) -> Report:
    """Port ``model`` from ``script``; writes the file only when parity is exact (or ``force``),
    and replaces an existing file only with ``overwrite``."""
    import torch

    from fdl.port import parity as parity_mod
    from fdl.port import render, trace, translate

    output = output or default_output(script)
    earlier = None
    if not overwrite and (output.exists() or output.is_symlink()):
        # Before the work, unless the file is an earlier port of this model: a re-run that
        # would write the same bytes succeeds without --overwrite.
        earlier = _earlier_port(output, script, model)
        if earlier is None:
            raise _exists(output)
    report = Report(script, model, output)
    args, kwargs = parse_init(init)
    examples = example_inputs(exprs, seeds)
    module = import_script(script)
    cls = find_class(module, model, script)
    torch.manual_seed(0)  # the same weights on every run, whatever the examples drew
    original = construct(cls, args, kwargs, script)
    was_training = original.training
    paths = {id(m): path for path, m in original.named_modules()}
    before = parity_mod.attributes_of(original)
    for example in examples:
        try:
            with torch.no_grad():
                original.eval()
                torch.manual_seed(0)
                original(*example.args)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            drawn = f", seed {example.seed}" if example.seed else ""
            raise PortError(
                f"example input {example.number} ({exprs[example.number - 1]}{drawn}) "
                f"does not fit {model}: "
                f"{type(exc).__name__}: {first}",
                "pass an input of the shape the model expects",
            ) from None
        finally:
            original.train(was_training)
            # the tensors the run left on modules taken back (a scale cached on the first
            # call): the port is traced from the model as constructed
            parity_mod.left_by_forward(original, paths, before)

    n_args = max(len(e.args) for e in examples)
    where = f"{script.name}:{_forward_line(cls)}"
    longest = max((e.args for e in examples), key=len)
    others = _other_shapes(longest, [e.args for e in examples])
    arg_names = [p.name for p in inspect.signature(original.forward).parameters.values()]
    # modules whose training-only operations are not written out (None: none are)
    whole_by_mode: set[str] | None = set()
    source: Source
    while True:  # each retry keeps more whole: a module, then every module by mode
        translation = None
        try:
            gm, opaque = trace.trace(original, n_args, longest, whole_by_mode, others)
        except Exception as exc:  # the tracer itself broke: keep the model whole
            gm, opaque = None, [trace.Opaque("", cls.__name__, where, trace.reason(exc))]
        finally:
            original.train(was_training)
        if gm is not None:
            report.fixed = trace.concrete_args(original, n_args)
            try:
                kinds = translate.value_kinds(gm, longest)
                names = translate.returned_names(cls.forward)
                translation = translate.Translator(gm, original, kinds, names).translate()
            except UnsupportedError as exc:
                if isinstance(exc, ModeUnsupportedError) and whole_by_mode is not None:
                    owner = trace.owner_of(original, exc.node)
                    if owner not in whole_by_mode:
                        whole_by_mode.add(owner)  # that module is kept whole: trace again
                        continue
                reason = f"not expressible as builder calls: {exc}"
                opaque = [trace.Opaque("", cls.__name__, where, reason)]
            except Exception as exc:
                reason = f"the translation failed: {trace.reason(exc)}"
                opaque = [trace.Opaque("", cls.__name__, where, reason)]
        while True:
            source = _source(cls, module, translation is not None)
            if not source.constructs_original and translation is not None:
                source = _with_declared(source, gm, cls)
            opaque_inputs = _opaque_inputs(original) if translation is None else []
            settings = _settings(gm) if translation is not None else {}

            def rendered(
                header: list[str],
                translation=translation,
                source=source,
                inputs=opaque_inputs,
                settings=settings,
            ) -> str:
                return render.render(
                    translation,
                    source,
                    class_name=cls.__name__,
                    script_name=script.name,
                    header=header,
                    opaque_inputs=inputs,
                    settings=settings,
                )

            try:
                generated = _load_generated(rendered([]), script.resolve().parent)
                graph = generated.from_torch(original)
                break
            except Exception as exc:
                if translation is None:
                    raise PortError(
                        f"the port of {cls.__name__} kept whole failed: {type(exc).__name__}: {exc}"
                    ) from None
                # a chain flodl refuses is a gap in the translation: keep the model whole instead
                reason = f"the translated chain failed: {type(exc).__name__}: {exc}"
                opaque = [trace.Opaque("", cls.__name__, where, reason.splitlines()[0])]
                translation = None
        report.opaque = opaque
        report.translated = translation.steps if translation is not None else []
        report.note = _notes(translation, gm)
        if translation is None and opaque_inputs:
            report.fixed = {}  # the model kept whole takes every argument itself

        def graph_call(
            graph: Any,
            call_args: tuple[Any, ...],
            whole: bool = translation is None and not opaque_inputs,
        ) -> Any:
            if whole:  # the model kept whole takes its arguments as the original does
                return graph(*call_args)
            aux = dict(zip(arg_names[1:], call_args[1:], strict=False))
            return graph(call_args[0], **aux)

        report.parity = parity_mod.check(original, graph, examples, graph_call)
        if translation is not None and not report.parity.exact and not translation.strict:
            # a difference no layout check foresaw: in the original's order of operations,
            # autograd runs the backward (and sums each gradient) as it does for the original
            retry = _ordered_retry(
                gm, original, kinds, names, rendered, script, examples, graph_call
            )
            if retry is not None:
                translation, generated, graph, report.parity = retry
                report.translated = translation.steps
                report.note = _notes(translation, gm)

        if (
            whole_by_mode is not None
            and trace.has_one_mode_operations(gm)
            and (translation is None or not report.parity.exact)
        ):
            whole_by_mode = None  # what runs in training only did not port: keep it whole
            continue
        break
    if not source.constructs_original:
        problem = _build_problem(generated, args, kwargs, original)
        if problem:
            source = render.original_source(cls, module, problem)
    report.build = (
        f"constructs the original {cls.__name__}: {source.note}"
        if source.constructs_original
        else f"{cls.__name__}.__init__, self renamed to {source.holder}"
    )
    header = [
        f"# Ported from {script.name} (class {cls.__name__}) by:",
        f"#   {command_line(script, model, init, exprs, seeds)}",
        f"# Parity: {report.parity.summary()}.",
    ]
    if report.fixed:
        header.append("# Fixed while tracing (always these values; not inputs of the graph): " + ", ".join(
            f"{k}={v!r}" for k, v in report.fixed.items()))  # fmt: skip
    report.checks = translation.checks if translation is not None else []
    report.settings = settings  # (those of the translation kept, as rendered)
    if report.checks:
        header.append("# Decided for the example, checked on every input: " + "; ".join(
            f"{test} is {value}" for test, value in report.checks))  # fmt: skip
    if report.note:
        header.append(f"# Note: {report.note}.")
    if opaque:
        header.append("# Opaque (kept whole): " + "; ".join(
            f"{label} ({o.location})" for label, o in opaque_groups(opaque)))  # fmt: skip
    text = rendered(header, translation=translation, source=source, inputs=opaque_inputs)
    needs = sorted({line.split()[3].rstrip(",") for line in source.imports
                    if line.startswith(f"from {module.__name__} import ")})  # fmt: skip
    if needs:
        text = text.replace(
            f'"""flodl port of {cls.__name__}',
            f"# Imports {', '.join(needs)} from {script.name}: keep it importable (same folder).\n"
            f'"""flodl port of {cls.__name__}',
            1,
        )
    if not report.parity.exact and not force:
        report.refused = "parity is not exact: nothing written (use --force to write anyway)"
        return report
    if earlier is not None:
        if text != earlier:  # edited since, or the model changed: the user decides
            raise _exists(output)
        report.unchanged = True
        return report
    try:
        # "x": a file that appeared while the port ran is refused too, never replaced
        with open(output, "w" if overwrite else "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise _exists(output) from None
    except OSError as exc:
        raise PortError(f"cannot write {output}: {exc.strerror or exc}") from None
    report.written = True
    return report


def _other_shapes(traced: tuple[Any, ...], examples: list[tuple[Any, ...]]) -> list[Any]:
    """One example of each other shape among ``examples`` with as many arguments as
    ``traced``: what decides a test on shapes must decide it as ``traced`` does."""

    def shapes(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else repr(a) for a in args)

    found = {shapes(traced): traced}
    for args in examples:
        if len(args) == len(traced):
            found.setdefault(shapes(args), args)
    return list(found.values())[1:]


def _settings(gm: Any) -> dict[str, Any]:
    """The settings the traced forward read (see :mod:`fdl.port.settings`)."""
    from fdl.port.trace import SETTINGS

    return dict(gm.meta.get(SETTINGS, {})) if gm is not None else {}


def _with_declared(source: Source, gm: Any, cls: type) -> Source:
    """``source`` whose holder also has the settings the model's class declares and its forward
    reads (``scale = 0.5`` in the class body): the original instance sees them, and
    ``flow(m)`` checks them."""
    from dataclasses import replace

    from fdl.port.trace import DECLARED
    from fdl.port.translate import literal

    settings = _settings(gm)
    declared = [name for name in settings if name in gm.meta.get(DECLARED, ()) and "." not in name]
    lines = [
        f"{source.holder}.{name} = {literal(settings[name])}  # declared on {cls.__name__}"
        for name in declared
    ]
    return replace(source, body=[source.body[0], *lines, *source.body[1:]]) if lines else source


def _source(cls: type, module: Any, translated: bool) -> Source:
    """How the port builds the model: ``__init__`` copied when the forward was translated,
    else the original constructed."""
    from fdl.port import render

    if not translated:
        return render.original_source(cls, module, "the forward stays opaque")
    try:
        return render.init_source(cls, module)
    except (SyntaxError, ValueError, TypeError) as exc:
        return render.original_source(cls, module, f"__init__ cannot be copied: {exc}")


def _ordered_retry(
    gm: Any,
    original: Any,
    kinds: dict[Any, str],
    names: list[str | None],
    rendered: Any,
    script: Path,
    examples: list[Any],
    graph_call: Any,
) -> tuple[Any, Any, Any, Any] | None:
    """The translation laid out in the original's order of operations, its module, graph and
    parity, when that parity is exact (None otherwise)."""
    from fdl.port import parity as parity_mod
    from fdl.port import translate

    try:
        translator = translate.Translator(gm, original, kinds, names, fold=False)
        translation = translator.translate(ordered=True)
        generated = _load_generated(rendered([], translation=translation), script.resolve().parent)
        graph = generated.from_torch(original)
    except Exception:  # no such layout: the first one stands, with its result
        return None
    parity = parity_mod.check(original, graph, examples, graph_call)
    return (translation, generated, graph, parity) if parity.exact else None


def _earlier_port(output: Path, script: Path, model: str) -> str | None:
    """The text of ``output`` when it is a regular file that a port of ``model`` from ``script``
    wrote (its first line says so), else None."""
    if output.is_symlink() or not output.is_file():
        return None
    try:
        text = output.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    first = text.split("\n", 1)[0]
    return text if first == f"# Ported from {script.name} (class {model}) by:" else None


def _exists(output: Path) -> PortError:
    """A port never silently replaces a file: it may hold the user's edits of an earlier one."""
    return PortError(
        f"{output} already exists",
        "pass --overwrite to replace it (edits made to it are lost), or -o another file",
    )


def _opaque_inputs(model: Any) -> list[tuple[str, Any]]:
    """The forward's arguments after the first, as graph inputs of a model kept whole."""
    from fdl.port.translate import NO_DEFAULT, literal
    from flodl.graph.codegen import RESERVED_NAMES

    try:
        params = list(inspect.signature(model.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return []
    inputs = []
    for p in params:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return []
        if p.name in RESERVED_NAMES or p.name.startswith("_") or not p.name.isidentifier():
            return []
        if p.default is not p.empty:
            try:
                literal(p.default)
            except UnsupportedError:
                return []
        inputs.append((p.name, NO_DEFAULT if p.default is p.empty else p.default))
    return inputs


def _forward_line(cls: Any) -> int:
    try:
        return inspect.getsourcelines(cls.forward)[1]
    except (OSError, TypeError):
        return 0


def _build_problem(generated: Any, args: tuple, kwargs: dict, original: Any) -> str:
    """Why ``build(...)`` from the copied ``__init__`` does not give the original's layers."""
    try:
        graph = generated.build(*args, **kwargs)
    except Exception as exc:
        return f"build() from the copied __init__ failed: {type(exc).__name__}: {exc}"
    if _shapes(graph) != _shapes(original):
        return "build() from the copied __init__ does not make the original's parameters"
    return ""


def opaque_groups(opaque: list[Any]) -> list[tuple[str, Any]]:
    """The parts kept whole, the instances of one class kept for one reason as one entry:
    ``(label, first part)``, the label ``"blocks.0.bn and 11 more"``."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for o in opaque:
        groups.setdefault((o.cls, o.location, o.reason), []).append(o)
    labels = []
    for parts in groups.values():
        first = parts[0]
        more = f" and {len(parts) - 1} more" if len(parts) > 1 else ""
        labels.append((f"{first.path or first.cls}{more}", first))
    return labels


def render_report(report: Report) -> str:
    lines = [f"fdl port: {report.model} from {report.script.name}"]
    if report.translated:
        lines.append(f"  translated: {len(report.translated)} operations")
        for step in report.translated:
            lines.append(f"    {step['node']:<20} {step['original']:<28} -> {step['as']}")
    for label, o in opaque_groups(report.opaque):
        lines.append(f"  opaque: {label} ({o.cls}) at {o.location}: {o.reason}")
    for name, value in report.fixed.items():
        lines.append(
            f"  fixed: {name}={value!r} (no example passes it; the port always uses this value "
            "and does not take it — add an --example-input that passes it to keep it an input)"
        )
    if report.checks:
        tests = "; ".join(f"{test} is {value}" for test, value in report.checks)
        lines.append(
            f"  checked: {tests} (branches decided for the example; an input taking another "
            "raises ValueError)"
        )
    if report.settings:
        lines.append(
            f"  settings: {settings_summary(report.settings)} (the forward computes with these "
            "as constants: flow() refuses a module with other values)"
        )
    lines.append(f"  build(): {report.build}")
    if report.parity is not None:
        lines.append(f"  parity: {report.parity.summary()}")
        if report.note:
            lines.append(f"  note: {report.note}")
        for case in report.parity.cases:
            if not case.exact:
                d = case.to_dict()
                detail = d.get("error") or ", ".join(
                    f"{k} {v:.3g}" for k, v in d["max_abs_diff"].items() if v
                )
                seed = f" seed {case.seed}" if case.seed else ""
                lines.append(f"    example {case.example}{seed} {case.mode}: {detail}")
    if report.written:
        lines.append(f"  wrote {report.output}")
    elif report.unchanged:
        lines.append(f"  {report.output} is up to date: it holds this port already")
    elif report.refused:
        lines.append(f"  {report.refused}")
    return "\n".join(lines)


def _notes(translation: Any, gm: Any) -> str:
    """The caveats the parity proof cannot cover: the translation's order note, and the
    activation checkpointing the port does not keep."""
    from fdl.port import trace

    if translation is None:  # the model kept whole runs its own forward, checkpoints included
        return ""
    return "; ".join(n for n in (translation.order_note, trace.checkpointing_note(gm)) if n)
