"""Planted bugs in ``litert-dynamic`` (the hybrid LSTM kernel), for measuring what its judge
catches (docs/quantization.md, "Planted bugs in the dynamic path"): the interpreter runs a
changed model while the yardstick reads the converted file, or a kernel is simulated by the
float64 reference with the model's weights and another activation quantization.

- ``gate-weight-scale``, ``weights-as-uint8``: as for ``litert-int8-ref``
  (:mod:`quantized_mutants`);
- ``inputs-asymmetry-flipped``: the op's ``asymmetric_quantize_inputs`` flipped;
- ``sim-per-tensor``: the activations symmetric over the whole operand, not per row;
- ``sim-first-row-range``: the first row's range for the whole operand (the others clipped);
- ``sim-unquantized``: float activations (a weights-only kernel).

    PYTHONPATH=.:tests/support python tests/support/litert_dynamic_mutants.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import quantized_mutants as qm

from harness import grids, quantization
from harness.adapters.litert_quantized import LiteRTDynamic
from harness.params import Canonical
from harness.reference.layers import forward

BUGS = ("gate-weight-scale", "weights-as-uint8", "inputs-asymmetry-flipped", "sim-per-tensor",
        "sim-first-row-range", "sim-unquantized")


def _flip(m, ops) -> None:
    for op in ops:
        op.builtinOptions.asymmetricQuantizeInputs = not op.builtinOptions.asymmetricQuantizeInputs


@dataclass(frozen=True)
class _FirstRow(grids.DynamicActivation):
    def extent(self, block):
        return float(block.min(axis=-1)[0]), float(block.max(axis=-1)[0])


SIMULATED = {"sim-per-tensor": grids.DynamicActivation(-127, 127, symmetric=True),
             "sim-first-row-range": _FirstRow(-127, 127, symmetric=True),
             "sim-unquantized": None}


class PlantedDynamic(LiteRTDynamic):
    """``litert-dynamic`` with one planted bug (:data:`BUGS`)."""

    def __init__(self, bug: str) -> None:
        self.bug = bug
        self.name = f"litert-dynamic+{bug}"

    def kernel_model(self, model: bytes) -> bytes:
        change = {"gate-weight-scale": qm._forget_scale, "weights-as-uint8": qm._as_uint8,
                  "inputs-asymmetry-flipped": _flip}.get(self.bug)
        return model if change is None else qm._repacked(model, change)

    def _run(self, case, native, inputs):
        out = super()._run(case, native, inputs)
        if self.bug in SIMULATED:
            model = replace(out.quantized, activations=SIMULATED[self.bug])
            out.y = forward(case, Canonical(model.weights), inputs,
                            quantization.precision_of(model)).y
            out.h_n = None if out.h_n is None else qm._h_from(case, out.y)
            out.note, out.handed = f"simulated kernel ({self.bug})", None
        return out


def main() -> int:
    from harness.cases import discover
    from harness.pairs import run_pair
    from harness.prepare import prepare

    cases = [c for c in discover([qm.CASES]) if c.cell_kind.has_cell_state]
    names = ["litert-dynamic", *(PlantedDynamic(b).name for b in BUGS)]
    for case in cases:
        prep = prepare(case.model_copy(update={"adapters": names}))
        for bug in (None, *BUGS):
            r = run_pair(prep, LiteRTDynamic() if bug is None else PlantedDynamic(bug))
            print(f"{case.name} {bug or 'clean'}: {r.status}: {r.reason[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
