"""The cell registry (harness/cells.py): its facts against the equations and the docs, and the
rule that code asks the cell, not its name."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import harness
from harness import cells, data, params, reference
from harness.spec import Case

ROOT = Path(harness.__file__).parent
# the registry and the per-cell equation files may name the kinds: that is where they live
EQUATIONS = {"cells.py", "reference/lstm.py", "reference/gru.py", "reference/lstm_backward.py",
             "reference/gru_backward.py"}
NAMES = {c.name for c in cells.CELLS.values()}
OBJECTS = {"LSTM", "GRU"}
# Comparisons that stay, each with why (file -> count). None is needed today.
ALLOWED: dict[str, int] = {}
LIMIT = 10


def _names_a_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_kind(e) for e in node.elts)
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return name in OBJECTS
    return False


def cell_comparisons(source: str) -> list[int]:
    """Lines that compare something with a cell kind's name (or with the registry's LSTM/GRU):
    ``==``, ``!=``, ``is``, ``in`` against "lstm"/"gru" or a tuple holding them, and
    ``match``/``case`` on them."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(_names_a_kind(x) for x in (node.left, *node.comparators)):
                lines.append(node.lineno)
        elif isinstance(node, ast.match_case):
            pattern = node.pattern
            if isinstance(pattern, ast.MatchValue) and _names_a_kind(pattern.value):
                lines.append(pattern.lineno)
    return lines


def test_the_counter_sees_each_form() -> None:
    src = ("a = case.cell == 'lstm'\nb = cell != \"gru\"\nc = x in ('lstm', 'y')\n"
           "d = k is LSTM\ne = cells.GRU == k\nf = case.cell_kind.has_cell_state\n"
           "match cell:\n    case 'gru':\n        pass\n")
    assert cell_comparisons(src) == [1, 2, 3, 4, 5, 8]


def test_code_asks_the_cell_not_its_name() -> None:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in EQUATIONS:
            continue
        lines = cell_comparisons(path.read_text(encoding="utf-8"))
        if len(lines) > ALLOWED.get(rel, 0):
            found[rel] = lines
    total = sum(len(v) for v in found.values()) + sum(ALLOWED.values())
    assert not found and total <= LIMIT, (
        f"comparisons with a cell's name (ask harness.cells instead): {found}")


# The registry's facts ------------------------------------------------------------------------

def test_gate_orders_are_the_documented_canonical_ones() -> None:
    """docs/equations.md states the canonical gate order of each cell."""
    text = (ROOT.parent / "docs" / "equations.md").read_text(encoding="utf-8")
    assert ("Gates: LSTM i (input), f (forget), g (cell candidate; c or j elsewhere), o (output); "
            "GRU\nr (reset), z (update), n (new/candidate") in text
    assert cells.LSTM.gates == ("i", "f", "g", "o") and cells.GRU.gates == ("r", "z", "n")
    assert cells.cell_with_gates(4) is cells.LSTM and cells.cell_with_gates(3) is cells.GRU
    assert cells.cell_with_gates(5) is None


@pytest.mark.parametrize("name", sorted(NAMES))
def test_states_are_what_the_reference_returns(name: str) -> None:
    """The reference (written from the equations) gives c_n exactly for the kinds whose
    registry entry says they carry a cell state, and a parameter block per gate named."""
    case = Case(name="c", cell=name, input_size=2, hidden_size=3, batch=2, seq_len=3)
    kind = case.cell_kind
    canonical = params.generate(case)
    out = reference.run(case, canonical, data.generate(case)).named()
    assert set(out) >= {"y", *kind.final_states}
    assert ("c_n" in out and out["c_n"] is not None) == kind.has_cell_state
    for gate in kind.gates:
        for block in kind.blocks:
            assert isinstance(canonical.tensors[f"layer0/forward/{block}{gate}"], np.ndarray)


def test_a_gru_with_reset_after_keeps_its_n_biases_apart() -> None:
    """With reset_after, r multiplies R_n h + bR_n: moving bR_n into bW_n changes the outputs,
    so the registry says the n biases act separately; without it they add."""
    assert cells.GRU.separate_biases(True) == ("n",)
    assert cells.GRU.separate_biases(False) == () == cells.LSTM.separate_biases(True)
    for reset_after, separate in ((True, True), (False, False)):
        case = Case(name="c", cell="gru", input_size=2, hidden_size=3, batch=2, seq_len=4,
                    reset_after=reset_after)
        canonical = params.generate(case)
        inputs = data.generate(case)
        moved = dict(canonical.tensors)
        key_w, key_r = "layer0/forward/bW_n", "layer0/forward/bR_n"
        moved[key_w] = moved[key_w] + moved[key_r]
        moved[key_r] = np.zeros_like(moved[key_r])
        a = reference.run(case, canonical, inputs).y
        b = reference.run(case, params.Canonical(moved), inputs).y
        assert (not np.allclose(a, b, atol=1e-12)) == separate


def test_a_field_of_one_kind_is_refused_on_another() -> None:
    with pytest.raises(ValueError, match="peepholes only apply to cell: lstm"):
        Case(name="c", cell="gru", input_size=2, hidden_size=3, peepholes=True)
