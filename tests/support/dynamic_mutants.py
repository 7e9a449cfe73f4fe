"""Planted bugs in the dynamic-quantization path of ``onnxruntime-dynamic-int8``, for the
quantized mutation test (``tests/adapters/test_adapter_dynamic_quantized.py``) and for measuring
the kill rate (docs/quantization.md, "Planted quantization bugs").

- ``weights-zero-point-ignored``: ONNX Runtime runs the quantized model with the weights' zero
  points set to 0, as a kernel that ignores them would read it, while the yardstick reads the
  quantized file as it is. The default quantizer's int8 weights are symmetric (zero point 0:
  nothing to ignore), so this mutant quantizes them affine (``WeightSymmetric`` False, an option
  of ``quantize_dynamic``) and the case's weights are skewed (:func:`skewed`) so that their zero
  points are far from 0.
- ``activation-range-wrong-axis``: a kernel that reduces the activation's range over the wrong
  axis (each row's own, then the first row's taken for the whole operand: the other rows are
  clipped to it). ONNX Runtime's kernel cannot be changed from outside, so this mutant is a
  kernel simulated by the float64 reference with the model's quantization but that range.

    PYTHONPATH=. python tests/support/dynamic_mutants.py   # kill rate on the LSTM cases
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from harness import compare, grids, quantization
from harness.adapters.onnxruntime_dynamic import ORT_ACTIVATIONS, OnnxRuntimeDynamicInt8
from harness.data import Inputs, Outputs
from harness.params import Canonical
from harness.prepare import Prepared
from harness.reference.layers import forward
from harness.spec import Case

CATALOGUE = {
    "weights-zero-point-ignored": "the int8 weights read without their zero point (affine "
                                  "weights, skewed)",
    "activation-range-wrong-axis": "the activation range reduced over the wrong axis (the "
                                   "first row's range for the whole operand; a simulated "
                                   "kernel)",
}
CASES = Path(__file__).resolve().parents[2] / "cases-quantized"
SKEW = 0.5  # the weights shifted by this x their largest magnitude: zero points far from 0


@dataclass(frozen=True)
class FirstRowRange(grids.DynamicActivation):
    """The planted range: reduced over the last axis (per row), the first row's taken."""

    def extent(self, block):
        return float(block.min(axis=-1)[0]), float(block.max(axis=-1)[0])


class AffineWeights(OnnxRuntimeDynamicInt8):
    """``onnxruntime-dynamic-int8`` with affine int8 weights (``WeightSymmetric`` False): the
    clean pair the zero-point mutant is set against."""

    name = "onnxruntime-dynamic-int8+affine-weights"
    weight_symmetric = False


class PlantedDynamic(OnnxRuntimeDynamicInt8):
    """``onnxruntime-dynamic-int8`` with one planted bug (:data:`CATALOGUE`)."""

    def __init__(self, bug: str) -> None:
        self.bug = bug
        self.name = f"onnxruntime-dynamic-int8+{bug}"
        self.weight_symmetric = bug != "weights-zero-point-ignored"

    def kernel_model(self, model):
        if self.bug != "weights-zero-point-ignored":
            return model
        import onnx
        from onnx import numpy_helper

        changed = onnx.ModelProto()
        changed.CopyFrom(model)
        nodes = [n for n in changed.graph.node if n.op_type == "DynamicQuantizeLSTM"]
        zeros = {n.input[i] for n in nodes for i in (9, 11)}  # W and R zero points
        for t in changed.graph.initializer:
            if t.name in zeros:
                t.CopyFrom(numpy_helper.from_array(
                    np.zeros_like(numpy_helper.to_array(t)), t.name))
        return changed

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        out = super()._run(case, native, inputs)
        if self.bug == "activation-range-wrong-axis":
            planted = replace(out.quantized, activations=FirstRowRange(
                ORT_ACTIVATIONS.qmin, ORT_ACTIVATIONS.qmax))
            sim = forward(case, Canonical(planted.weights), inputs,
                          quantization.precision_of(planted))
            out.y, out.h_n, out.c_n = sim.y, sim.h_n, sim.c_n
            out.note = f"simulated kernel ({CATALOGUE[self.bug]})"
        return out


def skewed(prep: Prepared) -> Prepared:
    """``prep`` with every weight matrix shifted by :data:`SKEW` x its largest magnitude (its
    affine int8 grid then has a zero point far from 0), the reference computed again."""
    tensors = {k: (v + SKEW * np.max(np.abs(v)) if k.rsplit("/", 1)[1][0] in "WR" else v)
               for k, v in prep.canonical.tensors.items()}
    canonical = Canonical(tensors)
    return replace(prep, canonical=canonical,
                   reference=forward(prep.case, canonical, prep.inputs))


def trials(prep: Prepared) -> list[tuple[str, object]]:
    """(what, pair result) of the clean adapters and each mutant on ``prep``'s case: the
    zero-point mutant and its clean pair on the skewed weights."""
    from harness.pairs import run_pair

    bent = skewed(prep)
    return [("clean", run_pair(prep, OnnxRuntimeDynamicInt8())),
            ("clean, affine weights, skewed", run_pair(bent, AffineWeights())),
            *((bug, run_pair(bent if bug == "weights-zero-point-ignored" else prep,
                             PlantedDynamic(bug))) for bug in CATALOGUE)]


def kill_rate(cases: list[Case] | None = None) -> tuple[int, int, list[str]]:
    """(killed, planted, one line per trial) over ``cases`` (default: the LSTM cases of
    cases-quantized): a mutant is killed when its pair is DIVERGED."""
    from harness.cases import discover
    from harness.prepare import prepare

    cases = cases or [c for c in discover([CASES]) if c.cell_kind.has_cell_state]
    lines, killed, planted = [], 0, 0
    for case in cases:
        names = ["onnxruntime-dynamic-int8", AffineWeights.name,
                 *(PlantedDynamic(bug).name for bug in CATALOGUE)]
        prep = prepare(case.model_copy(update={"adapters": names}))
        for what, r in trials(prep):
            if what in CATALOGUE:
                planted += 1
                killed += r.status == compare.DIVERGED
            lines.append(f"{case.name} {what}: {r.status}: {r.reason[:200]}")
    return killed, planted, lines


def main() -> int:
    killed, planted, lines = kill_rate()
    print("\n".join(lines))
    print(f"killed {killed} of {planted} planted dynamic-quantization bugs")
    return 0 if killed == planted else 1


if __name__ == "__main__":
    sys.exit(main())
