"""The question a reproducer's script answers, chosen by the key its pair's judge's figures
give (:meth:`harness.judges.Figures.script`, kept as ``ReproRecord.question``): the script's
header and main part (:func:`harness.repro.render.script` puts the framework's part between
them) and what the README says of it (:mod:`harness.repro.write`). The repro code asks
:data:`QUESTIONS` and never what kind a pair is.

- ``tolerance`` (:class:`ToleranceQuestion`): the error per step and the first step beyond
  ``ATOL + RTOL * |expected|`` (the pair's tolerance; the harness also passes a row within a
  multiple of its noise floor, which the script does not know); exit 1 when the divergence
  reproduces, 0 when it does not.
- ``cost`` (:class:`CostQuestion`): a quantized pair's; the SQNR of ``y`` against the float64
  equations, by :func:`harness.quantization.cost_status`'s rule, its data written into the
  script.

A new question: a :class:`Question` subclass registered in :data:`QUESTIONS` under the key its
figures give.
"""

from __future__ import annotations

from typing import ClassVar

from harness import cost_rule
from harness.repro.quote import doc_text, py_literal
from harness.repro.record import ReproRecord

HEADER = '''#!/usr/bin/env python3
"""{title}

Case {case}, adapter {adapter} of rnn-harness ({status}). Standalone: it needs Python
with NumPy and {needs}, nothing else, and downloads nothing.

    python repro.py

It builds the layer as the harness's adapter did, runs it, computes the expected outputs in
float64 from the cell's equations (below), prints the error per step and the first step
beyond ATOL + RTOL * |expected|, and exits 1 when the divergence reproduces, 0 when not.
"""

import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = {spec}
ATOL, RTOL = {atol}, {rtol}

'''


COMPARE = '''

def rows_of(got_layers, h_n, c_n):
    """(output, layer, direction, t, max |error|, tolerance ratio) per layer, direction, step
    of y, then per layer and direction of the final states (those the framework returned)."""
    exp_layers, exp_h, exp_c = stack(SPEC, CANONICAL, X, LENGTHS, H0, C0)
    H, dirs = SPEC["hidden_size"], SPEC["directions"]

    def row(output, k, d, t, a, r):
        err = np.abs(a - r)
        ratio = err / (ATOL + RTOL * np.abs(r))
        return (output, k, d, t, float(np.max(err)), float(np.max(ratio)))

    rows = []
    for k, y in sorted(got_layers.items()):
        y = fitted(f"y of layer {k}", y, exp_layers[k])
        for j, d in enumerate(dirs):
            cols = slice(j * H, (j + 1) * H)
            for t in range(y.shape[1]):
                rows.append(row("y", k, d, t, y[:, t, cols], exp_layers[k][:, t, cols]))
    for output, got, exp in (("h_n", h_n, exp_h), ("c_n", c_n, exp_c)):
        if exp is None or got is None:
            continue
        got = fitted(output, got, exp)
        for s in range(exp.shape[0]):
            k, d = divmod(s, len(dirs))
            rows.append(row(output, k, dirs[d], None, got[s], exp[s]))
    return rows


def beyond(row):
    return not row[5] <= 1.0  # NaN is beyond


def main():
    header()
    got_layers, h_n, c_n = run_framework()
    rows = rows_of(got_layers, h_n, c_n)
    print(f"\\nexpected: float64 equations; tolerance |error| <= {ATOL:g} + {RTOL:g} * |expected|")
    print(f"{'output':<28} {'max |error|':>12} {'/ tolerance':>12}")
    for r in rows:
        print(f"{where(r):<28} {r[4]:12.3e} {r[5]:12.3g}{'  <- beyond' if beyond(r) else ''}")
    bad = [r for r in rows if beyond(r)]
    y_bad = sorted((r for r in bad if r[0] == "y"), key=lambda r: (r[3], r[1], r[2]))
    first = (y_bad or bad or [None])[0]
    if first is None:
        print("\\nno divergence: every step within tolerance")
        return 0
    print(f"\\nfirst diverging: {where(first)} (max |error| {first[4]:.3e}, "
          f"{first[5]:.3g} x tolerance)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


COST_HEADER = '''#!/usr/bin/env python3
"""{title}

Case {case}, adapter {adapter} of rnn-harness ({status}): a quantized model ({scheme}).
Standalone: it needs Python with NumPy and {needs}, nothing else, and downloads nothing.

    python repro.py

It runs the converted model beside it as the harness's adapter did and answers the cost
question of a quantized pair: the SQNR of y against the float64 equations (below) on the
original weights, per step and over all of y, against the SQNR the harness computed for an
ideal quantization of the same scheme (its own grids from the same calibration data). It
exits 1 when the cost is beyond the harness's rule (COST below: more than margin_db under the
ideal's SQNR, or under the case's min_sqnr_db), 0 when not.

The other question, whether the kernel is right (each step within k output steps of the
float64 equations run with the model's own quantization), stays the harness's: these
equations have no integer arithmetic.
"""

import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = {spec}
# The cost question's data. sqnr_db, ideal_sqnr_db: the SQNR over y of the harness's run and of
# an ideal quantization of the same scheme (None: infinite), from the report's run.json
# (quantization).
# margin_db: rnn-harness's harness.quantization.IDEAL_MARGIN_DB; min_sqnr_db: the case's
# quantization floor. The rule is harness.quantization.cost_status's, cost_said (below): the
# pair is DIVERGED where its SQNR is below ideal_sqnr_db - margin_db or below min_sqnr_db.
COST = {cost}

'''


COST_MAIN = '''

def figure(v):
    return np.inf if v is None else float(v)


def main():
    """The cost by the harness's rule (sqnr_db, cost_said: pasted above)."""
    header()
    got_layers, _, _ = run_framework()
    exp_layers, _, _ = stack(SPEC, CANONICAL, X, LENGTHS, H0, C0)
    k = SPEC["num_layers"] - 1  # a deployed model's y: the last layer's
    r = exp_layers[k]
    y = fitted(f"y of layer {k}", got_layers[k], r)
    H, dirs = SPEC["hidden_size"], SPEC["directions"]
    ideal, margin, floor = figure(COST["ideal_sqnr_db"]), COST["margin_db"], COST["min_sqnr_db"]
    limit = max(ideal - margin, -np.inf if floor is None else floor)
    print(f"\\nexpected: float64 equations on the original weights; the pair diverges where "
          f"its SQNR over y is below {limit:.2f} dB (an ideal quantization's {ideal:.2f} dB "
          f"less {margin:g} dB" + ("" if floor is None else f", or the case's floor {floor:g}")
          + ")")
    print(f"{'output':<28} {'SQNR (dB)':>10}")
    rows = []
    for j, d in enumerate(dirs):
        cols = slice(j * H, (j + 1) * H)
        for t in range(y.shape[1]):
            rows.append(("y", k, d, t, float(sqnr_db(y[:, t, cols], r[:, t, cols]))))
    rows.sort(key=lambda row: (row[3], row[1], row[2]))
    for row in rows:
        low = not row[4] >= limit  # NaN is below
        print(f"{where(row):<28} {row[4]:10.2f}{'  <- below' if low else ''}")
    total = float(sqnr_db(y, r))
    print(f"\\nSQNR over y: {total:.2f} dB (the harness's run: {figure(COST['sqnr_db']):.2f} dB); "
          f"an ideal quantization: {ideal:.2f} dB")
    said = cost_said(total, ideal, margin, floor)
    if np.isnan(total):  # outputs with NaN: beyond whatever the rule's comparisons say
        said.append("the SQNR over y is NaN")
    if not said:
        print("no divergence: the cost of quantization is within the harness's rule")
        return 0
    first = next((row for row in rows if not row[4] >= limit), rows[0])
    print(f"\\nfirst diverging: {where(first)} (SQNR {first[4]:.2f} dB, below "
          f"{limit:.2f} dB): " + "; ".join(said))
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


class Question:
    """The tolerance question, which every pair's script answers unless its figures give
    another key."""

    key: ClassVar[str] = "tolerance"

    def script(self, record: ReproRecord, needs: str) -> tuple[str, str]:
        """The script's header (up to its data) and main part, ``needs``: what the framework
        part needs installed."""
        cell = record.spec["cell"]
        title = (f"{record.title}: diverges from the float64 {cell} equations"
                 if record.status != "pass" else record.title)
        head = HEADER.format(title=doc_text(title), case=doc_text(repr(record.case)),
                             adapter=doc_text(repr(record.adapter)),
                             status=doc_text(record.status), needs=doc_text(needs),
                             spec=py_literal(record.spec), atol=py_literal(record.atol),
                             rtol=py_literal(record.rtol))
        return head, COMPARE

    def readme_title(self, record: ReproRecord, title: str) -> str:
        """The README's title (``title``: the tolerance question's)."""
        return title

    def readme_text(self, record: ReproRecord) -> str:
        """The README's paragraph on what the script does."""
        return ("It builds the layer as the harness did, computes the expected output in "
                "float64 from the cell's equations written into the script, prints the error "
                "per step and the first step beyond tolerance, and exits 1 when the divergence "
                "reproduces (0 when it does not).")

    def judged(self, record: ReproRecord) -> str:
        """The README's line on how the harness judged the pair (markdown)."""
        return f"- tolerance: |error| <= {record.atol:g} + {record.rtol:g} x |expected|"


def _db(v: float | None) -> str:
    return "infinite" if v is None else f"{v:.1f} dB"


class CostQuestion(Question):
    """A quantized pair's cost question (``record.question.data``: sqnr_db, ideal_sqnr_db,
    margin_db, min_sqnr_db)."""

    key = "cost"

    def script(self, record: ReproRecord, needs: str) -> tuple[str, str]:
        assert record.handed is not None
        scheme = record.handed.call.get("scheme") or "quantized"
        head = COST_HEADER.format(
            title=doc_text(f"{record.title}: the cost of {scheme} quantization against the "
                           f"float64 {record.spec['cell']} equations"),
            case=doc_text(repr(record.case)), adapter=doc_text(repr(record.adapter)),
            status=doc_text(record.status), scheme=doc_text(scheme), needs=doc_text(needs),
            spec=py_literal(record.spec), cost=py_literal(record.question.data))
        return head, "\n\n" + cost_rule.source() + COST_MAIN

    def readme_title(self, record: ReproRecord, title: str) -> str:
        spec = record.spec
        return (f"{record.title}: {spec['cell'].upper()} output, the cost of quantization "
                f"against the float64 equations ({spec['dir_mode']})")

    def readme_text(self, record: ReproRecord) -> str:
        q = record.question.data
        floor = q.get("min_sqnr_db")
        return ("It answers the cost question of a quantized pair: the SQNR of `y` against the "
                "float64 equations on the original weights, per step and over `y`, against an "
                f"ideal quantization of the same scheme ({_db(q.get('ideal_sqnr_db'))} in the "
                f"harness's run, which measured {_db(q.get('sqnr_db'))}). It exits 1 when the "
                f"cost is beyond the harness's rule (more than {q['margin_db']:g} dB under the "
                "ideal's SQNR" + ("" if floor is None else f", or under the case's min_sqnr_db "
                                   f"{floor:g}") + "), 0 when not. Whether the kernel is right "
                "(each step within k output steps of the float64 equations run with the model's "
                "own quantization) stays the harness's question: the script's equations have no "
                "integer arithmetic (docs/quantization.md in rnn-harness).")

    def judged(self, record: ReproRecord) -> str:
        q = record.question.data
        line = (f"SQNR over y {_db(q.get('sqnr_db'))}, an ideal quantization "
                f"{_db(q.get('ideal_sqnr_db'))}, margin {q['margin_db']:g} dB"
                + ("" if q.get("min_sqnr_db") is None else
                   f", floor {q['min_sqnr_db']:g} dB"))
        return ("- judged in quantization steps and by its cost (the reason below); the script "
                f"checks the cost: {line}")


QUESTIONS: dict[str, Question] = {q.key: q for q in (Question(), CostQuestion())}
"""The questions a script answers, by the key a judge's figures give."""


def of(record: ReproRecord) -> Question | None:
    """The question ``record``'s script answers; None: a key this harness has no script for."""
    return QUESTIONS.get(record.question.key)
