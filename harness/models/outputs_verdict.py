"""The outputs verdict of a pairing: the shipped layer run in its own framework, as the run's
adapter for its layout runs it (torch-cpu for a torch state_dict, keras3 or keras for a Keras
file), on the case's generated inputs, against the float64 reference on the ORIGINAL's
weights, per step, layer and direction, by the run's verdict rules (tolerance and noise
floor: :mod:`harness.compare`). :func:`judge_outputs` decides; renderers show
:class:`OutputsVerdict`.

The pair runs through the run's own path (:func:`harness.runner.run_pair`) with the
reference and the noise floor computed from the original's weights: the adapter is given the
shipped weights, the comparison the original's outputs. An .onnx layer runs as the user's file
holds it (:mod:`.onnx_run`: the file itself where it is the one node, else the node cut out
with its own attributes and folded weights) in ONNX Runtime and in OpenVINO: one verdict each.

``--inputs`` (:func:`load_inputs`, :func:`layer_inputs`): the user's data instead of generated
inputs. An ONNX node of the main graph sees what the model computes for it (the model run up
to the node); a port's layer, or a node in a branch or loop body (whose inputs no graph output
can expose), is fed the data directly, batch-major [batch, steps, features].
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.compare import DIVERGED, NOT_APPLICABLE, PASS, UNAVAILABLE
from harness.data import Inputs
from harness.errors import HarnessError
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
    # what ran: the inputs, and the model run (an ONNX node's bytes), for a reproducer
    inputs: Inputs | None = field(default=None, repr=False, compare=False)
    model: bytes | None = field(default=None, repr=False, compare=False)
    note: str = ""  # how the inputs came (--inputs)
    got: dict | None = field(default=None, repr=False, compare=False)  # the outputs it gave

    def __bool__(self) -> bool:
        return self.status == PASS


def load_inputs(inputs: Any) -> np.ndarray | dict[str, np.ndarray]:
    """``--inputs``: an .npy (one array) or .npz (arrays by the shipped model's input names),
    read without pickles, or the array or dict itself."""
    if isinstance(inputs, str | Path):
        path = Path(inputs)
        from harness.readers.limits import check_file

        check_file(path)
        try:
            loaded = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise HarnessError(f"{path}: not a readable .npy or .npz "
                               f"({(str(exc).splitlines() or [''])[0][:200]})",
                               field="--inputs") from None
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                return {k: loaded[k] for k in loaded.files}
        return loaded
    if isinstance(inputs, dict):
        return {str(k): np.asarray(v) for k, v in inputs.items()}
    return np.asarray(inputs)


def layer_inputs(layer: Layer, data: np.ndarray | dict[str, np.ndarray]
                 ) -> tuple[Inputs, str]:
    """The inputs the shipped ``layer`` sees on the user's ``data``, and how they came."""
    node = layer.onnx
    if node is not None and node.main:
        from harness.models.onnx_run import node_inputs

        return node_inputs(node, data, layer.case), ("inputs: the data run through the "
                                                      "shipped model up to the node")
    if isinstance(data, dict):
        if len(data) != 1:
            raise HarnessError(f"{len(data)} arrays given; the layer takes one [batch, steps, "
                               f"{layer.case.input_size}] array", field="--inputs")
        data = next(iter(data.values()))
    x = np.asarray(data)
    if (x.ndim != 3 or x.shape[2] != layer.case.input_size or 0 in x.shape
            or not np.issubdtype(x.dtype, np.floating)):
        raise HarnessError(f"expected floats shaped [batch, steps, {layer.case.input_size}] "
                           f"for layer {layer.path!r}, got {x.dtype} {list(x.shape)}",
                           field="--inputs")
    D, B, H = layer.case.num_directions, x.shape[0], layer.case.hidden_size
    c0 = np.zeros((D, B, H)) if layer.case.cell_kind.has_cell_state else None
    how = ("inputs: the data fed to the layer directly" + (
        " (the node is inside a subgraph: no graph output can expose its input)"
        if node is not None else ""))
    return Inputs(x=x.astype(np.float64), h0=np.zeros((D, B, H)), c0=c0, seq_lengths=None), how


def judge_all_outputs(original: Layer, shipped: Layer,
                      data: np.ndarray | dict[str, np.ndarray] | None = None
                      ) -> tuple[OutputsVerdict, ...]:
    """The outputs verdicts of ``shipped``: one per runtime of an ONNX node (ONNX Runtime,
    OpenVINO), else its framework's, on generated inputs or on ``data`` (``--inputs``)."""
    inputs, note = (None, "") if data is None else layer_inputs(shipped, data)
    if shipped.onnx is None:
        return (judge_outputs(original, shipped, inputs, note=note),)
    from harness.models.onnx_run import RUNTIMES, ShippedNode

    return tuple(judge_outputs(original, shipped, inputs, adapter=ShippedNode(shipped.onnx, r),
                               note=note) for r in RUNTIMES)


def judge_outputs(original: Layer, shipped: Layer, inputs: Inputs | None = None, *,
                  adapter: Any = None, note: str = "") -> OutputsVerdict:
    """Run ``shipped`` in its framework (or by ``adapter``) on ``inputs`` (default: generated
    from its case) and judge its outputs against the float64 reference on ``original``'s
    weights."""
    from harness import compare, runner
    from harness.adapters import get_adapter
    from harness.data import generate
    from harness.prepare import Prepared, reference_and_floor

    if adapter is None and shipped.adapter is None:
        return OutputsVerdict(NOT_APPLICABLE, "", f"no adapter runs {shipped.layout!r} "
                              "layers in their framework")
    adapter = adapter if adapter is not None else get_adapter(shipped.adapter)
    case = shipped.case
    if shipped.onnx is not None and shipped.onnx.elem == "FLOAT16":
        case = case.model_copy(update={"dtype": "float16"})
    inputs = inputs if inputs is not None else generate(case)
    node = shipped.onnx
    if node is not None and node.sole and not _has(node, 5):
        inputs = replace(inputs, h0=np.zeros_like(inputs.h0))  # the operator's default
    if node is not None and node.sole and not _has(node, 6) and inputs.c0 is not None:
        inputs = replace(inputs, c0=np.zeros_like(inputs.c0))
    B, T = inputs.x.shape[:2]
    case = case.model_copy(update={"batch": B, "seq_len": T})
    ref, floor = reference_and_floor(original.case.model_copy(update={"batch": B, "seq_len": T}),
                                     original.canonical, inputs)
    prep = Prepared(case, shipped.canonical, inputs, ref, floor)
    r = runner.run_pair(prep, adapter, step_mode="off", attribute=False)
    model, got = None, None
    if r.outputs is not None:
        model, got = r.outputs.models.get(".onnx"), r.outputs.named()
    if r.rows is None or r.rows.empty:
        return OutputsVerdict(r.status, adapter.name, r.reason or r.status, inputs=inputs,
                              model=model, note=note)
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
    if note:
        reason = f"{reason}; {note}"
    return OutputsVerdict(status, adapter.name, reason, figures, where, rows, inputs, model,
                          note, got)


def _has(node: Any, k: int) -> bool:
    return k < len(node.inputs) and bool(node.inputs[k])
