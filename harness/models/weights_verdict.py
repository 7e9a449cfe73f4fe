"""The weights verdict of a pairing: the shipped layer's canonical parameters against the
original's, equal within the rounding of the format they were stored in; where they differ,
the layout doctor names the mistake at once (:func:`judge_weights`, the one place that
decides; renderers only show :class:`WeightsVerdict`).

Two values agree when ``|a - b| <= eps · scale`` (compared in float64), ``eps`` the machine
epsilon of the coarser of the two layers' stored formats (float32: 1.2e-7; float16: 9.8e-4;
bfloat16: 7.8e-3) and ``scale`` the tensor's largest magnitude in either layer: a port that
rounds float64 weights to float32 agrees, a swapped gate block (a difference of the order of
the weights themselves) does not.

The doctor (:func:`harness.doctor.diagnose`) is given what a user would otherwise build by
hand: the expected outputs are the float64 reference on the ORIGINAL's weights, on the case's
generated inputs, and the claimed reading is the SHIPPED layer's tensors in its own layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.compare import DIVERGED, PASS
from harness.doctor.findings import Diagnosis
from harness.dtypes import FORMATS
from harness.models.layers import STORED_FORMATS, Layer

# case fields that change what a layer computes, beside its sizes: compared one by one
SEMANTICS = ("dir_mode", "reset_after", "recurrent_activation", "input_forget", "peepholes",
             "gate_clip", "cell_clip", "proj_clip", "forget_bias")
DOCTOR_BUDGET_S = 30.0


@dataclass(frozen=True)
class WeightsVerdict:
    """``status`` PASS or DIVERGED; ``reason`` in a sentence; ``figures``: the worst
    difference (``max_abs``) and its multiple of the rounding allowed (``rounding_ratio``);
    ``tensors``: the canonical blocks that differ (``forward/W_r``); ``semantics``: the case
    fields that differ (``reset_after: true vs false``); ``mistakes``: the doctor's named
    mistakes, ``mapping`` its corrected slices (tensor, slice, claimed, actually)."""

    status: str
    reason: str
    figures: dict[str, float] = field(default_factory=dict)
    tensors: tuple[str, ...] = ()
    semantics: tuple[str, ...] = ()
    mistakes: tuple[str, ...] = ()
    mapping: tuple[dict[str, str], ...] = ()
    diagnosis: Diagnosis | None = field(default=None, repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.status == PASS


def rounding(a: Layer, b: Layer) -> float:
    """Machine epsilon of the coarser of the two layers' stored formats."""
    coarser = min(STORED_FORMATS.index(a.dtype), STORED_FORMATS.index(b.dtype))
    return float(FORMATS[STORED_FORMATS[coarser]].eps)


def block_ratios(original: Layer, shipped: Layer) -> dict[str, float]:
    """Per canonical block (``forward/W_r``): its largest difference as a multiple of the
    rounding allowed (0: equal; above 1: differs)."""
    eps = rounding(original, shipped)
    out = {}
    for k, want in original.canonical.tensors.items():
        got = shipped.canonical.tensors[k]
        scale = max(float(np.abs(want).max(initial=0.0)), float(np.abs(got).max(initial=0.0)))
        diff = float(np.abs(got - want).max(initial=0.0))
        allowed = eps * scale
        out[k.split("/", 1)[1]] = (0.0 if diff == 0 else diff / allowed if allowed > 0
                                   else float("inf"))
    return out


def distance(original: Layer, shipped: Layer) -> float:
    """How far two layers' weights are, whatever the order they hold them in: the largest
    difference of their sorted values, over their scale. A gate order, a transposition or
    swapped directions moves no value: 0 for them, as for the same weights; other weights are
    far."""
    a = np.sort(np.concatenate([t.ravel() for t in original.canonical.tensors.values()]))
    b = np.sort(np.concatenate([t.ravel() for t in shipped.canonical.tensors.values()]))
    if a.shape != b.shape:
        return float("inf")
    scale = max(float(np.abs(a).max(initial=0.0)), 1e-300)
    return float(np.abs(a - b).max(initial=0.0)) / scale


def agree(original: Layer, shipped: Layer) -> bool:
    """Same semantics, and every block within rounding."""
    return not _semantics(original, shipped) and all(
        r <= 1.0 for r in block_ratios(original, shipped).values())


def _semantics(original: Layer, shipped: Layer) -> list[str]:
    out = []
    for name in SEMANTICS:
        a, b = getattr(original.case, name), getattr(shipped.case, name)
        if a != b:
            def say(v: object) -> str:
                return str(v).lower() if isinstance(v, bool) or v is None else str(v)

            out.append(f"{name}: original {say(a)}, shipped {say(b)}")
    return out


def judge_weights(original: Layer, shipped: Layer, *, budget_s: float = DOCTOR_BUDGET_S
                  ) -> WeightsVerdict:
    """The weights verdict of ``shipped`` against ``original`` (same cell and sizes), with the
    doctor's diagnosis where they differ."""
    ratios = block_ratios(original, shipped)
    semantics = tuple(_semantics(original, shipped))
    differ = tuple(k for k, r in ratios.items() if r > 1.0)
    worst = max(ratios.values(), default=0.0)
    max_abs = max((float(np.abs(shipped.canonical[k] - v).max(initial=0.0))
                   for k, v in original.canonical.tensors.items()), default=0.0)
    figures = {"max_abs": max_abs, "rounding_ratio": worst, "eps": rounding(original, shipped)}
    if not differ and not semantics:
        return WeightsVerdict(PASS, f"every block equal within {_fmt(original, shipped)} "
                              f"rounding (worst {worst:.2g}x)", figures)
    dx = _diagnose(original, shipped, budget_s)
    best = dx.best
    mistakes = tuple(m.text for m in best.hypothesis) if best is not None else ()
    mapping = tuple(r for r in dx.mapping if r["actually"] != "same")
    what = []
    if differ:
        what.append(f"{len(differ)} of {len(ratios)} blocks differ ({', '.join(differ[:6])}"
                    + (" ..." if len(differ) > 6 else "") + f"; max abs {max_abs:.3g})")
    if semantics:
        what.append("the layers compute differently (" + "; ".join(semantics) + ")")
    if mistakes:
        found = "the doctor finds: " + " + ".join(mistakes)
    elif best is not None:
        found = "the shipped reading already reproduces the original's outputs"
    else:
        found = ("the doctor finds no known layout mistake that explains it "
                 f"({dx.evaluated} hypotheses tried)")
    return WeightsVerdict(DIVERGED, "; ".join(what) + "; " + found, figures, differ, semantics,
                          mistakes, mapping, dx)


def _fmt(original: Layer, shipped: Layer) -> str:
    coarser = min(STORED_FORMATS.index(original.dtype), STORED_FORMATS.index(shipped.dtype))
    return STORED_FORMATS[coarser]


def _diagnose(original: Layer, shipped: Layer, budget_s: float) -> Diagnosis:
    """The doctor on the shipped layer's tensors as its layout reads them, against the float64
    reference on the original's weights (its semantics) on the case's generated inputs."""
    from harness import reference
    from harness.compare import tolerance_for
    from harness.data import generate
    from harness.doctor import diagnose
    from harness.layouts import get_layout

    inputs = generate(original.case)
    expected = reference.run(original.case, original.canonical, inputs).named()
    return diagnose(shipped.case, get_layout(shipped.layout), shipped.native, inputs, expected,
                    source="the float64 reference on the original's weights",
                    tol=tolerance_for(shipped.case, "expected"), budget_s=budget_s)
