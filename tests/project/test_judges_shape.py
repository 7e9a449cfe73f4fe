"""The shape of issue 55's judges: what kind a pair is, is asked only where pairs are judged.

A branch on quantization (an ``if``, a conditional expression, a ``while``, a ``match`` or a
comprehension's condition whose test names anything ``quantiz*``, as a name or an attribute)
sits only in harness/judges/, in the modules named for quantization and in the adapters, which
hand their quantized model to its judge. The run, merge, the reports and the reproducers read
the verdict's figures instead (docs/judges.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import harness

ROOT = Path(harness.__file__).parent


def _mentions(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = (sub.id if isinstance(sub, ast.Name) else
                sub.attr if isinstance(sub, ast.Attribute) else "")
        if "quantiz" in name.lower():
            return True
    return False


def branches_on_quantization(source: str) -> list[int]:
    """The lines of the branches of ``source`` whose test names quantiz*."""
    found = []
    for node in ast.walk(ast.parse(source)):
        tests: list[ast.AST] = []
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            tests = [node.test]
        elif isinstance(node, ast.Match):
            tests = [node.subject]
        elif isinstance(node, ast.comprehension):
            tests = list(node.ifs)
        found += [t.lineno for t in tests if _mentions(t)]
    return sorted(found)


def _allowed(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return (rel.parts[0] in ("judges", "adapters") or "quantiz" in path.stem)


def test_the_walk_finds_branches_on_quantization() -> None:
    source = ("if out.quantized is not None:\n    pass\n"
              "x = 1 if case.quantization else 2\n"
              "y = [r for r in rows if quantized(r)]\n"
              "z = (case.quantization, 3)\n"  # no branch
              "if figures.plots:\n    pass\n")
    assert branches_on_quantization(source) == [1, 3, 4]


def test_no_branch_on_quantization_outside_the_judges() -> None:
    checked, found = 0, []
    for path in sorted(ROOT.rglob("*.py")):
        if _allowed(path):
            continue
        checked += 1
        lines = branches_on_quantization(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT.parent)}:{n}" for n in lines]
    assert checked > 100, checked
    assert found == [], found


# Compare's rendering reads its verdicts through their figures (harness/judges/pairing.py):
# it names no compare judge's figures and never compares a verdict's kind.
COMPARE_JUDGES_FIGURES = ("WeightsFigures", "ShippedFigures")


def asks_the_kind(source: str) -> list[int]:
    """The lines of ``source`` that name a compare judge's figures class or compare a
    ``.kind``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name | ast.alias) and (
                getattr(node, "id", None) or getattr(node, "name", "")) in COMPARE_JUDGES_FIGURES:
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(
                isinstance(sub, ast.Attribute) and sub.attr == "kind"
                for sub in ast.walk(node)):
            found.append(node.lineno)
    return sorted(found)


def test_the_walk_finds_a_kind_asked() -> None:
    source = ("if v.kind == 'weights':\n    pass\n"
              "from harness.judges.weights import WeightsFigures\n"
              "x = isinstance(f, ShippedFigures)\n"
              "y = {'kind': v.kind}\n")  # kept, not asked
    assert asks_the_kind(source) == [1, 3, 4]


def test_compares_rendering_asks_no_verdict_its_kind() -> None:
    path = ROOT / "models" / "render.py"
    assert asks_the_kind(path.read_text(encoding="utf-8")) == []
