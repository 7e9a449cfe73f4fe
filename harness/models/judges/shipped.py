"""The shipped-outputs judge of a compare pairing (:class:`ShippedOutputsJudge`,
docs/compare.md): the shipped layer run as it is, in its own runtime, per step, layer and
direction, against the float64 reference on the ORIGINAL's weights, by the run's verdict rules
(tolerance and noise floor: :mod:`harness.compare`). An .onnx layer runs in ONNX Runtime and in
OpenVINO: one verdict each. A .tflite layer runs as the file is in the LiteRT interpreter
(:func:`tflite_verdict`); a quantized one is judged as a quantized run is, SQNR and ideal in dB,
its reason naming what in the file explains a difference: the grids it declares for one set of
integers (:func:`harness.frameworks.litert_flatbuffer.grid_conflict_words`) and a cell state
grid the int8 kernel saturates or cannot compute on (:mod:`harness.models.judges.tflite_causes`).
Running it is :mod:`harness.models.shipped_run`'s; the verdict and
its words are decided here alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.compare import DIVERGED, NOT_APPLICABLE, PASS
from harness.judges.verdict import Verdict
from harness.models.judges.pairing import PairingFigures, PairingJudge

if TYPE_CHECKING:
    import numpy as np

    from harness.data import Inputs
    from harness.models.layers import Layer


@dataclass(frozen=True)
class ShippedFigures(PairingFigures):
    """``adapter``: what ran the shipped layer ("" where nothing could); the worst multiple of
    tolerance (``tol_ratio``) and largest difference (``max_abs``; NaN: nothing compared);
    ``first``: where it first diverges (``y L0 d0 t=3``), "" where it does not; ``note``: how
    the inputs came (``--inputs``). What ran, for a reproducer: the ``inputs``, the ``model``
    (an ONNX node's bytes) and the outputs it gave (``got``)."""

    adapter: str = ""
    tol_ratio: float = math.nan
    max_abs: float = math.nan
    first: str = ""
    note: str = ""
    inputs: Inputs | None = field(default=None, repr=False, compare=False)
    model: bytes | None = field(default=None, repr=False, compare=False)
    got: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def heading(self) -> str:
        return f"outputs ({self.adapter or 'not run'})"

    def cell(self, status: str) -> str:
        return status + (f" ({self.adapter})" if self.adapter else "")

    def summary(self, status: str) -> str:
        return f"outputs {self.cell(status)}"

    def repro_data(self) -> dict[str, Any]:
        """What a reproducer judges the outputs against beside the float64 reference (a
        quantized .tflite's references: :class:`TfliteFigures`); none here."""
        return {}

    def record(self) -> dict[str, Any]:
        measured = {k: v for k, v in (("tol_ratio", self.tol_ratio), ("max_abs", self.max_abs))
                    if not math.isnan(v)}
        return {"adapter": self.adapter, "first": self.first,
                "figures": {k: (v if math.isfinite(v) else None) for k, v in measured.items()}}


class ShippedOutputsJudge(PairingJudge):
    """The run's pair status of the shipped layer (PASS, DIVERGED, unavailable, not
    applicable, error), with where it first diverges."""

    kind = "shipped-outputs"
    figures = ShippedFigures

    def judge_all(self, original: Layer, shipped: Layer,
                  data: np.ndarray | dict[str, np.ndarray] | None = None
                  ) -> tuple[Verdict, ...]:
        """The outputs verdicts of ``shipped``: one per runtime of an ONNX node (ONNX Runtime,
        OpenVINO), else its framework's, on generated inputs or on ``data`` (``--inputs``)."""
        from harness.models.shipped_run import layer_inputs

        inputs, note = (None, "") if data is None else layer_inputs(shipped, data)
        if shipped.ir is not None:  # an OpenVINO IR's op: at the default precision and f32
            from harness.models.openvino_ir import ir_adapters

            return tuple(self.judge(original, shipped, inputs, adapter=a, note=note)
                         for a in ir_adapters(shipped.ir))
        if shipped.tflite is not None:  # a .tflite: the file in LiteRT
            return (tflite_verdict(self.kind, original, shipped, inputs, note),)
        if shipped.onnx is None:
            return (self.judge(original, shipped, inputs, note=note),)
        from harness.models.onnx_run import RUNTIMES, ShippedNode

        return tuple(self.judge(original, shipped, inputs, adapter=ShippedNode(shipped.onnx, r),
                                note=note) for r in RUNTIMES)

    def judge(self, original: Layer, shipped: Layer, inputs: Inputs | None = None, *,
              adapter: Any = None, note: str = "") -> Verdict:
        """Run ``shipped`` in its framework (or by ``adapter``) on ``inputs`` (default:
        generated from its case) and judge its outputs against the float64 reference on
        ``original``'s weights."""
        from harness import compare
        from harness.adapters import get_adapter
        from harness.models.shipped_run import run_shipped

        if adapter is None and shipped.adapter is None:
            return Verdict(self.kind, NOT_APPLICABLE, f"no adapter runs "
                           f"{shipped.layout!r} layers in their framework",
                           figures=ShippedFigures(note=note))
        adapter = adapter if adapter is not None else get_adapter(shipped.adapter)
        ran = run_shipped(original, shipped, adapter, inputs)
        r = ran.result
        kept = {"adapter": adapter.name, "note": note, "inputs": ran.inputs,
                "model": ran.model, "got": ran.got}
        if r.rows is None or r.rows.empty:
            return Verdict(self.kind, r.status, r.reason or r.status,
                           figures=ShippedFigures(**kept))
        rows = r.rows
        tol_ratio = float(rows["tol_ratio"].max())
        first = compare.first_divergence(rows)
        # the rows are the layer's alone: its stacked index in the file, not "L0"
        where = shipped.in_file_terms(compare.where(first)) if first is not None else ""
        if r.status == PASS:
            reason = f"within tolerance at every step (worst {tol_ratio:.2g}x)"
        elif r.status == DIVERGED and where:
            reason = (f"first diverges at {where} ({float(first['tol_ratio']):.3g}x tolerance; "
                      f"worst {tol_ratio:.3g}x)")
        else:
            reason = r.reason or r.status
        if r.reason and r.status == PASS:
            reason = f"{reason}; {r.reason}"
        if note:
            reason = f"{reason}; {note}"
        return Verdict(self.kind, r.status, reason, rows,
                       ShippedFigures(tol_ratio=tol_ratio, max_abs=float(rows["max_abs"].max()),
                                      first=where, **kept))


SHIPPED_OUTPUTS = ShippedOutputsJudge()


# A .tflite layer: the file in the LiteRT interpreter (harness.models.tflite_run) -----------

@dataclass(frozen=True)
class TfliteFigures(ShippedFigures):
    """:class:`ShippedFigures` with a quantized file's SQNR over y and an ideal quantization's
    (dB; inf: no error)."""

    sqnr_db: float = math.nan
    ideal_sqnr_db: float = math.nan
    exact: str = ""
    # the quantized judgement's references (harness.quantization.Judgement.references)
    references: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def repro_data(self) -> dict[str, Any]:
        return dict(self.references)

    def cell(self, status: str) -> str:
        if math.isnan(self.sqnr_db):
            return super().cell(status)
        return (f"{status} ({self.adapter}; SQNR {self.sqnr_db:.1f} dB, ideal "
                f"{self.ideal_sqnr_db:.1f} dB)")

    def record(self) -> dict[str, Any]:
        out = super().record()
        for k in ("sqnr_db", "ideal_sqnr_db"):
            v = getattr(self, k)
            if not math.isnan(v):
                out["figures"][k] = round(v, 4) if math.isfinite(v) else None
        if self.exact:
            out["integer_reference"] = self.exact
        return out


def tflite_verdict(kind: str, original: Layer, shipped: Layer, inputs: Inputs | None,
                   note: str) -> Verdict:
    """The outputs verdict of the shipped ``.tflite`` layer ``shipped``."""
    from dataclasses import replace

    from harness import compare, quantization
    from harness.data import generate
    from harness.errors import Unavailable
    from harness.frameworks.litert import import_litert
    from harness.frameworks.litert_flatbuffer import grid_conflict_words
    from harness.frameworks.litert_run import interpret
    from harness.models.judges.tflite_causes import cell_state_causes
    from harness.models.tflite_run import ShippedTflite, zero_states
    from harness.prepare import reference_and_floor
    from harness.reference.litert_int8_exact import bit_exact

    op = shipped.tflite
    try:
        import_litert()
    except Unavailable as exc:
        return Verdict(kind, compare.UNAVAILABLE, str(exc), figures=TfliteFigures(note=note))
    if op.op == "WHILE" and not op.whole:
        return Verdict(kind, compare.UNAVAILABLE, "the WHILE loop sits inside a larger model: "
                       "not run here (a loop cannot be cut out to one op)",
                       figures=TfliteFigures(note=note))
    adapter = ShippedTflite(op)
    if not op.whole and inputs is None:
        note = (f"the {op.op} op sits inside a larger model: cut out as a one-op .tflite (the "
                "file's own op, constants and grids) and run on generated inputs"
                if not op.ops else f"the bidirectional layer's ops {list(op.ops)} sit inside a "
                "larger model: cut out together as a .tflite (the file's own ops, constants "
                "and grids) and run on generated inputs")
    inputs = zero_states(inputs if inputs is not None else generate(shipped.case))
    x_grid = (next(iter(op.quantized.grids.values())).x if op.quantized is not None
              else None)
    if not op.whole and x_grid is not None:  # what the cut op reads: x on its input grid
        inputs = replace(inputs, x=x_grid.round(inputs.x))
    if op.quantized is None:
        return SHIPPED_OUTPUTS.judge(original, shipped, inputs, adapter=adapter, note=note)
    B, T = inputs.x.shape[:2]
    case = shipped.case.model_copy(update={"batch": B, "seq_len": T})
    ref, _ = reference_and_floor(original.case.model_copy(update={"batch": B, "seq_len": T}),
                                 original.canonical, inputs)
    raw = interpret(adapter.model, op.feed(inputs.x))
    y = op.in_time_order(raw)
    out = adapter._run(case, {}, inputs)
    out.y = y
    q = quantization.judge(case, adapter.name, out, op.quantized, inputs, original.canonical,
                           ref)
    exact = bit_exact(op.model, inputs.x, raw) if op.scheme == "int8" and op.whole else ""
    # the file's grids where they conflict, the layer's ops only (the adapters' words)
    conflicts = grid_conflict_words(op.model, {op.index, *op.ops, *op.reversed_in})
    causes = cell_state_causes(op, case, inputs)
    reason = "; ".join(r for r in (q.reason, *causes, exact, conflicts, note) if r)
    first = compare.first_divergence(q.rows)
    where = compare.where(first) if first is not None else ""
    return Verdict(kind, q.status, reason, q.rows, TfliteFigures(
        adapter=adapter.name, tol_ratio=float(q.rows["tol_ratio"].max()),
        max_abs=q.max_abs, first=where, note=note, inputs=inputs, model=adapter.model,
        got={"y": y}, sqnr_db=q.sqnr_db, ideal_sqnr_db=q.ideal_sqnr_db, exact=exact,
        references=q.references))
