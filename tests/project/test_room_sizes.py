"""Rooms of one job and short functions, counted by walking the syntax of the package, its tests
and its benchmarks: no module over 500 lines, no function over 80. A long file or function is a
sign of two jobs in one place; each limit is checked against a planted offender so that the
walk itself is seen to count."""

from __future__ import annotations

import ast
from pathlib import Path

import harness

ROOTS = (Path(harness.__file__).parent, Path(__file__).parents[1],
         Path(__file__).parents[2] / "benchmarks")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def long_files(root: Path) -> dict[str, int]:
    """Path (relative to ``root``'s parent) -> lines, for each module over the limit."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_FILE_LINES:
            found[str(path.relative_to(root.parent))] = lines
    return found


def long_functions(root: Path) -> dict[str, int]:
    """``path:line name`` -> lines, for each function (methods and nested ones too) over the
    limit, from its ``def`` (decorators excluded) to its last line."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"] = lines
    return found


def test_the_walk_finds_a_planted_long_file_and_function(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "long.py").write_text(f"def f():\n{body}\n", encoding="utf-8")
    (package / "short.py").write_text("def g():\n    return 1\n", encoding="utf-8")
    (package / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1), encoding="utf-8")
    assert long_functions(package) == {"pkg/long.py:1 f": MAX_FUNCTION_LINES + 1}
    assert long_files(package) == {"pkg/big.py": MAX_FILE_LINES + 1}


def test_no_module_over_500_lines() -> None:
    assert [root.name for root in ROOTS] == ["harness", "tests", "benchmarks"]
    assert {path: n for root in ROOTS for path, n in long_files(root).items()} == {}


def test_no_function_over_80_lines() -> None:
    assert {f: n for root in ROOTS for f, n in long_functions(root).items()} == {}
