"""The corrected mapping: per slice of the claimed layout, what the claim reads there and what
the slice actually holds once the mistakes found are undone."""

from __future__ import annotations

import numpy as np

from harness.mistakes.mistake import kind_of
from harness.mistakes.scoring import Hypothesis, Scorer
from harness.mistakes.slice_readings import READINGS, read_slice, reading_name
from harness.params import block_shapes, key, layer_dirs
from harness.spec import Case


def _short(k: str, case: Case) -> str:
    layer, direction, name = k.split("/")
    single = case.num_layers == 1 and case.num_directions == 1
    return name if single else f"{name} ({layer.replace('layer', 'layer ')}, {direction})"


def corrected_mapping(doctor: Scorer, hyp: Hypothesis) -> list[dict[str, str]]:
    """Per slice of the claimed layout: what the claim reads there and what it actually holds
    (found by matching the slice against the corrected canonical blocks)."""
    case, layout = doctor.case, doctor.layout
    tr = doctor.trial(hyp)
    truth = tr.canonical
    shapes = {key(la, d, n): s for la, d in layer_dirs(case)
              for n, s in block_shapes(case, la).items()}
    rows = []
    for t in layout.tensors(case):
        arr = doctor.native[t.name]
        for pl in t.placements:
            S = arr[pl.index]
            if pl.fold_forget_bias:
                S = S - case.forget_bias
            claimed = _claim_text(pl, case)
            actual = _identify(S, pl, truth, shapes, case)
            if pl.transform == "copy":
                actual = actual.replace(" (as stored, not transposed)", "")
            rows.append({"tensor": t.name, "slice": pl.where, "claimed": claimed,
                         "actually": "same" if actual == claimed else actual})
    return rows


def _claim_text(pl, case: Case) -> str:
    names = " + ".join(_short(s, case) for s in pl.sources)
    how = {"copy": "", "transpose": " transposed",
           "reshape": " (C-order reshape)"}[pl.transform]
    return names + how


def _identify(S: np.ndarray, pl, truth: dict[str, np.ndarray], shapes, case: Case) -> str:
    first = pl.sources[0]
    kind = kind_of(first)
    layer, direction, _ = first.split("/")
    scale = max(float(np.abs(S).max()), 1.0)
    same_ld = [k for k in truth if k.startswith(f"{layer}/{direction}/")]
    others = [k for k in truth if k not in same_ld]
    if S.ndim == 2 or kind in ("W", "R", "Wp"):
        for k in same_ld + others:
            if kind_of(k) not in ("W", "R", "Wp") or int(np.prod(shapes[k])) != S.size:
                continue
            for how in READINGS:
                if np.allclose(read_slice(S, shapes[k], how), truth[k], rtol=0, atol=1e-12 * scale):
                    words = reading_name(S.shape, shapes[k], how, note=False)
                    words = {"as stored (not transposed)": " (as stored, not transposed)",
                             "transposed": " transposed"}.get(words, f" ({words})")
                    return _short(k, case) + words
        return "none of the blocks as such (see the mistakes above)"
    # 1-D: biases and peepholes; a summed placement matches a sum of the truth's blocks
    candidates: list[tuple[str, np.ndarray]] = []
    for k in same_ld + others:
        if truth[k].shape != S.shape or kind_of(k) in ("W", "R", "Wp"):
            continue
        kr = k.replace("/bW_", "/bR_")
        summed = (f"{_short(k, case)} + {_short(kr, case)}", truth[k] + truth[kr]) if (
            kind_of(k) == "bW" and kr in truth) else None
        if summed and len(pl.sources) > 1:  # a summed slot: name the sum first
            candidates.append(summed)
        candidates.append((_short(k, case), truth[k]))
        if summed and len(pl.sources) == 1:
            candidates.append(summed)
    for name, v in candidates:
        if np.allclose(S, v, rtol=0, atol=1e-12 * scale):
            return name
    for name, v in candidates:
        d = v - S
        if np.ptp(d) < 1e-12 * scale and abs(d[0]) > 1e-12:
            return f"{name} {'-' if d[0] > 0 else '+'} {abs(d[0]):g} (an offset)"
        for f in (2.0, 0.5):
            if np.allclose(S * f, v, rtol=0, atol=1e-12 * scale) and np.any(v):
                return f"{name} x {1 / f:g}"
    if not any(np.any(v) for k, v in truth.items() if kind_of(k) == kind):
        return "not used (the framework does not add it)"
    if not np.any(S):
        return "zeros: the values the framework ran with are missing (fitted to the outputs)"
    return "none of the blocks as such (see the mistakes above)"


# The whole diagnosis -------------------------------------------------------------------------
