"""One sequence op of a shipped OpenVINO IR run as the file holds it, in OpenVINO (CPU): the
model read from the .xml (``Core.read_model``), the op's data inputs (X, the initial states, the
lengths) replaced by parameters and its outputs made the model's results, so that the op runs
with its own attributes and the file's own constants (and their f16 -> f32 decompression),
never rebuilt from weights (a TensorIterator stepping one cell: fed and read in a sequence op's
layout). What the ``openvino-shipped`` adapter and compare's
shipped-outputs judge (:mod:`harness.models.openvino_ir`) both run a shipped IR with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.data import Inputs
from harness.errors import WeightsError
from harness.frameworks.openvino import core
from harness.spec import Case


@dataclass(frozen=True)
class IrOpRef:
    """Where a layer's op is: the IR's ``xml`` path, the op's ``name`` and ``op_type`` and
    ``op_id``, and whether its biases are stored summed (``biases_summed``: always, for
    OpenVINO's sequence ops)."""

    xml: str
    name: str
    op_type: str
    op_id: str
    weights: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    stored: str = "float32"  # the type of the .bin's constants (compress_to_fp16: float16)
    biases_summed: bool = True
    # a TensorIterator stepping one cell: its input index of X, H, C, output index of Y, Ho,
    # Co, and X's and Y's time axes (harness.readers.openvino_loop)
    loop: dict[str, int] = field(default_factory=dict)


def default_precision() -> str:
    """The CPU plugin's own INFERENCE_PRECISION_HINT here (``bf16``, ``f32``)."""
    return core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()


def run_op(ref: IrOpRef, inputs: Inputs, case: Case, hint: str | None) -> list[np.ndarray]:
    """The op's outputs (Y [batch, dirs, steps, hidden], H_o, C_o [batch, dirs, hidden]) on
    ``inputs``: the op cut out (:func:`cut_out`), compiled with ``hint`` (None: the plugin's
    default)."""
    cut, feed = cut_out(ref, inputs, case)
    config = {} if hint is None else {"INFERENCE_PRECISION_HINT": hint}
    compiled = core().compile_model(cut, "CPU", config)
    out = compiled(feed)
    return [np.asarray(out[compiled.output(k)], dtype=np.float64)
            for k in range(len(cut.outputs))]


def cut_out(ref: IrOpRef, inputs: Inputs, case: Case) -> tuple[Any, dict[str, np.ndarray]]:
    """The op as a one-op ``openvino.Model`` and its feed on ``inputs``: the user's .xml read
    by OpenVINO, the op's data inputs (X, the initial states, the lengths) replaced by
    parameters named ``ir_X``, ``ir_H``, ``ir_C``, ``ir_L`` (shaped as ``inputs``, typed as
    the op's ports), its outputs made the model's results; its weights stay the file's own
    constants."""
    import openvino as ov
    import openvino.opset13 as ops

    model = core().read_model(ref.xml)
    op = next((n for n in model.get_ordered_ops() if n.get_friendly_name() == ref.name
               and n.get_type_name() == ref.op_type), None)
    if op is None:
        raise WeightsError(f"OpenVINO reads no {ref.op_type} named {ref.name!r}", file=ref.xml)
    if ref.loop:
        return _cut_out_loop(ref, op, inputs, case)
    B, D = inputs.x.shape[0], case.num_directions
    lstm = ref.op_type == "LSTMSequence"
    ports = {"X": 0, "H": 1, "C": 2, "L": 3} if lstm else {"X": 0, "H": 1, "L": 2}
    values = {"X": inputs.x, "H": inputs.h0.transpose(1, 0, 2),
              "C": None if inputs.c0 is None else inputs.c0.transpose(1, 0, 2),
              "L": np.asarray(inputs.lengths)}
    params, feed = [], {}
    for key, port in ports.items():
        et = op.input(port).get_element_type()
        value = np.asarray(values[key] if values[key] is not None else
                           np.zeros((B, D, case.hidden_size)))
        value = value.astype(et.to_dtype())
        p = ops.parameter(list(value.shape), et, name=f"ir_{key}")
        op.input(port).replace_source_output(p.output(0))
        params.append(p)
        feed[f"ir_{key}"] = value
    results = [ops.result(op.output(k)) for k in range(op.get_output_size())]
    return ov.Model(results, params, "cut_out"), feed


def _cut_out_loop(ref: IrOpRef, op: Any, inputs: Inputs,
                  case: Case) -> tuple[Any, dict[str, np.ndarray]]:
    """The TensorIterator ``op`` cut out as :func:`cut_out` cuts a sequence op, fed and read in
    a sequence op's layout: X [batch, seq, input] moved to the loop's time axis, H and C
    [batch, 1, hidden] reshaped to its ports' shapes; Y reshaped to [batch, 1, seq, hidden],
    the final states to [batch, 1, hidden]."""
    import openvino as ov
    import openvino.opset13 as ops

    loop, (B, T, _), H = ref.loop, inputs.x.shape, case.hidden_size
    values = {"X": inputs.x, "H": inputs.h0.transpose(1, 0, 2),
              "C": None if inputs.c0 is None else inputs.c0.transpose(1, 0, 2)}
    params, feed = [], {}
    for key in ("X", "H", "C"):
        if key not in loop:
            continue
        port = op.input(loop[key])
        et = port.get_element_type()
        value = np.asarray(values[key] if values[key] is not None else np.zeros((B, 1, H)))
        value = value.astype(et.to_dtype())
        p = ops.parameter(list(value.shape), et, name=f"ir_{key}")
        if key == "X":
            src = p if loop["x_axis"] == 1 else ops.transpose(p, np.array([1, 0, 2]))
        else:
            dims = [d.get_length() if d.is_static else B for d in port.get_partial_shape()]
            if int(np.prod(dims)) != B * H:
                raise WeightsError(f"TensorIterator {ref.name!r}: its {key} input is shaped "
                                   f"{dims}; expected {B * H} values", file=ref.xml)
            src = ops.reshape(p, np.array(dims, np.int64), False)
        port.replace_source_output(src.output(0))
        params.append(p)
        feed[f"ir_{key}"] = value
    y = op.output(loop["Y"])
    if y.get_partial_shape().rank.get_length() != 3:
        raise WeightsError(f"TensorIterator {ref.name!r}: its per-step output has rank "
                           f"{y.get_partial_shape().rank}; expected 3", file=ref.xml)
    if loop["y_axis"] == 0:
        y = ops.transpose(y, np.array([1, 0, 2])).output(0)
    outs = [ops.reshape(y, np.array([B, 1, T, H], np.int64), False)]
    outs += [ops.reshape(op.output(loop[k]), np.array([B, 1, H], np.int64), False)
             for k in ("Ho", "Co") if k in loop]
    return ov.Model([ops.result(o.output(0)) for o in outs], params, "cut_out"), feed
