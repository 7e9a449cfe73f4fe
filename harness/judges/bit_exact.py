"""Pairs judged to the bit (docs/quantization.md, "The integer reference"): an adapter that
declares ``bit_exact_reference`` (the integer reference it must equal, e.g. ``litert-int8``:
:mod:`harness.reference.litert_int8_lstm`) hands the converted model it ran in
``Outputs.models["tflite"]``; the judge runs the integer reference on that model and the case's
float input, and every output value must equal the reference's. Where one does not, the reason
says where: the tensor, the steps, how many values and how many integer steps off. The cost
question stays the quantized judge's (:class:`~harness.judges.quantized.CostFigures`, composed
here), and the rows are the quantized judge's, against the integer-aware reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from harness import compare
from harness.judges.base import Measured
from harness.judges.quantized import CostFigures, QuantizedJudge
from harness.judges.verdict import Disagrees, Figures, ScriptQuestion
from harness.reference.step_differences import StepDifferences

if TYPE_CHECKING:
    import pandas as pd

    from harness.adapters.base import Adapter
    from harness.data import Outputs
    from harness.prepare import Prepared
    from harness.spec import Case

REFERENCES = {"litert-int8": "LiteRT's 8x8->16 LSTM kernel"}
"""The integer references an adapter may declare as its ``bit_exact_reference``."""


@dataclass(frozen=True)
class OutputDifference(StepDifferences):
    """One output tensor against the integer reference (:class:`StepDifferences`)."""

    tensor: str

    def words(self) -> str:
        return f"{self.tensor}: {self.counted()} ({self.steps()}), up to {self.max_steps} steps off"

    def record(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "differing": list(self.differing),
                "per_step": self.per_step, "max_steps": self.max_steps}

    @classmethod
    def from_record(cls, doc: Any) -> OutputDifference:
        try:
            return cls(str(doc["tensor"]), differing=tuple(int(n) for n in doc["differing"]),
                       per_step=int(doc["per_step"]), max_steps=int(doc["max_steps"]))
        except (TypeError, KeyError, ValueError):
            raise Disagrees("has a malformed bit_exact record in run.json (expected "
                            "[{tensor, differing, per_step, max_steps}])") from None


def output_difference(model: bytes, x: np.ndarray, y: np.ndarray) -> OutputDifference:
    """The kernel's float output ``y`` [B, T, H·D] of ``model`` against the integer reference
    run on the same float input ``x`` [B, T, I], in steps of the model's output grid."""
    from harness.frameworks import litert_flatbuffer
    from harness.reference.litert_int8_lstm import run_model

    flat = litert_flatbuffer.read(model)
    [out] = [int(i) for i in flat.subgraph.outputs]
    producer = next(op for op in flat.ops if out in op.outputs)
    grid = flat.grid(producer.inputs[0]) if producer.name == "DEQUANTIZE" else None
    want = run_model(model, np.asarray(x, dtype=np.float32)).output
    got = np.asarray(y, dtype=np.float32).reshape(want.shape)
    if grid is None:  # not a float model around an integer kernel: compare the values
        apart = (got != want).astype(np.int64)
    else:
        scale = float(grid.scale)
        steps = np.rint(np.abs(got.astype(np.float64) - want.astype(np.float64)) / scale)
        apart = np.where(got != want, np.maximum(steps, 1), 0).astype(np.int64)
    name = flat.subgraph.tensors[out].name.decode(errors="replace")
    return OutputDifference(name, differing=tuple(int(n) for n in (apart != 0).sum(axis=(0, 2))),
                            per_step=int(apart.shape[0] * apart.shape[2]),
                            max_steps=int(apart.max(initial=0)))


@dataclass(frozen=True)
class BitExactFigures(Figures):
    """The output's differences from the integer reference (``reference``, a key of
    :data:`REFERENCES`) and the cost (:class:`CostFigures`), kept in run.json as ``bit_exact``:
    the cost's record (its SQNR) with the reference and the differences beside it."""

    key: ClassVar[str] = "bit_exact"
    plots: ClassVar[tuple[str, ...]] = CostFigures.plots
    always_plot_words: ClassVar[tuple[str, str]] = CostFigures.always_plot_words
    columns: ClassVar[tuple[str, ...]] = CostFigures.columns

    cost_figures: CostFigures = field(default_factory=CostFigures)
    bit_exact_reference: str = "litert-int8"
    differences: tuple[OutputDifference, ...] = ()
    refused: str = ""  # why the integer reference does not model the model ("": it does)

    @property
    def exact(self) -> bool:
        return not self.refused and all(d.exact for d in self.differences)

    def words(self) -> str:
        """The pair's bit-exactness in the words its reason says."""
        if self.refused:
            return (f"not judged bit-exact: the integer reference ({self.bit_exact_reference}, "
                    f"{REFERENCES[self.bit_exact_reference]}) does not model this model: "
                    f"{self.refused}")
        if self.exact:
            return (f"bit-exact: every output value equals the integer reference's "
                    f"({self.bit_exact_reference}, {REFERENCES[self.bit_exact_reference]})")
        return (f"not bit-exact against the integer reference ({self.bit_exact_reference}, "
                f"{REFERENCES[self.bit_exact_reference]}): "
                + "; ".join(d.words() for d in self.differences if not d.exact))

    def record(self) -> dict[str, Any]:
        return (self.cost_figures.record() | {
            "reference": self.bit_exact_reference,
            "differences": [d.record() for d in self.differences]}
            | ({"refused": self.refused} if self.refused else {}))

    @classmethod
    def from_record(cls, record: Any) -> BitExactFigures:
        cost = CostFigures.from_record(record)
        doc: dict[str, Any] = record
        if doc.get("reference") not in REFERENCES or not isinstance(doc.get("differences"), list):
            raise Disagrees("is judged bit-exact but its bit_exact record in run.json has no "
                            "reference and differences (bit_exact: {sqnr_db, ideal_sqnr_db, "
                            "reference, differences})")
        return cls(cost, doc["reference"],
                   tuple(OutputDifference.from_record(d) for d in doc["differences"]),
                   str(doc.get("refused", "")))

    def read_back(self, rows: pd.DataFrame) -> BitExactFigures:
        return replace(self, cost_figures=self.cost_figures.read_back(rows))

    def worst_text(self, worst: pd.Series, fmt: Callable[[float], str]) -> str:
        return f"{self.words().split(':')[0]}; {self.cost_figures.worst_text(worst, fmt)}"

    def script(self, case: Case) -> ScriptQuestion:
        return self.cost_figures.script(case)


class BitExactJudge(QuantizedJudge):
    """A quantized LSTM pair of an adapter that declares ``bit_exact_reference``: DIVERGED
    where any output value differs from the integer reference's; otherwise the quantized
    judge's verdict (its rows within output steps, its cost)."""

    kind = "bit-exact"
    figures = BitExactFigures
    evidence = "bit_exact record"

    def claims(self, case: Case, adapter: Adapter | None) -> bool:
        return (super().claims(case, adapter) and adapter is not None
                and getattr(adapter, "bit_exact_reference", None) in REFERENCES
                and case.cell_kind.has_cell_state)

    def measure(self, prep: Prepared, adapter: Adapter, out: Outputs) -> Measured:
        m = super().measure(prep, adapter, out)
        assert isinstance(m.figures, CostFigures)
        from harness.reference.litert_int8_lstm import NotModelled

        reference: str = adapter.bit_exact_reference  # type: ignore[attr-defined]
        try:
            figures = BitExactFigures(m.figures, reference, (output_difference(
                out.models["tflite"], prep.inputs.x, out.y),))
        except NotModelled as exc:
            figures = BitExactFigures(m.figures, reference, refused=str(exc))
        notes = "; ".join(n for n in (figures.words(), m.notes) if n)
        return Measured(m.rows, m.tolerance, figures, notes, m.passed and figures.exact)

    def plain(self, rows: pd.DataFrame, case: Case, adapter: str, figures: Figures
              ) -> tuple[str, str]:
        exact = figures if isinstance(figures, BitExactFigures) else BitExactFigures()
        if not exact.exact:
            return compare.DIVERGED, ""
        return super().plain(rows, case, adapter, exact.cost_figures)

