"""The porting guide and the corpus ports name only flodl APIs that exist, and every guide
snippet runs against this build."""

from __future__ import annotations

import pytest

from fdl.porting.static import check_source
from tests.porting.support import (
    CORPUS,
    GUIDE,
    findings_for,
    live_api,
    page_as_script,
    python_blocks,
)


def test_guide_names_only_existing_apis():
    findings = findings_for(page_as_script(GUIDE), "porting_skill/guide.md", live_api())
    problems = [f.render() for f in findings]
    assert not problems, "the guide uses flodl APIs that do not exist:\n" + "\n".join(problems)


@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_corpus_ports_name_only_existing_apis(case):
    port = CORPUS / case / "port.py"
    problems = [f.render() for f in findings_for(port.read_text(), str(port), live_api())]
    assert not problems, "\n".join(problems)


def test_an_invented_name_is_reported():
    # The guards above can fail: a name that does not exist is a finding.
    findings, _ = check_source("import flodl as fl\nfl.TotallyInvented()\n", "x.py", live_api())
    assert [f.render() for f in findings] == [
        "x.py:2:4: error[unknown-name]: `fl.TotallyInvented` does not exist: "
        "fl has no name 'TotallyInvented'"
    ]


def test_guide_snippets_run_in_order(tmp_path, monkeypatch):
    """Every block not marked ``no-run`` executes, in page order, in one namespace."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__guide__"}
    executed = 0
    for first, info, body in python_blocks(GUIDE):
        if "no-run" in info:
            continue
        exec(compile(body, f"guide.md:{first}", "exec"), namespace)
        executed += 1
    assert executed >= 10
