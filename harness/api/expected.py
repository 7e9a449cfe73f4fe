"""Expected outputs from a framework's own outputs, in the harness's order (docs/cases.md,
Inputs and outputs): ``y`` [B, T, D*H] batch-major with forward features first, ``h_n`` and
``c_n`` [L*D, B, H] layer-major, forward before reverse. What the doctor takes as the outputs
the weights really give (:func:`harness.diagnose`, ``rnn-harness doctor --expected``).

The frameworks' orders are the adapters' own: Keras's ``[y, h_f, c_f, h_b, c_b]`` are
unpacked by the Keras adapters' :func:`harness.frameworks.keras.run_stack`, ONNX's ``Y``,
``Y_h``, ``Y_c`` read by the ONNX adapters' :func:`harness.frameworks.onnx.read_outputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.data import output_shapes
from harness.errors import HarnessError
from harness.spec import Case

FRAMEWORKS = ("torch", "keras", "onnx")


def _array(value: Any, what: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor (maybe on a GPU, maybe requiring grad)
        value = value.detach().cpu()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # TF / Keras tensors
        value = value.numpy()
    a = np.asarray(value)
    if not np.issubdtype(a.dtype, np.floating):
        raise HarnessError(f"{what}: expected floating-point values, got {a.dtype}")
    return a.astype(np.float64)


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and not isinstance(value, list | tuple)


def _batch_first(y: np.ndarray, case: Case, batch_first: bool | None, framework: str) -> bool:
    """Whether ``y`` is batch-major: as given, else from its shape where B != T. torch's y is
    [B, T, .] or [T, B, .]; ONNX's Y [B, T, D, H] (``layout=1``) or [T, D, B, H]."""
    if batch_first is not None:
        return batch_first
    B, T = case.batch, case.seq_len
    if B == T:
        raise HarnessError(f"{framework} outputs of a case with batch == seq_len ({B}): say "
                           "batch_first=True or False")
    time_major = (T, B) if framework == "torch" else (T, case.num_directions, B)
    if y.shape[:2] == (B, T):
        return True
    if y.shape[:len(time_major)] == time_major:
        return False
    shown = "[T, B, ...]" if framework == "torch" else "[T, D, B, H]"
    raise HarnessError(f"y: expected [B, T, ...] or {shown} (batch {B}, seq_len {T}), got "
                       f"{list(y.shape)}")


def _per_layer(outputs: Any, case: Case, framework: str, parts: str) -> list[Sequence] | None:
    """One sequence of outputs per layer: a list of lists as given, one list for a single
    layer; None for a bare ``y`` (no final states)."""
    if _is_array(outputs):
        return None
    items = list(outputs)
    if items and all(isinstance(i, list | tuple) for i in items):
        if len(items) != case.num_layers:
            raise HarnessError(f"{framework} outputs: {len(items)} lists, one per layer, for a "
                               f"case of {case.num_layers} layer(s)")
        return items
    if case.num_layers > 1:
        raise HarnessError(f"{framework} outputs of one layer ({parts}) for a case of "
                           f"{case.num_layers} layers: give one list per layer for the final "
                           "states, or y alone")
    return [items]


def _from_torch(outputs: Any, case: Case, batch_first: bool | None) -> dict[str, np.ndarray]:
    if case.dir_mode == "reverse":
        raise HarnessError("torch's nn.LSTM/GRU has no reverse-only direction: a reverse case's "
                           "outputs come from another framework")
    if _is_array(outputs):
        y, states = outputs, None
    else:
        if type(outputs[0]).__name__ == "PackedSequence":
            raise HarnessError("y is a PackedSequence: pad it first (torch.nn.utils.rnn."
                               "pad_packed_sequence(..., batch_first=True, total_length=T))")
        y, states = outputs[0], outputs[1] if len(outputs) > 1 else None
    y = _array(y, "y")
    if not _batch_first(y, case, batch_first, "torch"):
        y = y.transpose(1, 0, 2)
    out = {"y": y}
    if states is not None:  # torch's h_n/c_n are the harness's order already
        lstm = case.cell_kind.has_cell_state
        if lstm != isinstance(states, list | tuple):
            raise HarnessError("expected " + ("(y, (h_n, c_n)) for an LSTM" if lstm
                                              else "(y, h_n) for a GRU"))
        out["h_n"] = _array(states[0] if lstm else states, "h_n")
        if lstm:
            out["c_n"] = _array(states[1], "c_n")
    return out


def _from_keras(outputs: Any, case: Case, lengths: np.ndarray | None) -> dict[str, np.ndarray]:
    from harness.frameworks.keras import run_stack

    layers = _per_layer(outputs, case, "Keras", "[y, h, c] or [y, h_f, c_f, h_b, c_b]")
    if layers is None:
        layers = [[outputs]]
        states = False
    else:
        n_state = 2 if case.cell_kind.has_cell_state else 1
        want = 1 + n_state * case.num_directions
        for k, items in enumerate(layers):
            if len(items) != want:
                raise HarnessError(f"Keras outputs of layer {k}: {len(items)} tensors, expected "
                                   f"{want} (y and {n_state} state(s) per direction, as "
                                   "return_state=True gives)")
        states = True
    mask = None
    if lengths is not None:
        mask = np.arange(case.seq_len)[None, :] < np.asarray(lengths)[:, None]
    none = [None] * (case.num_layers * case.num_directions)
    y, h_n, c_n, _ = run_stack(
        case, [[_array(v, "y" if i == 0 else "state") for i, v in enumerate(items)]
               for items in layers],
        None, none, none,
        call=lambda layer, rnn, layer_in, states_in: rnn if states else [rnn[0]] + none,
        flip=lambda v: v[:, ::-1],
        zero_padded=None if mask is None else lambda v: v * mask[:, :, None])
    out = {"y": np.ascontiguousarray(y)}
    if states:
        out["h_n"] = np.stack(h_n)
        if case.cell_kind.has_cell_state:
            out["c_n"] = np.stack(c_n)
    return out


def _from_onnx(outputs: Any, case: Case, batch_first: bool | None) -> dict[str, np.ndarray]:
    from harness.frameworks.onnx import read_outputs

    layers = _per_layer(outputs, case, "ONNX", "Y, Y_h, Y_c")
    if layers is None:
        layers = [[outputs]]
    first = _array(layers[0][0], "Y")
    if first.ndim != 4:
        raise HarnessError(f"Y: expected [T, D, B, H] (or [B, T, D, H] with layout 1), got "
                           f"{list(first.shape)}")
    layout = int(_batch_first(first, case, batch_first, "ONNX"))
    got: dict[str, np.ndarray] = {}
    if len(layers) < case.num_layers:  # Y alone: the last layer's; placeholders below it
        got = {f"Y{k}": np.zeros_like(first) for k in range(case.num_layers - 1)}
        layers = [[]] * (case.num_layers - 1) + layers
    for k, items in enumerate(layers):
        for name, value in zip(("Y", "Y_h", "Y_c"), items, strict=False):
            got[f"{name}{k}"] = _array(value, name)
    states = all(f"Y_h{k}" in got for k in range(case.num_layers))
    lstm = case.cell_kind.has_cell_state
    if states and lstm and not all(f"Y_c{k}" in got for k in range(case.num_layers)):
        raise HarnessError("ONNX outputs of an LSTM: give Y, Y_h and Y_c (or Y alone)")
    if not states:  # Y alone: placeholder states for read_outputs, dropped below
        for k in range(case.num_layers):
            got[f"Y_h{k}"] = got[f"Y_c{k}"] = np.zeros(
                (case.num_directions, case.batch, case.out_size))
    read = read_outputs(case, got, layout=layout).named()
    return read if states else {"y": read["y"]}


def from_framework(outputs: Any, case: Case, framework: str, *, batch_first: bool | None = None,
                   lengths: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """``y``, ``h_n``, ``c_n`` (float64, the harness's order) from ``framework``'s outputs,
    their shapes checked against the case."""
    if framework == "torch":
        out = _from_torch(outputs, case, batch_first)
    elif framework == "keras":
        if batch_first is False:
            raise HarnessError("Keras outputs are batch-major: leave batch_first out")
        out = _from_keras(outputs, case, lengths)
    elif framework == "onnx":
        out = _from_onnx(outputs, case, batch_first)
    else:
        raise HarnessError(f"framework: expected one of {', '.join(FRAMEWORKS)}, got "
                           f"{framework!r}")
    for name, shape in output_shapes(case).items():
        if name in out and tuple(out[name].shape) != shape:
            raise HarnessError(f"{name}: expected shape {list(shape)} for case {case.name}, got "
                               f"{list(out[name].shape)}")
    return out
