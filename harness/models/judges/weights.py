"""The weights judge of a compare pairing (:class:`WeightsJudge`, docs/compare.md): the shipped
layer's canonical parameters against the original's, equal within the rounding of the format
they were stored in; where they differ, the layout doctor names the mistake at once. What it
measures is :mod:`harness.models.weights_measure`'s; the verdict is decided here alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.compare import DIVERGED, PASS
from harness.judges.verdict import Verdict
from harness.models.judges.pairing import PairingFigures, PairingJudge

if TYPE_CHECKING:
    from harness.doctor.findings import Diagnosis
    from harness.models.layers import Layer

DOCTOR_BUDGET_S = 30.0


def _num(v: float) -> float | None:
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class WeightsFigures(PairingFigures):
    """The worst difference (``max_abs``), its multiple of the rounding allowed
    (``rounding_ratio``) and that rounding (``eps``); ``tensors``: the canonical blocks that
    differ (``forward/W_r``); ``semantics``: the case fields that differ (``reset_after:
    original true, shipped false``); ``mistakes``: the doctor's named mistakes, ``mapping`` its
    corrected slices (tensor, slice, claimed, actually); ``diagnosis``: the doctor's whole
    answer."""

    max_abs: float = 0.0
    rounding_ratio: float = 0.0
    eps: float = 0.0
    tensors: tuple[str, ...] = ()
    semantics: tuple[str, ...] = ()
    mistakes: tuple[str, ...] = ()
    mapping: tuple[dict[str, str], ...] = ()
    diagnosis: Diagnosis | None = field(default=None, repr=False, compare=False)

    def heading(self) -> str:
        return "weights"

    def summary(self, status: str) -> str:
        """The doctor's named mistakes, else the blocks that differ, else the semantics."""
        if self.mistakes:
            return " + ".join(self.mistakes)
        if self.tensors:
            return "weights differ in " + ", ".join(self.tensors[:6])
        if self.semantics:
            return "computes differently: " + "; ".join(self.semantics)
        return f"weights {status}"

    def lines(self) -> list[str]:
        return [f"{r['tensor']} {r['slice']}: holds {r['actually']}, read as {r['claimed']}"
                for r in self.mapping]

    def table(self) -> tuple[list[str], list[list[str]]] | None:
        if not self.mapping:
            return None
        return (["tensor", "slice", "read as", "holds"],
                [[r["tensor"], r["slice"], r["claimed"], r["actually"]] for r in self.mapping])

    def record(self) -> dict[str, Any]:
        return {"figures": {"max_abs": _num(self.max_abs),
                            "rounding_ratio": _num(self.rounding_ratio), "eps": _num(self.eps)},
                "tensors": list(self.tensors), "semantics": list(self.semantics),
                "mistakes": list(self.mistakes), "mapping": list(self.mapping)}


class WeightsJudge(PairingJudge):
    """PASS where every canonical block is equal within rounding and the layers compute alike
    (the same semantics); DIVERGED otherwise, with the doctor's diagnosis."""

    kind = "weights"
    figures = WeightsFigures

    def judge(self, original: Layer, shipped: Layer, *, budget_s: float = DOCTOR_BUDGET_S
              ) -> Verdict:
        """The weights verdict of ``shipped`` against ``original`` (same cell and sizes)."""
        import numpy as np

        from harness.models import weights_measure as m

        ratios = m.block_ratios(original, shipped)
        semantics = tuple(m.semantics(original, shipped))
        differ = tuple(k for k, r in ratios.items() if r > 1.0)
        worst = max(ratios.values(), default=0.0)
        max_abs = max((float(np.abs(shipped.canonical[k] - v).max(initial=0.0))
                       for k, v in original.canonical.tensors.items()), default=0.0)
        eps = m.rounding(original, shipped)
        quantized = bool(m.grids_of(original, shipped))
        if not differ and not semantics:
            within = (f"every quantized block within half a step of its own grid, the float "
                      f"ones within {m.stored_format(original, shipped)} rounding"
                      if quantized else
                      f"every block equal within {m.stored_format(original, shipped)} rounding")
            return Verdict(self.kind, PASS, f"{within} (worst {worst:.2g}x)",
                           figures=WeightsFigures(max_abs, worst, eps))
        offences = m.quantized_offences(original, shipped) if quantized else []
        if offences and not semantics and all("what its values need" in o for o in offences):
            # a grid's scale explains every offence: no layout mistake to search for
            return Verdict(self.kind, DIVERGED, "; ".join(offences[:6]) + (
                f" (and {len(offences) - 6} more)" if len(offences) > 6 else ""),
                figures=WeightsFigures(max_abs, worst, eps, differ))
        dx = m.diagnose(original, shipped, budget_s)
        best = dx.best
        # the doctor read the layer as a one-layer module: said again in the file's terms
        mistakes = (tuple(shipped.in_file_terms(f.text) for f in best.hypothesis)
                    if best is not None else ())
        mapping = tuple({k: shipped.in_file_terms(v) if isinstance(v, str) else v
                         for k, v in r.items()} for r in dx.mapping if r["actually"] != "same")
        what = []
        if differ:
            what.append(f"{len(differ)} of {len(ratios)} blocks differ ("
                        f"{', '.join(differ[:6])}" + (" ..." if len(differ) > 6 else "")
                        + f"; max abs {max_abs:.3g})")
        what += offences
        if semantics:
            what.append("the layers compute differently (" + "; ".join(semantics) + ")")
        if mistakes:
            found = "the doctor finds: " + " + ".join(mistakes)
        elif best is not None:
            found = "the shipped reading already reproduces the original's outputs"
        else:
            found = ("the doctor finds no known layout mistake that explains it "
                     f"({dx.evaluated} hypotheses tried)")
        return Verdict(self.kind, DIVERGED, "; ".join(what) + "; " + found,
                       figures=WeightsFigures(max_abs, worst, eps, differ, semantics, mistakes,
                                              mapping, dx))


WEIGHTS = WeightsJudge()
