"""The pieces of `fdl check` that make it see the whole script: binding a call to a signature
read from source, and which loops the smoke budget shortens (and which it must not)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys

import pytest

from fdl.porting.calls import call_problem, parse_signature
from fdl.porting.smoke import RUNNER, run_smoke
from tests.porting.support import live_api


def problem(sig: str, call: str):
    params = parse_signature(sig)
    assert params is not None
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call)
    return call_problem(params, node, "f")


@pytest.mark.parametrize(
    ("sig", "call", "expected"),
    [
        ("(path, *, checksum=True, compress=None)", "f('x', compress=True)", None),
        ("(path, *, checksum=True, compress=None)", "f('x', True)", "takes 1 positional argument"),
        ("(path, *, checksum=True, compress=None)", "f('x', compression=1)", "unexpected keyword argument 'compression'"),
        ("(path, *, checksum=True, compress=None)", "f()", "missing required argument: 'path'"),
        ("(a, b=1)", "f(1, a=2)", "multiple values for argument 'a'"),
        ("(a, /, b)", "f(a=1, b=2)", "unexpected keyword argument 'a'"),
        ("(*tensors, **named)", "f(1, 2, x=3)", None),
        ("(a, *, k)", "f(1)", "missing required argument: 'k'"),
        ("(a, b)", "f(*args)", None),  # unknowable arity: keywords only are checked
        ("(a, b)", "f(**kw)", None),
        ("(self, a) -> int", "f(1)", None),  # self is bound already
        ("from_tensors(*tensors: torch.Tensor, **named: torch.Tensor) -> DataLoaderBuilder", "f(x=1)", None),
    ],
)  # fmt: skip
def test_a_call_binds_like_python_would(sig, call, expected):
    if sig.startswith("from_tensors"):
        sig = sig[sig.index("(") :]
    result = problem(sig, call)
    if expected is None:
        assert result is None
    else:
        assert result is not None and expected in result[0]


def test_an_unexpected_keyword_suggests_the_close_one():
    message, suggestions = problem("(path, *, checksum=True, compress=None)", "f('x', compres=1)")
    assert (
        suggestions == ["compress="]
        and "its keyword arguments: checksum, compress, path" in message
    )


def test_a_signature_that_does_not_parse_is_unknown():
    assert parse_signature("not a signature") is None
    assert parse_signature("(a, b=<object object at 0x1>)") is None


def _runner():
    spec = importlib.util.spec_from_file_location("fdl_smoke_runner_under_test", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def capped_lines(source: str) -> list[int]:
    """Lines of the loops the runner shortens."""
    runner = _runner()
    tree = ast.parse(source)
    training = runner._training_functions(tree)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.For | ast.While) and runner._shaped_like_training(node, training)
    )


def test_training_loops_are_shortened_and_model_loops_are_not():
    source = (
        "class Model:\n"  # 1
        "    def forward(self, x):\n"
        "        for t in range(x.size(1)):\n"  # 3: a model's time loop: never
        "            x = self.cell(x)\n"
        "        return x\n"
        "\n"
        "def train_epoch(model, opt):\n"  # 7
        "    for x, y in data:\n"  # 8: calls .backward()/.step()
        "        opt.zero_grad(); model(x).backward(); opt.step()\n"
        "\n"
        "layers = [make(i) for i in range(4)]\n"
        "for i in range(4):\n"  # 12: building layers: never
        "    layers.append(i)\n"
        "for epoch in range(args.epochs):\n"  # 14: named like epochs, calls a training function
        "    train_epoch(model, opt)\n"
        "for batch in test_loader:\n"  # 16: a loader
        "    evaluate(batch)\n"
        "while step < args.max_steps:\n"  # 18: steps
        "    step += 1\n"
        "for value in torch.log(values):\n"  # 20: torch.log is not Monitor.log
        "    print(value)\n"
    )
    assert capped_lines(source) == [8, 14, 16, 18]


def test_the_budget_counts_and_reports_what_it_shortened(tmp_path):
    script = tmp_path / "loops.py"
    script.write_text(
        "n = 0\n"
        "for epoch in range(10):\n"
        "    n += 1\n"
        "for epoch in range(2):\n"  # exactly the budget: nothing was cut
        "    n += 1\n"
        "step = 0\n"
        "while step < 50:\n"
        "    step += 1\n"
        "print('total', n, step)\n"
    )
    result = run_smoke(script, timeout=60)
    assert result.status == "passed", result.output_tail
    assert result.output_tail == ["total 4 2"]
    assert result.shortened_loops == [2, 7]
    assert 9 in result.lines and 3 in result.lines


def test_the_runner_keeps_main_semantics(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(
        "import pickle, sys\n"
        "class Point:\n    pass\n"
        "assert __name__ == '__main__' and __file__.endswith('main.py')\n"
        "assert pickle.loads(pickle.dumps(Point())).__class__.__name__ == 'Point'\n"
        "print(sys.argv[1:])\n"
    )
    result = run_smoke(script, timeout=60, args=["--flag"])
    assert result.status == "passed", result.output_tail
    assert result.output_tail == ["['--flag']"]


def test_a_compile_error_is_located_in_the_script(tmp_path):
    script = tmp_path / "late.py"
    script.write_text("import os\nfrom __future__ import annotations\n")
    result = run_smoke(script, timeout=60)
    assert result.status == "failed"
    assert result.exception["type"] == "SyntaxError"
    assert result.location["line"] == 2


def test_the_static_pass_follows_the_scripts_functions_and_loops():
    from fdl.porting.static import analyse

    source = (
        "import torch\nimport flodl as fl\nfrom torch import nn\n"
        "def main():\n"
        "    model = make()\n"  # 5: make is defined below main
        "    model.freeze('x', strict=True)\n"  # 6
        "def make():\n"
        "    return fl.FlowBuilder(nn.Linear(2, 2)).build()\n"
        "loader = fl.data.DataLoader.from_tensors(x=torch.zeros(4, 2)).batch_size(2)\n"
        "loader = loader.drop_last(False).shuffle(False).build()\n"
        "for i, batch in enumerate(loader):\n"
        "    batch.to_dict(1)\n"  # 12: to_dict takes no argument
    )
    findings, _, sites = analyse(source, "s.py", live_api())
    rendered = [f.render() for f in findings]
    assert any(r.startswith("s.py:6:5: error[bad-call]") and "'strict'" in r for r in rendered)
    assert any(r.startswith("s.py:12:5: error[bad-call]") for r in rendered), rendered
    assert all(site.verified for site in sites)


def test_the_runner_is_stdlib_only():
    # the child never imports fdl: the runner must run in a bare interpreter
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import runpy; runpy.run_path({str(RUNNER)!r}, run_name='x')",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
