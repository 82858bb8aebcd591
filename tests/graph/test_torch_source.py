"""The detailed layer mirrors are on exactly under the torch source they were checked against."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import flodl as fl
from flodl.graph import inline, torch_source
from tests.conftest import clean_env
from tests.graph.helpers import direct_source

MODULES = sorted({m for files in torch_source.SOURCES.values() for m in files})


@pytest.fixture
def torch_copy(tmp_path: Path) -> Path:
    """A directory holding a copy of the installed torch's files the fingerprints read."""
    for name in MODULES:
        source = Path(__import__(name, fromlist=["_"]).__file__)
        target = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return tmp_path


def _edit(root: Path, module: str, old: str, new: str) -> None:
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    assert text.count(old) >= 1, f"{old!r} is not in {module}"
    path.write_text(text.replace(old, new, 1))


def test_this_torchs_source_is_checked_for_every_group():
    """CI's torch has every group of mirrors on; a torch whose source differs fails here with
    the way to check it."""
    for group in torch_source.SOURCES:
        digest = torch_source.fingerprint(group)
        assert digest in torch_source.CHECKED[group], (
            f"torch {torch.__version__}: the {group} mirrors' source is new ({digest}). Compare"
            f" `python -m flodl.graph.torch_source --show {group}` with its output under a"
            " checked torch, run tests/graph under this one, then add the digest to CHECKED"
        )
        assert torch_source.mirrored(group)


def test_a_copy_of_this_torch_has_the_same_fingerprints(torch_copy):
    for group in torch_source.SOURCES:
        assert torch_source.fingerprint(group, torch_copy) == torch_source.fingerprint(group)


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        # comments, other definitions, formatting and type annotations do not run
        ("torch.nn.modules.rnn", "class LSTM(RNNBase):\n", "class LSTM(RNNBase):  # edited\n"),
        (
            "torch.nn.modules.activation",
            "class MultiheadAttention",
            "\n\n# note\nclass Mha2: ...\n\nclass MultiheadAttention",
        ),
        ("torch.nn.modules.transformer", "def _get_seq_len(", "def _get_seq_len(  \n    "),
        # annotations: torch 2.10 rewrote Optional[Tensor] as Tensor | None, 2.9 added -> None
        (
            "torch.nn.modules.rnn",
            "def _weights_have_changed(self):",
            "def _weights_have_changed(self) -> bool:",
        ),
        (
            "torch.nn.modules.rnn",
            "def check_input(self, input: Tensor, batch_sizes",
            "def check_input(self, input: 'torch.Tensor', batch_sizes",
        ),
        (
            "torch.nn.modules.activation",
            "self.bias_k = Parameter",
            "self.bias_k: Parameter = Parameter",
        ),
    ],
    ids=["comment", "unrelated-class", "formatting", "return-type", "argument-type", "assign-type"],
)
def test_what_is_not_code_does_not_change_a_fingerprint(torch_copy, module, old, new):
    before = {g: torch_source.fingerprint(g, torch_copy) for g in torch_source.SOURCES}
    _edit(torch_copy, module, old, new)
    assert {g: torch_source.fingerprint(g, torch_copy) for g in torch_source.SOURCES} == before


def test_a_docstring_and_quotes_do_not_change_a_fingerprint(torch_copy):
    path = torch_copy / "torch" / "nn" / "modules" / "rnn.py"
    tree = ast.parse(path.read_text())
    lstm = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LSTM")
    assert torch_source._is_docstring(lstm.body[0])  # LSTM has a docstring in torch
    lstm.body[0] = ast.Expr(ast.Constant("a different docstring"))
    method = next(n for n in lstm.body if isinstance(n, ast.FunctionDef))
    method.body.insert(0, ast.Expr(ast.Constant("a docstring added")))
    before = torch_source.fingerprint("rnn", torch_copy)
    # unparse rewrites every string's quoting and the file's whole layout
    path.write_text(ast.unparse(tree))
    assert torch_source.fingerprint("rnn", torch_copy) == before


@pytest.mark.parametrize(
    ("group", "module", "old", "new"),
    [
        ("attention", "torch.nn.modules.activation", "(self.num_heads % 2) != 0", "False"),
        (
            "rnn",
            "torch.nn.modules.rnn",
            "input.size(0) if self.batch_first",
            "input.size(1) if self.batch_first",
        ),
        (
            "encoder",
            "torch.nn.modules.transformer",
            "if self.norm_first:",
            "if not self.norm_first:",
        ),
        (
            "encoder",
            "torch.nn.modules.module",
            "if _global_forward_hooks or self._forward_hooks:",
            "if self._forward_hooks:",
        ),
    ],
    ids=["attention-fast-path", "rnn-layout", "encoder-norm", "call-hooks"],
)
def test_a_change_in_copied_code_turns_its_group_off(torch_copy, group, module, old, new):
    """A torch (a patch release, a backport, a local edit) that changes what a mirror copies
    turns that group off, and only that group."""
    _edit(torch_copy, module, old, new)
    torch_source.fingerprint(group, torch_copy)  # still reads: the edit is valid Python
    assert not torch_source.is_checked(group, torch_copy)
    for other in set(torch_source.SOURCES) - {group}:
        assert torch_source.is_checked(other, torch_copy)


def test_source_that_cannot_be_read_turns_its_group_off(torch_copy):
    (torch_copy / "torch" / "nn" / "modules" / "rnn.py").unlink()  # a build without .py files
    assert not torch_source.is_checked("rnn", torch_copy)
    _edit(torch_copy, "torch.nn.modules.activation", "def _is_make_fx_tracing(", "def _moved(")
    assert not torch_source.is_checked("attention", torch_copy)
    _edit(torch_copy, "torch.nn.modules.transformer", "class TransformerEncoder(", "class (")
    assert not torch_source.is_checked("encoder", torch_copy)
    for junk in (b"\xff\xfe compiled", b"x = 1\x00"):  # bytecode in its place, a NUL byte
        (torch_copy / "torch" / "nn" / "modules" / "activation.py").write_bytes(junk)
        assert not torch_source.is_checked("attention", torch_copy)


def _canonical(node: ast.AST) -> str:
    out: list[str] = []
    torch_source._canonical(node, out)
    return "".join(out)


def test_the_canonical_form_leaves_out_what_a_later_python_adds_empty():
    """Python 3.12 gave every function a ``type_params`` list, empty for ordinary code: fields
    left empty or unset are not part of the form (``decorator_list`` and ``returns`` here)."""
    function = ast.parse("def f(x):\n    return x\n").body[0]
    form = _canonical(function)
    assert "decorator_list" not in form and "returns" not in form and "name='f'" in form
    decorated = ast.parse("@g\ndef f(x) -> int:\n    return x\n").body[0]
    assert "decorator_list" in _canonical(decorated) and "returns" in _canonical(decorated)


def test_an_f_strings_literal_text_counts_however_it_is_split():
    """Pythons split an f-string's literal text into parts differently; the text counts."""
    whole = ast.parse("f'ab{x}c'").body[0]
    split = ast.parse("f'ab{x}c'").body[0]
    values = split.value.values  # type: ignore[attr-defined]
    split.value.values = [ast.Constant(""), ast.Constant("a"), ast.Constant("b"), *values[1:]]  # type: ignore[attr-defined]
    assert _canonical(split) == _canonical(whole)
    assert _canonical(ast.parse("f'ab{x}d'").body[0]) != _canonical(whole)


def test_an_unchecked_source_leaves_the_layers_their_own_forward(monkeypatch):
    """With the rnn group unchecked, an LSTM in a graph runs ``forward`` (on the direct path
    still), and an encoder layer in the same graph keeps its write-out."""
    monkeypatch.setitem(torch_source.CHECKED, "rnn", {})
    torch_source.mirrored.cache_clear()
    try:
        torch.manual_seed(0)
        lstm = nn.LSTM(4, 4, batch_first=True)
        layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, batch_first=True)
        graph = fl.FlowBuilder(lstm).through(fl.nn.Select(0)).through(layer).build().eval()
        source = direct_source(graph)
        assert "_m['lstm_1'].forward(input)" in source and "_encoder_layer(" in source
        x = torch.randn(2, 3, 4)
        with torch.no_grad():
            assert torch.equal(graph(x), layer(lstm(x)[0]))
    finally:
        monkeypatch.undo()
        torch_source.mirrored.cache_clear()
    assert "_rnn(" in direct_source(fl.FlowBuilder(nn.LSTM(4, 4, batch_first=True)).build())


def test_the_command_reports_each_group(capsys, torch_copy):
    assert torch_source.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("checked (as in torch") == len(torch_source.SOURCES)
    _edit(torch_copy, "torch.nn.modules.rnn", "input.size(0) if self", "input.size(1) if self")
    assert torch_source.main(["--root", str(torch_copy)]) == 1
    out = capsys.readouterr().out
    assert "rnn" in out and "NOT CHECKED: mirrors off" in out
    assert torch_source.main(["--show", "rnn", "--root", str(torch_copy)]) == 0
    shown = capsys.readouterr().out
    assert "class LSTM(RNNBase):" in shown and "input.size(1) if self" in shown
    assert '"""' not in shown  # docstrings left out
    # a directory that holds no torch: each group says so, nothing raises
    assert torch_source.main(["--root", str(torch_copy / "elsewhere")]) == 1
    out = capsys.readouterr().out
    assert out.count("UNREADABLE") == len(torch_source.SOURCES) and "rnn.py" in out
    assert torch_source.main(["--show", "encoder", "--root", str(torch_copy / "elsewhere")]) == 1
    assert capsys.readouterr().out.startswith("encoder: UNREADABLE (")


def test_inline_gates_exactly_the_detailed_mirrors():
    assert set(inline.MIRROR_GROUPS.values()) == set(torch_source.SOURCES)
    assert inline.checked(nn.Linear) and inline.checked(nn.LSTM)


def test_the_command_runs_as_a_module():
    """``python -m flodl.graph.torch_source``: importing flodl does not import the module first
    (runpy would warn that it runs a module already imported)."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "flodl.graph.torch_source"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"torch {torch.__version__}\n")
    assert done.stdout.count("checked (as in torch") == len(torch_source.SOURCES)
