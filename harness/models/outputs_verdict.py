"""The outputs verdict of a pairing: the shipped layer run in its own framework, as the run's
adapter for its layout runs it (torch-cpu for a torch state_dict, keras3 or keras for a Keras
file), on the case's generated inputs, against the float64 reference on the ORIGINAL's
weights, per step, layer and direction, by the run's verdict rules (tolerance and noise
floor: :mod:`harness.compare`). :func:`judge_outputs` decides; renderers show
:class:`OutputsVerdict`.

The pair runs through the run's own path (:func:`harness.runner.run_pair`) with the
reference and the noise floor computed from the original's weights: the adapter is given the
shipped weights, the comparison the original's outputs. An .onnx layer runs in ONNX Runtime
on a one-node graph built from the node's tensors and attributes (the onnxruntime adapter's),
not yet the user's file itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness.compare import DIVERGED, NOT_APPLICABLE, PASS, UNAVAILABLE
from harness.data import Inputs
from harness.models.layers import Layer

# statuses that say nothing against the pairing: the outputs could not be judged here
NOT_JUDGED = (UNAVAILABLE, NOT_APPLICABLE)


@dataclass(frozen=True)
class OutputsVerdict:
    """``status``: the run's pair status (PASS, DIVERGED, unavailable, not applicable,
    error); ``adapter`` what ran it; ``reason``; ``figures``: the worst multiple of tolerance
    (``tol_ratio``) and largest difference (``max_abs``); ``first``: where it first diverges
    (``y layer 0 forward t=3``), empty where it does not; ``rows`` the divergence rows."""

    status: str
    adapter: str
    reason: str
    figures: dict[str, float] = field(default_factory=dict)
    first: str = ""
    rows: pd.DataFrame | None = field(default=None, repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.status == PASS


def judge_outputs(original: Layer, shipped: Layer, inputs: Inputs | None = None
                  ) -> OutputsVerdict:
    """Run ``shipped`` in its framework on ``inputs`` (default: generated from its case) and
    judge its outputs against the float64 reference on ``original``'s weights."""
    from harness import compare, runner
    from harness.adapters import get_adapter
    from harness.data import generate
    from harness.prepare import Prepared, reference_and_floor

    if shipped.adapter is None:
        return OutputsVerdict(NOT_APPLICABLE, "", f"no adapter runs {shipped.layout!r} "
                              "layers in their framework")
    adapter = get_adapter(shipped.adapter)
    inputs = inputs if inputs is not None else generate(shipped.case)
    ref, floor = reference_and_floor(original.case, original.canonical, inputs)
    prep = Prepared(shipped.case, shipped.canonical, inputs, ref, floor)
    r = runner.run_pair(prep, adapter, step_mode="off", attribute=False)
    if r.rows is None or r.rows.empty:
        return OutputsVerdict(r.status, adapter.name, r.reason or r.status)
    rows = r.rows
    tol_ratio = float(rows["tol_ratio"].max())
    figures = {"tol_ratio": tol_ratio, "max_abs": float(rows["max_abs"].max())}
    first = compare.first_divergence(rows)
    where = compare.where(first) if first is not None else ""
    status = r.status
    if status == PASS:
        reason = f"within tolerance at every step (worst {tol_ratio:.2g}x)"
    elif status == DIVERGED and where:
        reason = (f"first diverges at {where} ({float(first['tol_ratio']):.3g}x tolerance; "
                  f"worst {tol_ratio:.3g}x)")
    else:
        reason = r.reason or status
    if r.reason and status == PASS:
        reason = f"{reason}; {r.reason}"
    return OutputsVerdict(status, adapter.name, reason, figures, where, rows)
