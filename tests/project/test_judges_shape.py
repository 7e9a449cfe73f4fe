"""The shape of issue 55's judges: what kind a pair is, is asked only where pairs are judged.

A branch on quantization (an ``if``, a conditional expression, a ``while``, a ``match`` or a
comprehension's condition whose test names anything ``quantiz*``, as a name or an attribute)
sits only in the judges (harness/judges/, compare's in harness/models/judges/), in the modules
named for quantization and in the adapters, which hand their quantized model to its judge. The
run, merge, the reports and the reproducers read the verdict's figures instead
(docs/judges.md).

A kind branch need not name quantization: ``if record.cost is not None`` chose a quantized
pair's reproducer question under a field renamed ``cost``. So in the readers (:data:`READERS`:
runner, merge, results, the API, report/, repro/) a branch's test may not

- test for None or for truth an optional field (``X | None``) of the records a verdict
  reaches them by (PairResult, ReproRecord, Verdict) unless :data:`KIND_FREE` names it with
  why every kind has it or lacks it alike: a field a judge fills for its kind alone is such a
  field under any name, and the walk finds it the day it is added;
- read a field of a judge's figures or of the script question they give (``sqnr_db``,
  ``key``, ``data``, ...) or a verdict's ``kind``: what the figures hold is read through their
  methods (worst_text, script, record, ...), never tested;
- call ``isinstance`` with a judge's, figures' or question's class.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import harness
from harness import compare, judges
from harness.judges import CostFigures, Figures, Judge
from harness.judges.verdict import ScriptQuestion
from harness.repro.record import ReproRecord
from harness.results import PairResult

ROOT = Path(harness.__file__).parent


def _mentions(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = (sub.id if isinstance(sub, ast.Name) else
                sub.attr if isinstance(sub, ast.Attribute) else "")
        if "quantiz" in name.lower():
            return True
    return False


def branch_tests(source: str) -> list[ast.AST]:
    """The expressions that choose a branch in ``source``: the tests of if, conditional
    expressions and while, the subjects of match, the conditions of comprehensions."""
    tests: list[ast.AST] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            tests.append(node.test)
        elif isinstance(node, ast.Match):
            tests.append(node.subject)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
    return tests


def branches_on_quantization(source: str) -> list[int]:
    """The lines of the branches of ``source`` whose test names quantiz*."""
    return sorted(t.lineno for t in branch_tests(source) if _mentions(t))


def _allowed(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return (rel.parts[0] in ("judges", "adapters") or rel.parts[:2] == ("models", "judges")
            or "quantiz" in path.stem)


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


# Compare's rendering reads its verdicts through their figures (harness/models/judges/pairing.py):
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
              "from harness.models.judges.weights import WeightsFigures\n"
              "x = isinstance(f, ShippedFigures)\n"
              "y = {'kind': v.kind}\n")  # kept, not asked
    assert asks_the_kind(source) == [1, 3, 4]


def test_compares_rendering_asks_no_verdict_its_kind() -> None:
    path = ROOT / "models" / "render.py"
    assert asks_the_kind(path.read_text(encoding="utf-8")) == []


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


READERS = ("runner.py", "pairs.py", "case_jobs.py", "merge.py", "results.py", "api", "report",
           "repro")
"""The modules (files and folders of harness/) that read verdicts and never judge."""

KIND_FREE = {
    "rows": "a pair that compared outputs has rows, whatever judged them",
    "outputs": "an adapter's outputs, kept when --save-outputs asks, for any kind",
    "handed": "what an adapter handed its framework: recorded or not by the adapter",
    "repro": "a reproducer's record: made for the statuses harness.repro.record.wanted says",
    "environment": "where a pair's adapter ran: every pair that ran has one",
    "verdict": "a pair that was judged has one (not: unavailable, not applicable, error)",
    "first": "the first row beyond tolerance: any pair that diverged",
    "known": "the known-bug reading, the same for every judge (harness.judges.known)",
}
"""The optional fields of PairResult, ReproRecord and Verdict a reader may branch on, with why
that is no branch on a pair's kind."""


def _optional_fields() -> set[str]:
    return {f.name for cls in (PairResult, ReproRecord, judges.Verdict)
            for f in dataclasses.fields(cls) if "None" in str(f.type)}


def _figures_fields() -> set[str]:
    classes = {ScriptQuestion, Figures} | {j.figures for j in judges.JUDGES}
    return {f.name for cls in classes for f in dataclasses.fields(cls)} | {"kind", "key"}


def _truth_tested(test: ast.AST) -> list[str]:
    """The attributes ``test`` compares with None (is / is not) or takes as a truth value."""
    found = [sub.left.attr for sub in ast.walk(test)
             if isinstance(sub, ast.Compare) and isinstance(sub.left, ast.Attribute)
             and any(isinstance(op, ast.Is | ast.IsNot) for op in sub.ops)
             and any(isinstance(c, ast.Constant) and c.value is None for c in sub.comparators)]
    todo = [test]
    while todo:
        t = todo.pop()
        if isinstance(t, ast.BoolOp):
            todo += t.values
        elif isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
            todo.append(t.operand)
        elif isinstance(t, ast.Attribute):
            found.append(t.attr)
    return found


def kind_branches(source: str, optional: set[str], figures: set[str]) -> list[tuple[int, str]]:
    """(line, what) of each branch of ``source`` that the module text refuses in a reader:
    ``optional``: the optional record fields not in :data:`KIND_FREE`; ``figures``: the
    fields of figures and script questions."""
    found = []
    for t in branch_tests(source):
        found += [(t.lineno, f"tests {a}") for a in _truth_tested(t) if a in optional]
        found += [(t.lineno, f"reads {sub.attr}") for sub in ast.walk(t)
                  if isinstance(sub, ast.Attribute) and sub.attr in figures]
        found += [(t.lineno, "isinstance of a judge's class") for sub in ast.walk(t)
                  if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
                  and sub.func.id == "isinstance" and len(sub.args) == 2
                  and any(isinstance(n, ast.Name)
                          and n.id.endswith(("Figures", "Judge", "Question"))
                          for n in ast.walk(sub.args[1]))]
    return sorted(found)


def test_the_walk_finds_kind_branches_under_any_name() -> None:
    source = ("if record.cost is not None:\n    pass\n"  # 1: the field the repro code had
              "title = a if record.cost else b\n"  # 3
              "if record.handed is not None and not record.cost:\n    pass\n"  # 4
              "if record.question.key == 'cost':\n    pass\n"  # 6
              "x = [p for p in pairs if p.verdict.kind == 'quantized']\n"  # 8
              "if isinstance(r.figures, CostFigures):\n    pass\n"  # 9
              "if p.rows is not None and record.handed:\n    pass\n"  # 11: kind-free
              "q = QUESTIONS[record.question.key]\n")  # 13: a lookup, no branch
    found = kind_branches(source, {"cost"}, _figures_fields())
    assert found == [(1, "tests cost"), (3, "tests cost"), (4, "tests cost"), (6, "reads key"),
                     (8, "reads kind"), (9, "isinstance of a judge's class")], found


def test_no_kind_branch_in_the_readers() -> None:
    optional = _optional_fields()
    assert {"rows", "handed", "verdict"} <= optional  # the fields are found
    unexplained = optional - set(KIND_FREE)
    figures = _figures_fields()
    assert {"sqnr_db", "key", "data", "kind"} <= figures
    checked, found = 0, []
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).parts[0] not in READERS:
            continue
        checked += 1
        found += [f"{path.relative_to(ROOT.parent)}:{n} {what}"
                  for n, what in kind_branches(path.read_text(encoding="utf-8"), unexplained,
                                               figures)]
    assert checked > 25, checked
    assert found == [], found
