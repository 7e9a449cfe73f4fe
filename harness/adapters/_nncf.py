"""What ``openvino-nncf-int8`` (harness/adapters/openvino.py) needs from NNCF and reads from
the model it quantizes. ``openvino-nncf-int8``: the harness's ONNX ``LSTM`` / ``GRU`` graph read
by OpenVINO's ONNX
frontend (the ``openvino`` adapter's model), quantized by ``nncf.quantize`` (static int8,
calibrated on the case's own input distribution at its batch and sequence length,
:func:`harness.quantization.calibration_inputs`, zero initial states as deployed) and compiled
for the CPU plugin. Layout ``onnx``.

What NNCF does with each recurrent op decides whether there is an integer kernel to judge
(measured with NNCF 3.4.0, OpenVINO 2026.4.1: docs/quantization.md, ``benchmarks/
quantizer_coverage.py``):

- ``GRUSequence`` with ``linear_before_reset=0`` (``reset_after: false``): ``FakeQuantize`` on
  ``X`` and ``initial_h``, ``W`` and ``R`` int8 constants dequantized by ``Convert`` /
  ``Multiply``; the CPU plugin runs the ``RNNSeq`` in u8 (oneDNN's int8 RNN);
- ``GRUSequence`` with ``linear_before_reset=1``: left float (openvinotoolkit/nncf#2105, PR#2115:
  oneDNN has no int8 kernel for it);
- ``LSTMSequence``: ``FakeQuantize`` on its data inputs only, weights float, ``RNNSeq`` in f32.

A model whose recurrent ops read no int8 weight, or which the plugin runs in floating point,
is an error row ("nothing was quantized"): a quantized pair that passes on a float kernel tests
nothing (executorch PR#14893).

The integer-aware reference (:func:`harness.quantization.judge`) follows oneDNN's int8 RNN:
``x`` on the data grid its ``FakeQuantize`` declares (u8, ``levels`` 256), the hidden state
``h`` requantized to that same grid every step (oneDNN keeps ``src_iter`` / ``dst_iter`` at the
data scale and shift of ``src_layer``), ``y`` on it too, the weights as stored (the int8
constants times their scales); gates in float from 32-bit accumulators. k: as for LiteRT
(docs/quantization.md, "k").
"""

from __future__ import annotations

import numpy as np

from harness.adapters.base import AdapterFault
from harness.errors import Unavailable
from harness.grids import Grid

RECURRENT = ("LSTMSequence", "GRUSequence")
# input index of W and R on each recurrent op (OpenVINO opset5: X, H[, C], lengths, W, R, B)
WEIGHT_INPUTS = {"LSTMSequence": (4, 5), "GRUSequence": (3, 4)}
GRU_LINEAR_BEFORE_RESET = ("NNCF leaves a GRUSequence with linear_before_reset=True float "
                           "(openvinotoolkit/nncf#2105, PR#2115: oneDNN has no int8 kernel for "
                           "it)")


def import_nncf():
    try:
        import nncf
    except ImportError as exc:
        raise Unavailable(f"nncf is not installed ({exc}); pip install nncf") from None
    return nncf


def fake_quantize_grid(fq) -> Grid:
    """The grid of an OpenVINO ``FakeQuantize`` whose input and output ranges are equal (what
    NNCF writes for activations): ``levels`` points from ``input_low`` to ``input_high``."""
    low, high, out_low, out_high = (
        np.asarray(fq.input(k).get_source_output().get_node().get_data(), np.float64)
        for k in range(1, 5))
    if low.size != 1 or high.size != 1:
        raise AdapterFault(f"{fq.get_friendly_name()}: a per-channel FakeQuantize on an "
                           f"activation ({low.size} ranges); the harness reads one grid")
    if not (np.allclose(low, out_low) and np.allclose(high, out_high)):
        raise AdapterFault(f"{fq.get_friendly_name()}: FakeQuantize input range "
                           f"[{low.item()}, {high.item()}] differs from its output range "
                           f"[{out_low.item()}, {out_high.item()}]")
    scale = (high.item() - low.item()) / (fq.get_levels() - 1)
    return Grid(scale, int(np.rint(-low.item() / scale)), 0, fq.get_levels() - 1)


def source(port):
    return port.get_source_output().get_node()


def data_fake_quantize(op) -> object | None:
    """The ``FakeQuantize`` on the recurrent op's input ``X`` (through data movement), or
    None."""
    node = source(op.input(0))
    while node.get_type_name() in ("Transpose", "Reshape", "Convert"):
        node = source(node.input(0))
    return node if node.get_type_name() == "FakeQuantize" else None


def stored_weight(node) -> tuple[np.ndarray, bool]:
    """A weight input's value as stored, in float64, and whether it is stored in int8: the
    ``Constant`` / ``Convert`` / ``Subtract`` / ``Multiply`` chain NNCF writes, evaluated."""
    kind = node.get_type_name()
    if kind == "Constant":
        data = np.asarray(node.get_data())
        return data.astype(np.float64), data.dtype in (np.int8, np.uint8)
    if kind == "Convert":
        return stored_weight(source(node.input(0)))
    if kind in ("Multiply", "Subtract", "Add"):
        (a, ia), (b, ib) = (stored_weight(source(node.input(k))) for k in range(2))
        value = a * b if kind == "Multiply" else a - b if kind == "Subtract" else a + b
        return value, ia or ib
    if kind in ("Concat", "Split", "VariadicSplit", "Reshape", "Transpose"):
        # the frontend's own float re-arrangement of a float weight (not quantized): the
        # reference keeps the case's weights there
        return np.empty(0), False
    raise AdapterFault(f"a recurrent weight made by {kind}: the harness reads Constant, "
                       f"Convert, Subtract and Multiply")
