"""What an item says: its JUnit properties and the text of a divergence."""

from __future__ import annotations

from typing import Any


def pair_properties(r: Any) -> list[tuple[str, str]]:
    """A PairResult as JUnit properties: the verdict, the worst error (its ``max_abs``, its
    ``tol_ratio`` to the tolerance and where) and the first diverging step, whole
    (``first_diverging``, e.g. ``y L0 d1 t=3``) and by part (output, layer, direction, t)."""
    from harness import compare

    props = [("verdict", r.status), ("seconds", f"{r.seconds:.4f}")]
    w = r.worst
    if w is not None:
        props += [("max_abs", f"{w['max_abs']:.6g}"), ("tol_ratio", f"{w['tol_ratio']:.6g}"),
                  ("worst_output", str(w["output"])), ("worst_at", compare.where(w))]
    f = r.first_diverging
    if f is not None:
        props.append(("first_diverging", compare.where(f)))
        props.append(("first_diverging_output", str(f["output"])))
        for part in ("layer", "direction", "t"):  # a missing direction or t (dW, dx) is left out
            value = f.get(part)
            if value is not None and value == value and value >= 0:
                props.append((f"first_diverging_{part}", str(int(value))))
    if r.reason:
        props.append(("reason", r.reason))
    return props


def failure_text(r: Any) -> str:
    """First diverging step and the per-timestep table of the output where it happened."""
    from tabulate import tabulate

    from harness import compare

    f = r.first_diverging
    if f is None:
        return f"DIVERGED: {r.reason}"
    head = (f"DIVERGED: first at {compare.where(f)}: "
            f"max_abs {f['max_abs']:.3e} = {f['tol_ratio']:.3g}x tolerance "
            f"(atol {f['atol']:g}, rtol {f['rtol']:g})")
    rows = compare.of_mode(r.rows, f.get("mode") or compare.FREE)  # its own mode's rows only
    same_direction = (rows["direction"].fillna(-1) == f["direction"]
                      if f["output"] != "dx" else True)
    sel = rows[(rows["output"] == f["output"]) & (rows["layer"] == f["layer"]) & same_direction]
    columns = ["t", "max_abs", "max_rel", "max_ulp", "tol_ratio", "noise_floor", "verdict"]
    table = tabulate(sel[columns].head(12).values.tolist(),
                     headers=["t", "max_abs", "max_rel", "max_ulp", "x tol", "noise floor",
                              "verdict"],
                     floatfmt=".2e")
    return head + "\n" + table
