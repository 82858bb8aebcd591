"""docs/hf.md's name tables are exactly the ones the code uses, and every name maps."""

from __future__ import annotations

import re

import pytest

import flodl.hf as fh
from flodl.hf.families import rename
from tests.conftest import REPO_ROOT


def documented_tables() -> dict[str, list[tuple[str, str]]]:
    text = (REPO_ROOT / "docs" / "hf.md").read_text(encoding="utf-8")
    section = text.split("## Name tables", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, list[tuple[str, str]]] = {}
    for block in section.split("#### ")[1:]:
        heading, _, body = block.partition("\n")
        rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", body, flags=re.MULTILINE)
        for model_type in re.findall(r"\(`([a-z0-9-]+)`\)", heading):
            tables[model_type] = rows
    return tables


def test_docs_tables_match_the_code():
    tables = documented_tables()
    assert set(tables) == set(fh.FAMILIES)
    for model_type, family in fh.FAMILIES.items():
        assert tables[model_type] == family.table, model_type


@pytest.mark.parametrize("model_type", sorted(fh.FAMILIES))
def test_every_parameter_of_every_head_has_a_name(model_type):
    family = fh.FAMILIES[model_type]
    for head in fh.HEADS:
        model = fh.model_class(model_type, head).from_config(
            {"model_type": model_type, "vocab_size": 50, "hidden_size": 16, "dim": 16,
             "num_hidden_layers": 2, "n_layers": 2, "num_attention_heads": 2, "n_heads": 2,
             "intermediate_size": 24, "hidden_dim": 24, "embedding_size": 8,
             "relative_attention": True, "position_buckets": 8, "pos_att_type": ["c2p", "p2c"]}
        )  # fmt: skip
        prefix = "" if head == "base" else family.prefix + "."
        for name, _ in model.named_parameters():
            assert rename(name, family.table, prefix, to_hf=True) is not None, (head, name)
