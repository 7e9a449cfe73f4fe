"""What the shipped-outputs judge (:mod:`harness.models.judges.shipped`) measures of a pairing: the
shipped layer run in its own framework, as the run's adapter for its layout runs it (torch-cpu
for a torch state_dict, keras3 or keras for a Keras file), on the case's generated inputs,
through the run's own pair path (:func:`harness.pairs.run_pair`) with the reference and the
noise floor computed from the ORIGINAL's weights: the adapter is given the shipped weights, the
comparison the original's outputs (:func:`run_shipped`). An .onnx layer runs as the user's file
holds it (:mod:`.onnx_run`: the file itself where it is the one node, else the node cut out with
its own attributes and folded weights).

``--inputs`` (:func:`load_inputs`, :func:`layer_inputs`): the user's data instead of generated
inputs. An ONNX node of the main graph sees what the model computes for it (the model run up
to the node); a port's layer, or a node in a branch or loop body (whose inputs no graph output
can expose), is fed the data directly, batch-major [batch, steps, features].
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.data import Inputs
from harness.errors import HarnessError
from harness.models.layers import Layer

if TYPE_CHECKING:
    from harness.adapters.base import Adapter
    from harness.results import PairResult


@dataclass(frozen=True)
class ShippedRun:
    """The shipped layer run: the run's ``result`` (status, reason, rows judged against the
    float64 reference on the original's weights), the ``inputs`` it ran on, the ``model`` run
    (an ONNX node's bytes) and the outputs it gave (``got``), for a reproducer."""

    result: PairResult
    inputs: Inputs
    model: bytes | None = field(default=None, repr=False)
    got: dict[str, Any] | None = field(default=None, repr=False)


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
    op = layer.tflite
    if op is not None and not op.whole:
        from harness.models.tflite_run import activations

        if isinstance(data, dict):
            if len(data) != 1:
                raise HarnessError(f"{len(data)} arrays given; the shipped .tflite takes one "
                                   "input", field="--inputs")
            data = next(iter(data.values()))
        x = activations(op, np.asarray(data))
        D, B, H = layer.case.num_directions, x.shape[0], layer.case.hidden_size
        return (Inputs(x=x, h0=np.zeros((D, B, H)), c0=np.zeros((D, B, H)), seq_lengths=None),
                "inputs: the data run through the shipped .tflite up to the op (its "
                "intermediate tensors preserved)")
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


def run_shipped(original: Layer, shipped: Layer, adapter: Adapter,
                inputs: Inputs | None = None) -> ShippedRun:
    """Run ``shipped`` by ``adapter`` on ``inputs`` (default: generated from its case), its
    outputs compared with the float64 reference on ``original``'s weights."""
    from harness import pairs
    from harness.data import generate
    from harness.prepare import Prepared, reference_and_floor

    case = shipped.case
    if shipped.onnx is not None and shipped.onnx.elem == "FLOAT16":
        case = case.model_copy(update={"dtype": "float16"})
    # the precision the runtime computes in (an IR at OpenVINO's default: bf16 on a CPU
    # with AVX-512 BF16 or AMX): its reference noise floor and tolerance are that precision's
    dtype = getattr(adapter, "case_dtype", None)
    if dtype is not None:
        case = case.model_copy(update={"dtype": dtype})
    inputs = inputs if inputs is not None else generate(case)
    node = shipped.onnx
    if node is not None and node.sole and not _has(node, 5):
        inputs = replace(inputs, h0=np.zeros_like(inputs.h0))  # the operator's default
    if node is not None and node.sole and not _has(node, 6) and inputs.c0 is not None:
        inputs = replace(inputs, c0=np.zeros_like(inputs.c0))
    B, T = inputs.x.shape[:2]
    case = case.model_copy(update={"batch": B, "seq_len": T})
    ref, floor = reference_and_floor(original.case.model_copy(update={"batch": B, "seq_len": T,
                                                                      "dtype": case.dtype}),
                                     original.canonical, inputs)
    prep = Prepared(case, shipped.canonical, inputs, ref, floor)
    r = pairs.run_pair(prep, adapter, step_mode="off", attribute=False)
    model, got = None, None
    if r.outputs is not None:
        model, got = r.outputs.models.get(".onnx"), r.outputs.named()
    return ShippedRun(r, inputs, model, got)


def _has(node: Any, k: int) -> bool:
    return k < len(node.inputs) and bool(node.inputs[k])
