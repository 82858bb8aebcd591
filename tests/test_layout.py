"""The tests are laid out like the source: tests/<name>/ tests the package flodl/<name> or fdl/<name>.

A test file directly under tests/ tests a top-level module (tests/test_random.py tests
flodl/random.py) or checks the whole repository. The few directories that map to no package are
listed below with their reason; docs/development.md ("Where a new test goes") says the same.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("flodl", "fdl")

# tests/<dir> that is not a package of flodl or fdl, and why.
OTHER_DIRS = {
    "cli": "fdl as a whole: the app, help, exit codes, its top-level modules (argv, main, "
    "console, update_check, the shell commands) and the wheel",
    "examples": "the scripts in examples/",
    "fixtures": "data and helpers shared by several test directories",
}
# tests/test_*.py that checks the repository rather than one module, and why.
OTHER_FILES = {
    "test_cuda_paths.py": "a user's main paths on a real CUDA device, across packages",
    "test_docs.py": "runs the code in docs/",
    "test_doctests.py": "runs every docstring example of flodl and fdl",
    "test_layering.py": "the import layers of flodl and fdl",
    "test_layout.py": "this file",
    "test_public_api.py": "the public names of flodl and fdl (docs/development.md)",
    "test_self_contained.py": "no comment, docstring or doc points to a file outside the repository",
    "test_session_tmpdir.py": "the suite keeps its temp files to itself (tests/conftest.py)",
    "test_session_signals.py": "the suite's Ctrl-C tests hold however it is launched (conftest)",
}
# Packages tested elsewhere, and where.
UNTESTED_HERE = {
    "fdl/commands": "each command is tested with the package it drives (tests/hardware for "
    "'fdl diagnose', tests/torch_setup for 'fdl setup', ...), app-wide behaviour in tests/cli",
}


def packages(root: Path, source: str) -> set[str]:
    """The direct sub-packages of ``root/source``."""
    return {p.parent.name for p in (root / source).glob("*/__init__.py")}


def modules(root: Path, source: str) -> set[str]:
    """The top-level modules of ``root/source`` (``random`` for flodl/random.py)."""
    return {p.stem for p in (root / source).glob("*.py") if not p.stem.startswith("_")}


def layout_problems(root: Path) -> list[str]:
    """Everything in ``root/tests`` that does not mirror ``root/flodl`` and ``root/fdl``."""
    tests = root / "tests"
    known = {name: source for source in SOURCES for name in packages(root, source)}
    tops = set().union(*(modules(root, source) for source in SOURCES))
    problems = []
    for entry in sorted(tests.iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_dir() and entry.name not in known and entry.name not in OTHER_DIRS:
            problems.append(
                f"tests/{entry.name}/ matches no package of {' or '.join(SOURCES)}: name it after "
                "the package it tests, or list it in OTHER_DIRS with the reason"
            )
        if entry.is_file() and entry.name.startswith("test_") and entry.suffix == ".py":
            stem = entry.stem.removeprefix("test_")
            if entry.name not in OTHER_FILES and not any(
                stem == m or stem.startswith(m + "_") for m in tops
            ):
                problems.append(
                    f"tests/{entry.name} is named after no top-level module of "
                    f"{' or '.join(SOURCES)}: move it into the directory of the package it tests"
                )
    for name, source in sorted(known.items()):
        if not (tests / name).is_dir() and f"{source}/{name}" not in UNTESTED_HERE:
            problems.append(f"{source}/{name} has no tests/{name}/")
    return problems


def test_tests_mirror_the_source():
    assert layout_problems(REPO_ROOT) == []


def test_the_listed_exceptions_exist():
    tests = REPO_ROOT / "tests"
    assert [d for d in OTHER_DIRS if not (tests / d).is_dir()] == []
    assert [f for f in OTHER_FILES if not (tests / f).is_file()] == []
    assert [p for p in UNTESTED_HERE if not (REPO_ROOT / p / "__init__.py").is_file()] == []


def _tree(root: Path, *paths: str) -> Path:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    return root


def test_a_stray_directory_or_file_is_reported(tmp_path):
    root = _tree(
        tmp_path,
        "flodl/__init__.py",
        "flodl/nn/__init__.py",
        "flodl/random.py",
        "fdl/__init__.py",
        "tests/nn/test_init.py",
        "tests/test_random_streams.py",  # named after flodl/random.py: fine
        "tests/hw/test_probes.py",
        "tests/test_misc.py",
    )
    assert layout_problems(root) == [
        "tests/hw/ matches no package of flodl or fdl: name it after the package it tests, or "
        "list it in OTHER_DIRS with the reason",
        "tests/test_misc.py is named after no top-level module of flodl or fdl: move it into the "
        "directory of the package it tests",
    ]


def test_a_package_without_tests_is_reported(tmp_path):
    root = _tree(tmp_path, "flodl/optim/__init__.py", "fdl/variants/__init__.py", "tests/x.txt")
    assert layout_problems(root) == [
        "flodl/optim has no tests/optim/",
        "fdl/variants has no tests/variants/",
    ]
