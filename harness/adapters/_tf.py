"""What the TensorFlow adapters share: importing TensorFlow (on the GPU too), TF32 switched off
around a call, and a stack of layers and directions built in TF ops around a one-direction
runner, differentiated under one ``tf.GradientTape`` for a gradient case.

:func:`run_layers` (the ``tf-block`` and ``tf-legacy`` adapters) builds everything but one
direction of one layer, with TF ops only, so that :func:`run_tf` differentiates the whole of it:

- layers: layer l > 0 reads the concatenated [forward, backward] outputs of layer l − 1;
- backward direction: each sequence is reversed within its own length before the run and the
  outputs are reversed back (``tf.gather``, whose gradient scatters back), so the valid steps
  come first in reading order and the padding after them;
- variable lengths: a forward run is causal, so the steps past a sequence's length cannot
  change its valid steps; the runner reads each sequence's final state at its last valid step,
  and padded steps of ``y`` are zeroed (``tf.where``: no gradient flows from them, as in the
  reference where they do not exist).

Deliberately independent of ``harness.reference`` (its own reversal index), so that a mistake
in the reference's direction handling cannot cancel out here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from harness.adapters.base import Adapter
from harness.data import Gradients, Inputs, Outputs
from harness.errors import Unavailable
from harness.frameworks.tf import import_tf
from harness.params import DIRECTION_NAMES
from harness.spec import Case

# (layer, direction, x [B, T, in_l] in reading order with every sequence's valid steps first,
#  lengths [B] (NumPy), h0 [B, P or H], c0 [B, H] or None)
#  -> (y [B, T, P or H] in reading order (padded steps: anything), h_n, c_n or None), where
#  h_n / c_n are each sequence's state after its last valid step; all TF tensors in the case
#  dtype, computed with differentiable TF ops.
DirectionRunner = Callable[
    [int, int, Any, np.ndarray, Any, Any],
    tuple[Any, Any, Any],
]


# what cuDNN RNNs cannot do, as TensorFlow's ops expose them
CUDNN_REASONS = {
    "peepholes": "cuDNN LSTM has no peephole connections",
    "gru_reset_after": "cuDNN GRU is reset-after only (reset_after=false needs reset-before)",
    "directions": "cuDNN has no reverse-only direction (unidirectional or bidirectional)",
    "cell_clip": "TF's CudnnRNN ops expose no cell clipping (cudnnRNNSetClip is not wired)",
    "proj_clip": "cuDNN has no projection clipping",
    "gate_clip": "cuDNN has no gate pre-activation clipping",
    "input_forget": "cuDNN LSTM has no coupled input-forget gate",
    "recurrent_activations": "cuDNN recurrent activations are fixed to sigmoid",
}


def import_tf_gpu() -> Any:
    """TensorFlow, if it is installed, built with CUDA and sees a GPU; else Unavailable."""
    tf = import_tf()
    if not tf.test.is_built_with_cuda():
        raise Unavailable(f"this TensorFlow build ({tf.__version__}) has no CUDA support; "
                          "its cuDNN RNN ops have no CPU kernel")
    if not tf.config.list_physical_devices("GPU"):
        raise Unavailable("no GPU visible to TensorFlow (its cuDNN RNN ops have no CPU kernel)")
    return tf


@contextmanager
def tf32_off(tf: Any) -> Iterator[None]:
    """Forbid TF32 in float32 matmuls (cuDNN RNNs included) for the duration."""
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        yield
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)


def tf_versions(tf: Any) -> dict[str, str]:
    info = tf.sysconfig.get_build_info()
    gpus = tf.config.list_physical_devices("GPU")
    details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
    return {
        "tensorflow": tf.__version__,
        "cuda": str(info.get("cuda_version")),
        "cudnn": str(info.get("cudnn_version")),
        "gpu": str(details.get("device_name", "?")),
        "tf32": "off (switched off around the call)",
    }


def native_name(case: Case, layer: int, d: int, name: str) -> str:
    """The native key of ``name`` for (layer, d): bare for one unidirectional layer, else
    ``layer{k}/{forward|backward}/name`` (the layouts' ``scoped_names``)."""
    if case.num_layers == 1 and case.num_directions == 1:
        return name
    return f"layer{layer}/{DIRECTION_NAMES[d]}/{name}"


def reverse_within_lengths(lengths: np.ndarray, T: int) -> np.ndarray:
    """idx [B, T] with ``x[b, idx[b, t]]`` the sequence b read backwards within its length;
    padded steps stay where they are. The map is its own inverse."""
    t = np.arange(T)[None, :]
    n = lengths[:, None]
    return np.where(t < n, n - 1 - t, t)


def to_tf(a: np.ndarray, dtype: Any) -> Any:
    """A constant in the case dtype; every value is already rounded to it, so the cast is exact
    (none where ``a`` already is in the case dtype)."""
    tf = import_tf()
    return tf.cast(tf.constant(a), dtype)


def to_f64(a: Any) -> np.ndarray:
    return import_tf().cast(a, "float64").numpy()


def run_layers(case: Case, inputs: Inputs, run_direction: DirectionRunner, x: Any, h0: Any,
               c0: Any) -> tuple[Any, Any, Any, list[Any]]:
    """Stack layers and directions of one-direction runs, in TF ops: ``x`` [B, T, I], ``h0``
    [L*D, B, P or H], ``c0`` [L*D, B, H] or None (TF tensors in the case dtype) ->
    (y, h_n, c_n or None, every layer's y) as TF tensors in the harness conventions."""
    tf = import_tf()
    B, T = inputs.x.shape[:2]
    lengths = inputs.lengths
    valid = tf.constant((np.arange(T)[None, :] < lengths[:, None])[..., None])  # [B, T, 1]
    rev = tf.constant(reverse_within_lengths(lengths, T))
    D = case.num_directions

    layer_in = x
    h_n, c_n, y_layers = [], [], []
    for layer in range(case.num_layers):
        outs = []
        for k, d in enumerate(case.directions):
            s = layer * D + k
            xs = layer_in if d == 0 else tf.gather(layer_in, rev, axis=1, batch_dims=1)
            y, h, c = run_direction(layer, d, xs, lengths, h0[s],
                                    c0[s] if c0 is not None else None)
            if d == 1:
                y = tf.gather(y, rev, axis=1, batch_dims=1)
            outs.append(tf.where(valid, y, tf.zeros_like(y)))  # the contract: padded y is 0
            h_n.append(h)
            c_n.append(c)
        layer_in = tf.concat(outs, axis=-1)
        y_layers.append(layer_in)
    c_n = tf.stack(c_n) if case.cell_kind.has_cell_state else None
    return layer_in, tf.stack(h_n), c_n, y_layers


def run_tf(adapter: Adapter, case: Case, inputs: Inputs, weights: dict[str, Any],
           run_direction: DirectionRunner) -> Outputs:
    """Run :func:`run_layers` and, for a gradient case, differentiate it.

    ``weights`` maps native names to the TF tensors or variables ``run_direction`` reads (in the
    case dtype); for a gradient case they are watched with ``x``, ``h0``, ``c0``, and the tape's
    output gradients are ``dy``, ``dh_n``, ``dc_n``: the gradient of the loss in
    ``harness.data``. Returns float64 NumPy outputs, with ``grads`` keyed by native name."""
    tf = import_tf()
    dtype = tf.dtypes.as_dtype(case.dtype)
    lstm = case.cell_kind.has_cell_state
    x, h0 = to_tf(inputs.x, dtype), to_tf(inputs.h0, dtype)
    c0 = to_tf(inputs.c0, dtype) if lstm else None
    backward = adapter.computes_gradients(case)
    sources = [x, h0] + ([c0] if lstm else []) + list(weights.values())
    # only what is watched explicitly: the cells' variables are in ``weights``
    with (tf.GradientTape(watch_accessed_variables=False) if backward
          else contextlib.nullcontext()) as tape:
        if backward:
            tape.watch(sources)
        y, h_n, c_n, y_layers = run_layers(case, inputs, run_direction, x, h0, c0)
    out = Outputs(y=to_f64(y), h_n=to_f64(h_n), c_n=to_f64(c_n) if lstm else None,
                  y_layers=[to_f64(v) for v in y_layers])
    if backward:
        targets = [y, h_n] + ([c_n] if lstm else [])
        upstream = [inputs.dy, inputs.dh_n] + ([inputs.dc_n] if lstm else [])
        got = tape.gradient(targets, sources, output_gradients=[to_tf(u, dtype) for u in upstream],
                            unconnected_gradients=tf.UnconnectedGradients.ZERO)
        got = [to_f64(g) for g in got]
        dx, dh0 = got[0], got[1]
        dc0 = got[2] if lstm else None
        params = dict(zip(weights, got[3 if lstm else 2:], strict=True))
        out.grads = Gradients(dx=dx, dh0=dh0, dc0=dc0, params=params)
    return out
