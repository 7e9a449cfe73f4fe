"""A NumPy emulation of cuDNN's RNN weight buffer and of TF's cuDNN ops, for tests without a GPU.

Written from the documented facts (docs/layouts.md: keras-cudnn, tf-cudnn,
tf-cudnn-params), on purpose independently of ``harness/cudnn.py``, so that the two descriptions
check each other:

- per pseudo-layer (``layer * D + direction``) the matrices by linLayerID, each row-major
  ``[H, in]``: LSTM W_i W_f W_c W_o (``[H, in_l]``), R_i R_f R_c R_o (``[H, P or H]``) and with
  a projection the matrix ``[P, H]`` (linLayerID 8); GRU W_r W_z W_h, R_r R_z R_h;
- the bias vectors ``[H]`` by the same IDs (input biases, then recurrent biases);
- the buffer holds every pseudo-layer's matrices first, then every pseudo-layer's biases.

cuDNN's arithmetic is the float64 reference (``harness.reference.run``) on the decoded
blocks, with cuDNN's documented variable-length behaviour, which the reference shares: zeros at
padded steps, the backward direction starting at each sequence's last valid step, final states
at the last valid step.

:func:`patch_tf` installs fake ``CudnnRNNCanonicalToParamsV2`` and ``CudnnRNNV3`` raw ops built
on this emulation, so that the ``tf-cudnn`` and ``keras-cudnn`` adapters (and tf_keras's own
``CuDNNLSTM`` code) run end to end on CPU; only cuDNN itself is emulated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import reference
from harness.data import Inputs
from harness.params import Canonical
from harness.spec import Case

# canonical NAME per linLayerID (0.., then 8 = projection)
LSTM_MATRICES = ["W_i", "W_f", "W_g", "W_o", "R_i", "R_f", "R_g", "R_o"]
GRU_MATRICES = ["W_r", "W_z", "W_n", "R_r", "R_z", "R_n"]


@dataclass(frozen=True)
class Dims:
    """What cuDNN's RNN descriptor knows: cell, sizes, layers, directions."""

    cell: str
    input_size: int
    hidden_size: int
    proj_size: int = 0
    num_layers: int = 1
    num_directions: int = 1

    def matrices(self, layer: int) -> list[tuple[str, tuple[int, int]]]:
        """(canonical NAME, shape) of one pseudo-layer's matrices, in linLayerID order."""
        H, P, D = self.hidden_size, self.proj_size, self.num_directions
        in_l = self.input_size if layer == 0 else (P or H) * D
        names = LSTM_MATRICES if self.cell == "lstm" else GRU_MATRICES
        half = len(names) // 2
        out = [(n, (H, in_l)) for n in names[:half]] + [(n, (H, P or H)) for n in names[half:]]
        if P:
            out.append(("Wp", (P, H)))
        return out

    def biases(self) -> list[str]:
        names = LSTM_MATRICES if self.cell == "lstm" else GRU_MATRICES
        return ["b" + n for n in names]  # bW_i ... bR_o

    def pseudo_layers(self) -> list[tuple[int, str]]:
        dirs = ["forward", "backward"][: self.num_directions]
        return [(layer, d) for layer in range(self.num_layers) for d in dirs]


def dims_of(case: Case) -> Dims:
    assert case.dir_mode != "reverse"
    return Dims(case.cell, case.input_size, case.hidden_size, case.proj_size, case.num_layers,
                case.num_directions)


def weight_regions(dims: Dims) -> tuple[list[tuple[int, tuple[int, ...]]], list[tuple[int, int]]]:
    """(offset, shape) of every matrix and (offset, size) of every bias, each list in
    pseudo-layer-major linLayerID order (the order TF gets from ``cudnnGetRNNWeightParams``)."""
    mats, biases, off = [], [], 0
    for layer, _ in dims.pseudo_layers():
        for _, shape in dims.matrices(layer):
            mats.append((off, shape))
            off += shape[0] * shape[1]
    for _ in dims.pseudo_layers():
        for _ in dims.biases():
            biases.append((off, dims.hidden_size))
            off += dims.hidden_size
    return mats, biases


def buffer_size(dims: Dims) -> int:
    mats, biases = weight_regions(dims)
    return biases[-1][0] + biases[-1][1]


def decode(buf: np.ndarray, dims: Dims) -> Canonical:
    """Canonical blocks (``layer{k}/{forward|backward}/NAME``) as cuDNN reads them from ``buf``."""
    buf = np.asarray(buf, dtype=np.float64).ravel()
    assert buf.size == buffer_size(dims), (buf.size, buffer_size(dims))
    out, off = {}, 0
    for layer, d in dims.pseudo_layers():
        for name, (rows, cols) in dims.matrices(layer):
            out[f"layer{layer}/{d}/{name}"] = buf[off:off + rows * cols].reshape(rows, cols)
            off += rows * cols
    for layer, d in dims.pseudo_layers():
        for name in dims.biases():
            out[f"layer{layer}/{d}/{name}"] = buf[off:off + dims.hidden_size].copy()
            off += dims.hidden_size
    return Canonical(out)


def canonical_to_params(weights: list[np.ndarray], biases: list[np.ndarray], dims: Dims
                        ) -> np.ndarray:
    """TF's ``CudnnRNNCanonicalToParams[V2]``: ``weights[i]`` / ``biases[i]`` copied (C order)
    into the i-th region cuDNN reports; TF checks only the element counts."""
    mats, bias_regions = weight_regions(dims)
    if len(weights) != len(mats) or len(biases) != len(bias_regions):
        raise ValueError(f"Number of params mismatch: {len(weights)}/{len(biases)} given, "
                         f"{len(mats)}/{len(bias_regions)} expected")
    buf = np.zeros(buffer_size(dims))
    for w, (off, shape) in zip(weights, mats, strict=True):
        size = shape[0] * shape[1]
        if np.size(w) != size:
            raise ValueError(f"Params size mismatch. Expected {size}, got {np.size(w)}")
        buf[off:off + size] = np.ravel(w)
    for b, (off, size) in zip(biases, bias_regions, strict=True):
        if np.size(b) != size:
            raise ValueError(f"Params size mismatch. Expected {size}, got {np.size(b)}")
        buf[off:off + size] = np.ravel(b)
    return buf


def cudnn_forward(params: np.ndarray, dims: Dims, x: np.ndarray, h0: np.ndarray,
                  c0: np.ndarray | None, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    """cuDNN's RNN forward, batch-major: x [B, T, I], h0/c0 [L*D, B, .] -> y, h_n, c_n."""
    B, T, _ = x.shape
    full = bool((lengths == T).all())
    case = Case(name="cudnn-emulation", cell=dims.cell, input_size=dims.input_size,
                hidden_size=dims.hidden_size, proj_size=dims.proj_size,
                num_layers=dims.num_layers,
                direction="bidirectional" if dims.num_directions == 2 else "forward",
                batch=B, seq_len=T, seq_lengths=None if full else [int(n) for n in lengths],
                dtype="float64")
    out = reference.run(case, decode(params, dims), Inputs(
        x=x, h0=h0, c0=c0, seq_lengths=None if full else lengths.astype(np.int64)))
    return out.y, out.h_n, out.c_n


# Fake TF raw ops ------------------------------------------------------------------------------

@dataclass
class Recorder:
    """What the fake ops were called with (numpy copies), in call order."""

    canonical_to_params: list[dict[str, Any]] = field(default_factory=list)
    rnn: list[dict[str, Any]] = field(default_factory=list)


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t).astype(np.float64)


def patch_tf(monkeypatch: Any, *, broken_bias_regions: bool = False) -> Recorder:
    """Replace TF's ``CudnnRNNParamsSize``, ``CudnnRNNCanonicalToParamsV2``,
    ``CudnnRNNParamsToCanonicalV2`` and ``CudnnRNNV3`` (in every raw_ops module TF exposes;
    tf_keras uses ``tensorflow.compat.v2``) by the emulation. ``broken_bias_regions`` emulates a
    TF whose region table gives biases the matrices' sizes: ParamsToCanonical reports it as an
    error, CanonicalToParams would abort the process (here: raises)."""
    import tensorflow as tf

    rec = Recorder()
    fakes = {
        "CudnnRNNParamsSize": _fake_params_size(tf),
        "CudnnRNNParamsToCanonicalV2": _fake_params_to_canonical(tf, broken_bias_regions),
        "CudnnRNNCanonicalToParamsV2": _fake_canonical_to_params(tf, rec, broken_bias_regions),
        "CudnnRNNV3": _fake_cudnn_rnn_v3(tf, rec),
    }
    modules = {id(m): m for m in (tf.raw_ops, tf.compat.v2.raw_ops, tf.compat.v1.raw_ops)}
    for m in modules.values():
        for name, fake in fakes.items():
            monkeypatch.setattr(m, name, fake)
    return rec


def _dims_from(num_layers, num_units, input_size, rnn_mode, direction, num_proj) -> Dims:
    return Dims(rnn_mode, int(_np(input_size)), int(_np(num_units)), int(num_proj),
                int(_np(num_layers)), 2 if direction == "bidirectional" else 1)


def _fake_params_size(tf: Any) -> Callable[..., Any]:
    def fake_params_size(num_layers, num_units, input_size, T, S, rnn_mode="lstm",
                         input_mode="linear_input", direction="unidirectional", dropout=0,
                         seed=0, seed2=0, num_proj=0, name=None):
        dims = _dims_from(num_layers, num_units, input_size, rnn_mode, direction, num_proj)
        return tf.constant([buffer_size(dims)], S)

    return fake_params_size


def _fake_params_to_canonical(tf: Any, broken_bias_regions: bool) -> Callable[..., Any]:
    def fake_params_to_canonical(num_layers, num_units, input_size, params, num_params_weights,
                                 num_params_biases, rnn_mode="lstm", input_mode="linear_input",
                                 direction="unidirectional", dropout=0, seed=0, seed2=0,
                                 num_proj=0, name=None):
        if broken_bias_regions:
            raise tf.errors.InvalidArgumentError(None, None, "Params size mismatch. Expected "
                                                 f"{int(_np(num_units))}, got more")
        dims = _dims_from(num_layers, num_units, input_size, rnn_mode, direction, num_proj)
        buf = _np(params)
        mats, biases = weight_regions(dims)
        assert (len(mats), len(biases)) == (num_params_weights, num_params_biases)
        return ([tf.constant(buf[o:o + r * c].reshape(r, c), params.dtype) for o, (r, c) in mats]
                + [tf.constant(buf[o:o + n], params.dtype) for o, n in biases])

    return fake_params_to_canonical


def _fake_canonical_to_params(tf: Any, rec: Recorder,
                              broken_bias_regions: bool) -> Callable[..., Any]:
    def fake_canonical_to_params(num_layers, num_units, input_size, weights, biases,
                                 rnn_mode="lstm", input_mode="linear_input",
                                 direction="unidirectional", dropout=0, seed=0, seed2=0,
                                 num_proj=0, name=None):
        assert input_mode == "linear_input" and dropout == 0
        if broken_bias_regions:
            raise AssertionError("CudnnRNNCanonicalToParams would abort the process here")
        dims = _dims_from(num_layers, num_units, input_size, rnn_mode, direction, num_proj)
        ws, bs = [_np(w) for w in weights], [_np(b) for b in biases]
        rec.canonical_to_params.append(dict(dims=dims, weights=ws, biases=bs))
        return tf.constant(canonical_to_params(ws, bs, dims), dtype=weights[0].dtype)

    return fake_canonical_to_params


def _fake_cudnn_rnn_v3(tf: Any, rec: Recorder) -> Callable[..., Any]:
    def fake_cudnn_rnn_v3(input, input_h, input_c, params, sequence_lengths, rnn_mode="lstm",
                          input_mode="linear_input", direction="unidirectional", dropout=0,
                          seed=0, seed2=0, num_proj=0, is_training=True, time_major=True,
                          name=None):
        assert input_mode == "linear_input" and dropout == 0
        dtype = input.dtype
        x, h0 = _np(input), _np(input_h)
        if time_major:  # [T, B, I] and states [L*D, B, .]
            x = x.transpose(1, 0, 2)
        else:  # batch-major data and states [B, L*D, .]
            h0 = h0.transpose(1, 0, 2)
        lstm = rnn_mode == "lstm"
        c0 = _np(input_c) if lstm else None
        if lstm and not time_major:
            c0 = c0.transpose(1, 0, 2)
        D = 2 if direction == "bidirectional" else 1
        H = c0.shape[-1] if lstm else h0.shape[-1]
        dims = Dims(rnn_mode, x.shape[-1], H, int(num_proj), h0.shape[0] // D, D)
        buf = _np(params)
        lengths = np.asarray(_np(sequence_lengths), dtype=np.int64)
        rec.rnn.append(dict(dims=dims, params=buf, x=x, h0=h0, c0=c0, lengths=lengths,
                            time_major=time_major))
        y, h_n, c_n = cudnn_forward(buf, dims, x, h0, c0, lengths)
        if time_major:
            y = y.transpose(1, 0, 2)
        else:
            h_n = h_n.transpose(1, 0, 2)
            c_n = c_n.transpose(1, 0, 2) if lstm else None

        def t(a: np.ndarray | None) -> Any:
            return tf.cast(tf.constant(np.zeros(0) if a is None else a), dtype)

        # output, output_h, output_c, reserve_space, host_reserved
        return t(y), t(h_n), t(c_n), t(None), t(None)

    return fake_cudnn_rnn_v3
