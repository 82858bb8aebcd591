"""Static extraction of a package's public API (a miniature flodl under fixtures/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from fdl.apiref.extract import extract
from fdl.apiref.model import ApiReference
from fdl.apiref.source import PackageSource, find_source
from fdl.errors import FdlError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "fdl" / "apiref" / "schema.json").read_text()
)


@pytest.fixture(scope="module")
def mini() -> ApiReference:
    return extract(find_source(FIXTURES / "mini"))


def entry(ref: ApiReference, path: str):
    return next(e for e in ref.entries if e.path == path)


def test_star_reexports_become_one_entry_with_aliases(mini):
    fb = entry(mini, "flodl.FlowBuilder")
    assert fb.defined_at == "flodl.graph.builder.FlowBuilder"
    assert fb.aliases == ["flodl.graph.FlowBuilder"]
    assert [e.path for e in mini.entries].count("flodl.FlowBuilder") == 1
    assert fb.category == "graph"
    assert fb.file == "flodl/graph/builder.py"


def test_builder_methods_constructors_and_methods_are_classified(mini):
    fb = entry(mini, "flodl.FlowBuilder")
    assert [m.name for m in fb.builder_methods] == ["through", "also", "tag", "build"]
    assert [m.name for m in fb.methods] == ["loop_body"]
    assert [c.sig for c in fb.constructors] == [
        "FlowBuilder(entry: nn.Module | None = None)",
        "FlowBuilder.from_modules(*modules: nn.Module) -> FlowBuilder",
    ]
    assert "_private_helper" not in fb.members()
    assert fb.builder_methods[-1].returns_type == "flodl.graph.graph.Graph"


def test_classes_returned_by_the_api_are_included_but_not_exported(mini):
    loop = entry(mini, "flodl.graph.builder._LoopBuilder")
    assert loop.exported is False
    assert {m.name: m.returns_type for m in loop.methods} == {
        "for_n": "flodl.graph.builder.FlowBuilder",
        "while_cond": "flodl.graph.builder.FlowBuilder",
    }


def test_docstrings_examples_enums_properties_and_dataclasses(mini):
    fb = entry(mini, "flodl.FlowBuilder")
    assert fb.doc == "Describe a network as a flow of modules."
    assert fb.examples == [
        "model = FlowBuilder(nn.Linear(2, 4)).through(nn.ReLU()).build()",
        ">>> FlowBuilder().build()\nGraph()",
    ]
    merge = entry(mini, "flodl.MergeOp")
    assert [(a.name, a.sig) for a in merge.attributes] == [
        ("ADD", " = 'add'"),
        ("MEAN", " = 'mean'"),
    ]
    graph = entry(mini, "flodl.Graph")
    assert graph.bases == ["torch.nn.Module"]
    assert [(a.name, a.kind) for a in graph.attributes] == [("label", "property")]
    step = entry(mini, "flodl.optim.StepDecay")
    assert step.signature == "(base_lr: float, step_size: int, gamma: float = 0.1)"


def test_functions_signatures_and_namespaces(mini):
    focal = entry(mini, "flodl.nn.functional.focal_loss")
    assert focal.kind == "function" and focal.category == "nn"
    assert focal.signature.startswith("(pred: torch.Tensor, target: torch.Tensor, *, alpha")
    assert (
        entry(mini, "flodl.optim.set_lr").signature == "(optimizer: object, lr: float, /) -> None"
    )
    assert entry(mini, "flodl.save_checkpoint").category == "checkpoint"
    assert entry(mini, "flodl.FlodlError").category == "core"


def test_module_without_all_exports_its_own_public_names_not_its_imports(mini):
    optim = next(m for m in mini.modules if m.path == "flodl.optim")
    assert optim.names == [
        "DEFAULT_WARMUP",
        "StepDecay",
        "param_groups",
        "set_lr",
    ]  # no 'dataclass'


def _shadowed_submodule(ref: ApiReference) -> None:
    """``optim/__init__`` imports ``param_groups`` from ``optim/param_groups.py``: the attribute
    is the function (as at run time), the submodule stays importable but is not exported."""
    fn = entry(ref, "flodl.optim.param_groups")
    assert fn.kind == "function" and fn.defined_at == "flodl.optim.param_groups.param_groups"
    assert fn.aliases == []  # never `fl.optim.param_groups.param_groups`: that is an AttributeError
    paths = [e.path for e in ref.entries]
    assert "flodl.optim.param_groups.param_groups" not in paths
    module = next(m for m in ref.modules if m.path == "flodl.optim.param_groups")
    assert module.exported is False and "param_groups" in module.names


def test_a_name_bound_in_init_wins_over_a_same_named_submodule(mini):
    _shadowed_submodule(mini)


def test_the_real_flodl_optim_param_groups_is_the_function():
    _shadowed_submodule(extract(find_source(Path(__file__).resolve().parents[2])))


def test_an_explicit_reexport_is_public_in_its_package_but_not_star_exported(mini):
    # checkpoint/__init__.py: `from flodl.checkpoint.io import checkpoint_version as checkpoint_version`
    modules = {m.path: m for m in mini.modules}
    assert "checkpoint_version" in modules["flodl.checkpoint"].names
    assert "checkpoint_version" not in modules["flodl"].names  # the root's star import skips it
    found = entry(mini, "flodl.checkpoint.checkpoint_version")
    assert found.exported and found.kind == "function"


def test_the_real_flodl_train_current_is_public():
    ref = extract(find_source(Path(__file__).resolve().parents[2]))
    modules = {m.path: m for m in ref.modules}
    assert {"current", "record_scalar"} <= set(modules["flodl.train"].names)
    assert (
        "current" not in modules["flodl"].names
    )  # fl.train.current(), deliberately not fl.current
    assert entry(ref, "flodl.train.current").exported


def test_modules_list_what_imports_may_use(mini):
    modules = {m.path: m for m in mini.modules}
    assert "StateAdd" in modules["flodl.nn"].names
    assert modules["flodl.graph.builder"].exported is False
    assert "FlowBuilder" in modules["flodl.graph.builder"].names


def test_json_matches_the_schema_and_round_trips(mini):
    document = json.loads(mini.to_json())
    jsonschema.validate(document, SCHEMA)
    again = ApiReference.from_dict(document)
    assert again == mini
    assert again.api_hash == mini.api_hash


def test_empty_all_gives_no_entries_but_still_valid_json(tmp_path):
    pkg = tmp_path / "flodl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("__all__: list[str] = []\n")
    ref = extract(find_source(tmp_path))
    assert ref.entries == [] and ref.version == "unknown"
    jsonschema.validate(json.loads(ref.to_json()), SCHEMA)  # valid even with no entries


def test_api_hash_ignores_prose_and_moves_but_not_signatures(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "mini", src)
    before = extract(find_source(src))
    functional = src / "flodl" / "nn" / "functional.py"
    text = functional.read_text()
    functional.write_text("\n\n" + text.replace("Focal loss for", "The focal loss, for"))
    reworded = extract(find_source(src))
    assert reworded.api_hash == before.api_hash
    assert reworded.source_hash != before.source_hash
    functional.write_text(text.replace("gamma: float = 2.0", "gamma: float = 3.0"))
    assert extract(find_source(src)).api_hash != before.api_hash


def test_the_installed_flodl_is_found_without_importing_it():
    source = find_source()
    assert source.name == "flodl" and (source.package_dir / "__init__.py").is_file()
    ref = extract(source)
    assert any(e.path == "flodl.FlodlError" for e in ref.entries)
    assert ref.version != "unknown"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "no such directory"),
        (lambda p: p.mkdir(), "no Python package there"),
    ],
)
def test_bad_path_is_a_clear_error(tmp_path, setup, message):
    target = tmp_path / "missing"
    setup(target)
    with pytest.raises(FdlError, match=message):
        find_source(target)


def test_package_directory_itself_is_accepted():
    source = find_source(FIXTURES / "mini" / "flodl")
    assert source == PackageSource("flodl", (FIXTURES / "mini").resolve())


def test_a_module_without_its_own_init_is_built_with_no_arguments():
    """``fl.nn.StateAdd`` defines no ``__init__``: nn.Module's takes nothing, so the reference
    says ``StateAdd()`` (``fdl check`` can then verify ``fl.nn.StateAdd()`` call sites)."""
    ref = extract(find_source(Path(__file__).resolve().parents[2]))
    assert entry(ref, "flodl.nn.StateAdd").signature == "()"
    assert entry(ref, "flodl.FlodlError").signature not in ("()", "")  # Exception takes args


def test_the_real_flodl_hf_is_public_though_the_root_leaves_it_out_of_all():
    # flodl.hf needs the optional transformers: `from flodl import *` must not import it, so it
    # is not in flodl.__all__, yet it is public API with its own __all__.
    ref = extract(find_source(Path(__file__).resolve().parents[2]))
    modules = {m.path: m for m in ref.modules}
    assert modules["flodl.hf"].exported
    assert {"AutoModel", "from_pretrained"} & set(modules["flodl.hf"].names)
    hf = [e for e in ref.entries if e.path.startswith("flodl.hf.") and e.exported]
    assert len(hf) >= 5
    # Internal modules without their own __all__ stay out.
    assert not modules["flodl.train.worker"].exported


def test_the_real_flodl_hf_model_classes_are_classes():
    # The 30 concrete models (fl.hf.BertForSequenceClassification...) with their docstrings and
    # the methods they inherit, not attributes of a registry.
    ref = extract(find_source(Path(__file__).resolve().parents[2]))
    found = entry(ref, "flodl.hf.BertForSequenceClassification")
    assert found.kind == "class" and found.doc.startswith("BERT sequence classification")
    assert {"from_pretrained", "predict", "save_pretrained"} <= {m.name for m in found.methods}
    suffixes = ("Model", "ForSequenceClassification", "ForTokenClassification",
                "ForQuestionAnswering", "ForMaskedLM")  # fmt: skip
    models = [e for e in ref.entries if e.path.startswith("flodl.hf.") and e.exported
              and e.name.endswith(suffixes) and not e.name.startswith(("Auto", "Hf"))]  # fmt: skip
    assert len(models) == 30 and {e.kind for e in models} == {"class"}
