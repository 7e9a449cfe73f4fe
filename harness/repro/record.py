"""Everything one reproducer is written from (:class:`ReproRecord`), made by the run where the
pair's data are at hand (:func:`make_record`), so the report writes it without recomputing
anything or importing a framework.

Which pairs get one (:func:`wanted`): DIVERGED, an error row that came back with outputs (NaN
or Inf), and a known upstream bug (the case's ``expected:`` for the adapter): as expected,
looking fixed, or unavailable (an adapter its bug makes unavailable still gets one where it can
say what it would hand its framework: ``Adapter.hand``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from harness import compare, known_bugs
from harness.handed import Handed
from harness.judges.verdict import ScriptQuestion

if TYPE_CHECKING:
    from harness.prepare import Prepared
    from harness.spec import Case

MAX_BYTES = 32 * 2**20  # one reproducer's data and files; larger: a README saying so

SPEC_FIELDS = ("cell", "input_size", "hidden_size", "num_layers", "batch", "seq_len", "dtype")


@dataclass
class ReproRecord:
    case: str
    adapter: str
    title: str
    status: str
    reason: str
    spec: dict[str, Any]  # the case as the script's equations read it (JSON values)
    atol: float
    rtol: float
    canonical: dict[str, np.ndarray]  # float64, keyed layer{k}/{forward|backward}/W_i ...
    inputs: dict[str, np.ndarray]  # x [B, T, I], h0 (c0) [L*D, B, H], lengths [B], float64
    reference: dict[str, np.ndarray]  # y{k} [B, T, D*H] per layer, h_n (c_n): float64
    handed: Handed | None
    unsupported: str = ""  # why no script can be written (a feature the equations lack)
    first: dict[str, Any] | None = None  # output, layer, direction, t of the first bad row
    step_reading: str = ""
    upstream: str = ""  # a known upstream bug's id (owner/repo#N)
    versions: dict[str, str] = field(default_factory=dict)
    detail: str = ""  # an error row's reason
    # the question the script answers, as the judge's figures give it
    # (harness.judges.Figures.script; harness/repro/questions.py)
    question: ScriptQuestion = field(default_factory=ScriptQuestion)

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays and of what was handed (a reproducer's size, near enough)."""
        arrays = [*self.canonical.values(), *self.inputs.values(), *self.reference.values()]
        return (sum(int(a.nbytes) for a in arrays)
                + (self.handed.nbytes if self.handed is not None else 0))


def wanted(status: str, case: Case, adapter: str, has_data: bool) -> bool:
    """Whether a pair of this status gets a reproducer (the module text); ``has_data``: the
    adapter returned what it handed its framework (an error row without it has nothing)."""
    return (status in (compare.DIVERGED, compare.KNOWN_BUG)
            or (status == compare.ERROR and has_data)
            or (status in (compare.UNAVAILABLE, compare.LOOKS_FIXED)
                and (adapter in case.expected
                     or known_bugs.known_bug(case, adapter, None) is not None)))


WITHOUT_ARITHMETIC: dict[str, tuple[str, ...]] = {"cost": ("tflite",)}
"""Question key -> the families whose script answers it with the float64 equations on the
original weights alone, without a quantized model's arithmetic (harness/repro/questions.py):
the cost question, for the quantized LiteRT adapters'."""
COST_FAMILIES = WITHOUT_ARITHMETIC["cost"]


def unsupported(case: Case, cost: bool = False) -> str:
    """The case features the script's float64 equations do not implement (harness/repro/
    equations.py), as a reason; "" when it implements them all. ``cost``: the script answers a
    quantized pair's cost question (:data:`COST_FAMILIES`), which needs the float64 equations
    on the original weights only, not the model's integer arithmetic."""
    missing = [what for what, used in (
        ("peephole connections", case.cell_kind.has_cell_state and case.peepholes),
        ("a projection", case.cell_kind.has_cell_state and case.proj_size > 0),
        ("cell-state clipping", case.cell_kind.has_cell_state and case.cell_clip is not None),
        ("projection clipping", case.cell_kind.has_cell_state and case.proj_clip is not None),
        ("a coupled input-forget gate", case.cell_kind.has_cell_state and case.input_forget),
        (f"the recurrent activation {case.recurrent_activation}",
         case.recurrent_activation != "sigmoid"),
        # a quantized pair is judged in quantization steps against the float64 equations with
        # the model's own quantization (harness.quantization), which the script lacks
        ("a quantized model's arithmetic", case.quantization is not None and not cost),
    ) if used]
    return ("the reproducer's float64 equations do not implement " + ", ".join(missing)
            if missing else "")


def script_spec(case: Case) -> dict[str, Any]:
    spec: dict[str, Any] = {f: getattr(case, f) for f in SPEC_FIELDS}
    spec.update(
        dir_mode=case.dir_mode, directions=list(case.directions),
        reset_after=bool(case.reset_after) if case.cell_kind.reads("reset_after") else True,
        gate_clip=None if case.gate_clip is None else float(case.gate_clip),
        forget_bias=float(case.forget_bias) if case.cell_kind.reads("forget_bias") else 0.0,
        has_cell_state=case.cell_kind.has_cell_state)
    return spec


def _first(r: Any) -> dict[str, Any] | None:
    row = r.first_diverging if r.has_rows else None
    if row is None:
        return None

    def known(v: Any) -> int | None:
        try:
            return None if v is None or np.isnan(float(v)) or int(v) < 0 else int(v)
        except (TypeError, ValueError):
            return None

    return {"output": str(row["output"]), "layer": known(row["layer"]),
            "direction": known(row["direction"]), "t": known(row["t"])}


def _step_reading(r: Any) -> str:
    step = r.step_rows if r.has_rows else None
    if step is None or step.empty:
        return ("step mode did not run for this pair (it runs for low-precision pairs that did "
                "not pass, or with --step-mode on)")
    bad = step[compare.diverged(step["verdict"])]
    if bad.empty:
        return compare.STATE_NOT_CELL
    first = bad.sort_values(["t", "layer", "direction"], kind="stable").iloc[0]
    return (f"one step from the float64 state already diverges ({compare.where(first)}): "
            "the cell itself computes something else")


def make_record(prep: Prepared, adapter: Any, r: Any, handed: Handed | None) -> ReproRecord:
    """The record of pair ``r`` (a harness.results.PairResult of ``adapter``), ``handed`` what
    the adapter handed its framework (None: the adapter records nothing, or raised before it
    returned)."""
    case = prep.case
    tol = compare.tolerance_for(case, adapter.name, adapter.tolerances)
    inputs = {"x": np.asarray(prep.inputs.x, np.float64),
              "h0": np.asarray(prep.inputs.h0, np.float64),
              "lengths": np.asarray(prep.inputs.lengths, np.int64)}
    if prep.inputs.c0 is not None:
        inputs["c0"] = np.asarray(prep.inputs.c0, np.float64)
    ref = prep.reference
    layers = ref.y_layers if ref.y_layers is not None else [ref.y]
    reference = {f"y{k}": np.asarray(y, np.float64) for k, y in enumerate(layers)}
    reference |= {name: np.asarray(v, np.float64) for name, v in ref.named().items()
                  if name != "y"}
    known = case.expected.get(adapter.name) or known_bugs.known_bug(case, adapter.name,
                                                                    prep.canonical.tensors)
    env = r.environment or {}
    question = r.figures.script(case)
    free = handed is not None and handed.family in WITHOUT_ARITHMETIC.get(question.key, ())
    record = ReproRecord(
        case=case.name, adapter=adapter.name, title=adapter.title or adapter.name,
        status=r.status, reason=r.reason, spec=script_spec(case), atol=tol.atol, rtol=tol.rtol,
        canonical={k: np.asarray(v, np.float64) for k, v in prep.canonical.tensors.items()},
        inputs=inputs, reference=reference, handed=handed,
        unsupported=unsupported(case, cost=free),
        first=_first(r), step_reading=_step_reading(r),
        upstream=known.upstream if known is not None else "",
        versions={str(k): str(v) for k, v in (env.get("versions") or {}).items()},
        detail=r.reason if r.status == compare.ERROR else "", question=question)
    size = record.nbytes
    if size > MAX_BYTES:  # not kept until the report: say why instead
        record.canonical, record.inputs, record.reference, record.handed = {}, {}, {}, None
        record.unsupported = (f"its data would be {size / 2**20:.1f} MiB, more than the "
                              f"{MAX_BYTES // 2**20} MiB a reproducer may hold; a smaller case "
                              "shows the same")
    return record
