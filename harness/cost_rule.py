"""A quantized pair's cost rule: the SQNR of its ``y`` against the float64 reference
(:func:`sqnr_db`) and what makes the cost DIVERGED (:func:`cost_said`). Pure NumPy, called by
:func:`harness.quantization.cost_status` and pasted into a quantized pair's reproducer
(:func:`source`), so that the script judges the cost by the harness's own rule.
"""

from __future__ import annotations

from harness.families.paste import below

MARKER = "# --- the cost rule of a quantized pair (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


# --- the cost rule of a quantized pair (pasted into repro.py) ---
import numpy as np  # noqa: E402


def sqnr_db(a, r, axes=None):
    """10 log10(sum r^2 / sum (a - r)^2) over ``axes`` (all: None); inf where a equals r."""
    e = np.sum((a - r) ** 2, axis=axes)
    s = np.sum(r ** 2, axis=axes)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 10.0 * np.log10(s / e)


def cost_said(total, ideal, margin_db, floor):
    """What makes a pair's cost DIVERGED, one phrase a reason (none: within the rule): its SQNR
    over y ``total`` more than ``margin_db`` under an ideal quantization's ``ideal`` (None:
    infinite, no error), or under the case's ``floor`` (min_sqnr_db; None: none)."""
    total = np.inf if total is None else total
    ideal = np.inf if ideal is None else ideal
    said = []
    if total < ideal - margin_db:
        said.append(f"quantization costs {ideal - total:.1f} dB more than an ideal "
                    f"quantization (beyond {margin_db:g} dB)")
    if floor is not None and total < floor:
        said.append(f"SQNR {total:.1f} dB below the case's min_sqnr_db {floor:g}")
    return said
