"""``litert-shipped``: the case's ``shipped:`` .tflite run as the file is, in the LiteRT
interpreter (CPU), never rebuilt from the case's weights (docs/cases.md, A shipped file).

The file runs itself where it is the layer (its one input feeds the op, its one output is the
op's y); where the op sits inside a larger model, the op is cut out as a one-op .tflite of the
file's own op, constants and grids (:func:`harness.frameworks.litert_run.cut`), as compare runs it.
Its state tensors are the op's own variables, zero when the interpreter starts, and it outputs
y only. A quantized file is a quantized runtime's pair: judged by the quantized judge (SQNR over
y against an ideal quantization, the kernel against the integer-aware reference on the file's
own grids) in a case with ``quantization:``, not applicable in one without.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import NotApplicable
from harness.spec import Case

NOT_SHIPPED = "the case names no shipped .tflite (shipped: {file: model.tflite})"
Y_ONLY = "the shipped .tflite outputs y only"


class LiteRTShipped(Adapter):
    name = "litert-shipped"
    title = "the case's shipped .tflite, run as it is in the LiteRT interpreter (CPU)"
    framework = "litert"
    layout_name = None  # the file's own weights run, never the case's
    requires = ("ai_edge_litert",)
    named_only = ("runs a case's shipped: .tflite only; a case with one runs it without "
                  "naming it")
    capabilities = Capabilities(
        dtypes=frozenset({"float32"}),
        cell_clip=True,  # where the file's op clips c (the case must say so: the file tells)
        variable_lengths=False,
        initial_state=False,
        multi_layer=False,
        reasons={
            "dtypes": "litert-shipped: the shipped .tflite computes in float32 (or its integer "
                      "grids): a float32 case",
            "variable_lengths": "litert-shipped: a fused .tflite LSTM takes no lengths",
            "initial_state": "litert-shipped: the shipped .tflite starts from zero states "
                             "(its state tensors are the op's own variables)",
            "multi_layer": "litert-shipped: the shipped file runs one recurrent layer",
            "gradients": "litert-shipped: a .tflite is inference only (no backward pass)",
        },
    )

    def check_available(self) -> None:
        from harness.frameworks.litert import import_litert

        import_litert()

    def asked_for(self, case: Case) -> bool:
        return _suffix(case) == ".tflite"

    def judged_quantized(self, case: Case) -> bool:
        return self.asked_for(case) and _layer(case).scheme != "float"

    def not_applicable_reason(self, case: Case) -> str | None:
        if not self.asked_for(case):
            return f"{self.name}: {NOT_SHIPPED}"
        why = super().not_applicable_reason(case)
        if why is not None:
            return why
        layer = _layer(case)
        fixed = (layer.batch, layer.seq_len)
        if any(f is not None and f != c for f, c in zip(fixed, (case.batch, case.seq_len),
                                                         strict=True)):
            return (f"{self.name}: the shipped .tflite is shaped for batch {layer.batch}, "
                    f"{layer.seq_len} steps; the case runs batch {case.batch}, {case.seq_len} "
                    "steps (give the case the file's batch and seq_len)")
        if layer.scheme != "float" and case.quantization is None:
            return (f"{self.name}: the shipped .tflite is quantized ({layer.scheme}): a "
                    "quantized file is judged by its SQNR in a case with quantization: "
                    "(docs/quantization.md)")
        return None

    def route_note(self, case: Case) -> str | None:
        op = _layer(case).tflite
        return ("ran the shipped file itself" if op.whole or op.op == "WHILE"
                else "ran the shipped file's op cut out as a one-op .tflite")

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        from harness.frameworks.litert_run import cut, interpret
        from harness.reference.litert_int8_exact import bit_exact

        op = _layer(case).tflite
        model = op.model if op.whole or op.op == "WHILE" else cut(op.model, op.index)
        try:
            raw = interpret(model, op.feed(inputs.x))
        except ValueError as exc:  # the interpreter's words on a shape it cannot take
            raise NotApplicable(f"{self.name}: the shipped .tflite does not take the case's "
                                f"input ({str(exc).splitlines()[0][:200]})") from None
        y = op.in_time_order(raw)  # a go_backwards op's y in input time order
        absent = {"h_n": Y_ONLY, **({"c_n": Y_ONLY} if case.cell_kind.has_cell_state else {})}
        note = f"the shipped {op.op} op {op.index} ({op.scheme})"
        if op.quantized is not None:
            said = bit_exact(op.model, inputs.x, raw) if op.whole else ""
            note += f"; {said}" if said else ""
        return Outputs(y=y, h_n=None, c_n=None, absent=absent, note=note,
                       quantized=op.quantized)


def _suffix(case: Case) -> str | None:
    return Path(case.shipped.file).suffix.lower() if case.shipped is not None else None


def _layer(case: Case):  # noqa: ANN202  (harness.readers.deployed.FileLayer)
    from harness.readers.deployed import shipped_layer

    return shipped_layer(case)
