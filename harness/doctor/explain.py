"""The claimed reading's per-timestep divergence signature, in words and as a table: which step
goes wrong first, in which direction, and what that points to (docs/layouts.md, "Reading a
divergence signature")."""

from __future__ import annotations

import numpy as np
from tabulate import tabulate

from harness.compare import within
from harness.data import Inputs
from harness.mistakes.scoring import Score
from harness.spec import Case


def explain(case: Case, inputs: Inputs, s: Score, expected: dict[str, np.ndarray]) -> list[str]:
    """The claim's per-timestep divergence signature in words.

    Each pitfall is described in words where it is named; its code (P1 ... P13) is the row of
    the table in docs/layouts.md, "Reading a divergence signature", cited once per message.
    """
    if s.ok:
        return ["the claimed reading reproduces the expected outputs at every step"]
    zero_h = not np.any(inputs.h0)
    zero_c = inputs.c0 is None or not np.any(inputs.c0)
    lengths = inputs.lengths
    T = case.seq_len
    valid = np.arange(T)[None, :] < lengths[:, None]
    lines = []
    bad = ~within(s.y_ratio)  # [K, T]
    dirs = [("forward" if d == 0 else "backward") for d in case.directions]
    if not bad.any():
        which = ", ".join(k for k in s.states)
        return [f"y matches at every step but the final states ({which}) do not: the states "
                "are read at the wrong step (padding read as data, the reverse direction's state "
                "taken at t=T-1) or from the wrong slot (layer/direction indexing, (h, c) order; "
                "P11, P13: docs/layouts.md, Reading a divergence signature)"]
    if case.num_directions == 2 and bad.any(axis=1).tolist().count(False) == 1:
        good = dirs[int(np.argmin(bad.any(axis=1)))]
        wrong = dirs[int(np.argmax(bad.any(axis=1)))]
        lines.append(f"the {good} direction is exact and the {wrong} one is wrong: the {wrong} "
                     "weights are read wrongly, or the directions are swapped / indexed wrongly "
                     "(P11: docs/layouts.md, Reading a divergence signature)")
    if case.seq_lengths is not None or inputs.seq_lengths is not None:
        pad_only = not (bad & valid.any(axis=0)[None, :]).any()
        if pad_only:
            return lines + ["exact at every valid step, wrong only at padded steps: the "
                            "variable-length handling differs (carry-forward vs zeros; P13)"]
    first = [int(np.argmax(b if d == 0 else b[::-1])) for b, d in zip(bad, case.directions,
                                                                          strict=True)]
    t0_exact = all(not (b[0] if d == 0 else b[::-1][0]) or not b.any()
                   for b, d in zip(bad, case.directions, strict=True))
    scale = float(np.abs(expected["y"]).max()) or 1.0
    err0 = max(float((a if d == 0 else a[::-1])[0]) for a, d in zip(s.y_abs, case.directions,
                                                                     strict=True))
    steps = ", ".join(f"{dirs[k]} from t={first[k]}" if d == 0 else
                      f"{dirs[k]} from its step {first[k]} (reading backwards)"
                      for k, d in enumerate(case.directions) if bad[k].any())
    lines.append(f"first wrong step: {steps}")
    if t0_exact:
        if zero_h and zero_c:
            lines.append(
                "exact at t=0, wrong from t=1 with a zero initial state: the input kernel and "
                "the biases are right; the recurrent kernel is wrong (transposed, reshaped or "
                "reordered R blocks: P1, P9), or a run-time forget-bias offset differs (f "
                "multiplies c_prev = 0 at t=0: P4), or (GRU) the reset placement differs with "
                "bR_n = 0 (P6b)")
        elif zero_c:
            lines.append(
                "exact at t=0 although h0 is nonzero (so R is right there), wrong later: a "
                "run-time forget-bias offset (f multiplies c0 = 0 at t=0: P4) or a difference "
                "that needs a nonzero cell state")
        else:
            lines.append("exact at t=0 with a nonzero initial state, wrong later: something "
                         "that only acts once the state has evolved (clipping, a saturating "
                         "activation, variable lengths)")
    else:
        rel = err0 / scale
        later = float(s.y_abs.max())
        if rel < 0.05 and later <= 3 * err0:
            lines.append(
                f"a small error from t=0 ({err0:.2g}, {rel:.1%} of the output scale): a "
                "semantic difference (activation definition, peephole wiring, clipping: P10, "
                "P12) or a small bias offset rather than a reordered layout")
        else:
            side = ("the input side is wrong: W's gate order or orientation (P2, P3, P7), the "
                    "biases (P5) or the cell variant (P6)")
            if not zero_h:
                side += "; with a nonzero h0 the recurrent kernel acts at t=0 too (P1b)"
            if not zero_c and case.cell_kind.has_cell_state:
                side += "; with a nonzero c0 so does a forget-bias offset (P4b)"
            size = (f"by {err0:.2g} ({rel:.0%} of the output scale)" if later <= 3 * err0 else
                    f"by {err0:.2g} at first, growing to {later:.2g}")
            lines.append(f"wrong from t=0 {size}: {side}")
    return lines


def signature_table(s: Score, case: Case, limit: int = 12) -> str:
    """Per-step max abs error of y per direction (and the final states)."""
    T = case.seq_len
    steps = list(range(T)) if T <= limit else [*range(limit - 2), T - 2, T - 1]
    rows = []
    for k, d in enumerate(case.directions):
        rows.append([f"y {'forward' if d == 0 else 'backward'}"]
                    + [f"{s.y_abs[k, t]:.1e}" + ("*" if not within(s.y_ratio[k, t]) else "")
                       for t in steps])
    headers = ["t"] + [str(t) for t in steps]
    text = tabulate(rows, headers=headers, tablefmt="github")
    if s.states:
        text += "\n\nfinal states: " + ", ".join(f"{k} {v:.1e}" for k, v in s.states.items())
    return text


# The corrected mapping -------------------------------------------------------------------------
