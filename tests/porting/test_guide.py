"""The porting guide and the corpus ports name only flodl APIs that exist (or are listed as
pending), the pending list only shrinks, and every guide snippet runs against this build."""

from __future__ import annotations

import pytest

from fdl.porting.static import check_source
from tests.porting.support import (
    CORPUS,
    GUIDE,
    api_has,
    findings_for,
    live_api,
    page_as_script,
    pending_names,
    python_blocks,
)


def unexplained(findings, pending: set[str]) -> list[str]:
    """Findings that the pending list does not excuse, rendered."""
    return [f.render() for f in findings if f.target not in pending]


def test_guide_names_only_existing_or_pending_apis():
    findings = findings_for(page_as_script(GUIDE), "porting_skill/guide.md", live_api())
    problems = unexplained(findings, set(pending_names()))
    assert not problems, "the guide uses flodl APIs that do not exist:\n" + "\n".join(problems)


@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_corpus_ports_name_only_existing_or_pending_apis(case):
    port = CORPUS / case / "port.py"
    findings = findings_for(port.read_text(), str(port), live_api())
    problems = unexplained(findings, set(pending_names()))
    assert not problems, "\n".join(problems)


def test_pending_names_have_not_landed():
    landed = [name for name in pending_names() if api_has(live_api(), name)]
    assert not landed, (
        f"these names now exist in flodl; delete them from porting_skill/pending_api.txt: {landed}"
    )


def test_pending_list_has_no_duplicates_and_is_sorted():
    names = pending_names()
    assert names == sorted(set(names))


def test_an_invented_name_is_not_excused():
    # The guard above can fail: a name that neither exists nor is pending is reported.
    findings, _ = check_source("import flodl as fl\nfl.TotallyInvented()\n", "x.py", live_api())
    assert unexplained(findings, set(pending_names())) == [
        "x.py:2:4: error[unknown-name]: `fl.TotallyInvented` does not exist: "
        "fl has no name 'TotallyInvented'"
    ]


def test_guide_snippets_run_in_order(tmp_path, monkeypatch):
    """Every runnable block executes; a block that needs a pending name waits for it."""
    monkeypatch.chdir(tmp_path)
    pending = set(pending_names())
    findings = findings_for(page_as_script(GUIDE), "guide.md", live_api())
    waiting_lines = {f.line for f in findings if f.target in pending}
    namespace: dict[str, object] = {"__name__": "__guide__"}
    waiting: list[int] = []
    executed = 0
    for first, info, body in python_blocks(GUIDE):
        if "no-run" in info:
            continue
        if any(first <= line < first + body.count("\n") + 1 for line in waiting_lines):
            waiting.append(first)
            continue
        try:
            exec(compile(body, f"guide.md:{first}", "exec"), namespace)
            executed += 1
        except NameError:
            if not waiting:  # not a consequence of a block that is waiting
                raise
            waiting.append(first)
    assert executed >= 1
    if waiting:
        pytest.skip(f"{len(waiting)} guide block(s) wait for pending API (lines {waiting})")
