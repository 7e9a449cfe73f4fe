"""The shape of issue 55's judges: what kind a pair is, is asked only where pairs are judged.

A branch on quantization (an ``if``, a conditional expression, a ``while``, a ``match`` or a
comprehension's condition whose test names anything ``quantiz*``, as a name or an attribute)
sits only in harness/judges/, in the modules named for quantization and in the adapters, which
hand their quantized model to its judge. The run, merge, the reports and the reproducers read
the verdict's figures instead (docs/judges.md)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import harness
from harness import compare, judges
from harness.judges import CostFigures, Figures, Judge

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


# divergence.csv's columns as every report since the quantized judge has written them: readers
# of earlier reports (merge, diff, bisect) find them where they were
WRITTEN_COLUMNS = ["case", "adapter", "mode", "output", "layer", "direction", "t", "max_abs",
                   "max_rel", "mean_abs", "max_ulp", "tol_ratio", "atol", "rtol", "noise_floor",
                   "floor_ratio", "sqnr_db", "cosine", "rmse_steps", "verdict"]


def test_a_judges_columns_are_its_own() -> None:
    """compare.COLUMNS holds what every pair has; the cost columns are the quantized judge's
    figures', and divergence.csv has them where it always had them."""
    assert not set(compare.COLUMNS) & set(CostFigures.columns)
    assert CostFigures.columns == ("sqnr_db", "cosine", "rmse_steps")
    assert judges.columns() == WRITTEN_COLUMNS


def test_a_new_judges_columns_join_divergence_csv() -> None:
    @dataclass(frozen=True)
    class Extra(Figures):
        columns: ClassVar[tuple[str, ...]] = ("extra_col", "sqnr_db")

    class ExtraJudge(Judge):
        kind = "extra"
        figures = Extra

        def claims(self, case, adapter):  # noqa: ANN001, ANN202
            return False

    remove = judges.register(ExtraJudge())
    try:
        names = judges.columns()
    finally:
        remove()
    assert names == WRITTEN_COLUMNS[:-1] + ["extra_col", "verdict"]
    assert judges.columns() == WRITTEN_COLUMNS
