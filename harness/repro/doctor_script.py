"""``doctor --repro DIR``: a script that shows a converter's author the mistake the doctor found,
the wrong reading of the weights and the right one side by side, runnable without rnn-harness.

The folder holds ``repro.py`` (NumPy only; its data inline when small, else ``data.npz``) and a
``README.md``. The script computes the outputs of both readings with the float64 equations
(harness/repro/equations.py): the weights read as claimed, and read with the doctor's
correction, each against the outputs the framework gave; it prints their errors per step side
by side and exits 1 when the claimed reading diverges and the corrected one agrees (the
mistake shown), 0 when the claimed reading agrees, 2 when neither does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness import safe_files
from harness.npz import save_npz, write_text
from harness.repro import equations
from harness.repro.quote import doc_text, md_code, md_text, py_literal
from harness.repro.record import script_spec, unsupported
from harness.repro.render import _data_block, inline
from harness.spec import Case

SCRIPT = '''#!/usr/bin/env python3
"""{title}

The weights read as layout {layout} (as claimed) and read with the correction rnn-harness's
doctor found, each run through the float64 {cell} equations below, against the outputs the
framework gave ({source}). NumPy only:

    python repro.py

Exit 1: the claimed reading diverges and the corrected one agrees (the mistake is shown);
0: the claimed reading agrees; 2: neither does.
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC_CLAIMED = {claimed}
SPEC_RIGHT = {right}
ATOL, RTOL = {atol}, {rtol}
MISTAKES = {mistakes}

'''

MAIN = '''

def part(prefix):
    return {k[len(prefix):]: v for k, v in DATA.items() if k.startswith(prefix)}


X, H0, LENGTHS, C0 = DATA["x"], DATA["h0"], DATA["lengths"], DATA.get("c0")
EXPECTED = part("expected/")


def errors(spec, weights):
    """(label, max |error|, / tolerance) per direction and step of y, then per final state."""
    ys, h_n, c_n = stack(spec, weights, X, LENGTHS, H0, C0)
    got = {"y": ys[-1], "h_n": h_n, "c_n": c_n}
    H, dirs = spec["hidden_size"], spec["directions"]
    rows = []

    def row(label, a, r):
        err = np.abs(a - r)
        rows.append((label, float(err.max()), float((err / (ATOL + RTOL * np.abs(r))).max())))

    for t in range(EXPECTED["y"].shape[1]):
        for j, d in enumerate(dirs):
            cols = slice(j * H, (j + 1) * H)
            row(f"y direction {d} t={t}", got["y"][:, t, cols], EXPECTED["y"][:, t, cols])
    for name in ("h_n", "c_n"):
        if name in EXPECTED and got[name] is not None:
            for s in range(EXPECTED[name].shape[0]):
                row(f"{name} [{s}]", got[name][s], EXPECTED[name][s])
    return rows


def main():
    print("the doctor's correction: " + "; ".join(MISTAKES))
    claimed = errors(SPEC_CLAIMED, part("claimed/"))
    right = errors(SPEC_RIGHT, part("right/"))
    print(f"\\n{'':24} {'as claimed':>24} {'corrected':>24}")
    print(f"{'output':24} {'max |error|':>12}{'/ tol':>12} {'max |error|':>12}{'/ tol':>12}")
    for (label, e1, r1), (_, e2, r2) in zip(claimed, right):
        print(f"{label:24} {e1:12.3e}{r1:12.3g} {e2:12.3e}{r2:12.3g}")
    claimed_ok = all(r <= 1.0 for _, _, r in claimed)
    right_ok = all(r <= 1.0 for _, _, r in right)
    first = next((label for label, _, r in claimed if not r <= 1.0), None)
    if claimed_ok:
        print("\\nthe claimed reading agrees with the framework: no mistake to show")
        return 0
    if not right_ok:
        print(f"\\nneither reading agrees (the claimed one first diverges at {first})")
        return 2
    print(f"\\nthe claimed reading first diverges at {first}; the corrected reading agrees "
          "at every step")
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


def _readme(title: str, case: Case, layout: str, source: str, mistakes: list[str]) -> str:
    return "\n".join([
        f"# {md_text(title)}", "",
        f"The weights of case {md_code(case.name)} read as layout {md_code(layout)} do not "
        f"give the outputs of {md_text(source)}; read with this correction they do:", "",
        *[f"- {md_text(m)}" for m in mistakes], "",
        "```", "python repro.py", "```", "",
        "Needs Python with NumPy only. It runs both readings through the float64 "
        f"{md_text(case.cell.upper())} equations written into it and prints their errors per "
        "step side by side; exit 1 when the claimed reading diverges and the corrected one "
        "agrees.", ""])


def write_doctor_repro(folder: str | Path, *, case: Case, fixed_case: Case, layout: str,
                       claimed: dict[str, np.ndarray], right: dict[str, np.ndarray],
                       inputs: Any, expected: dict[str, np.ndarray], atol: float, rtol: float,
                       mistakes: list[str], source: str) -> str:
    """Write the folder; returns a line for the doctor's report (what was written, or why
    not). ``claimed`` / ``right``: canonical tensors of the two readings; ``expected``: the
    framework's outputs (y, h_n, c_n)."""
    why = unsupported(case) or unsupported(fixed_case)
    if why:
        return f"No reproducer written to {folder}: {why}."
    folder = Path(folder)
    if folder.is_symlink():
        return (f"No reproducer written to {folder}: it is a symbolic link, which rnn-harness "
                "does not write through.")
    if folder.exists() and not folder.is_dir():
        return f"No reproducer written to {folder}: it exists and is not a folder."
    arrays = {f"claimed/{k}": np.asarray(v, np.float64) for k, v in claimed.items()}
    arrays |= {f"right/{k}": np.asarray(v, np.float64) for k, v in right.items()}
    arrays |= {"x": np.asarray(inputs.x, np.float64), "h0": np.asarray(inputs.h0, np.float64),
               "lengths": np.asarray(inputs.lengths, np.int64)}
    if inputs.c0 is not None:
        arrays["c0"] = np.asarray(inputs.c0, np.float64)
    arrays |= {f"expected/{k}": np.asarray(v, np.float64) for k, v in expected.items()}
    safe_files.folder(folder, field="--repro")
    title = f"Weights read as {layout!r}: {'; '.join(mistakes)}"
    head = SCRIPT.format(title=doc_text(title), layout=doc_text(repr(layout)),
                         cell=doc_text(case.cell), source=doc_text(source),
                         claimed=py_literal(script_spec(case)),
                         right=py_literal(script_spec(fixed_case)), atol=py_literal(atol),
                         rtol=py_literal(rtol), mistakes=py_literal(list(mistakes)))
    if not inline(arrays):
        save_npz(folder / "data.npz", arrays, folder)
    write_text(folder / "repro.py", head + _data_block(arrays) + "\n\n" + equations.source()
               + MAIN, folder)
    write_text(folder / "README.md", _readme(title, case, layout, source, mistakes), folder)
    return f"Wrote a reproducer of the mistake to {folder}/repro.py (NumPy only)."
