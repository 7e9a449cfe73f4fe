"""cuDNN's RNN parameter buffer in pure NumPy: what the cuDNN adapters hand to cuDNN.

Shared by the ``tf-cudnn`` and ``keras-cudnn`` adapters and layouts, and by the CPU tests that
check them without a GPU (``tests/layouts/test_cudnn_packing.py``). Facts:

- linLayerID, LSTM: 0..3 are the input matrices W of gates i, f, c (= canonical g), o; 4..7
  the recurrent matrices R of the same gates; 8 the recurrent projection (LSTM with
  ``num_proj``). GRU: 0..2 are W of r, z (cuDNN's "i"), h' (= canonical n); 3..5 R. Bias IDs
  follow the matrices: bW for 0..3 (GRU 0..2), bR for 4..7 (GRU 3..5); the projection has no
  bias.
- Every matrix is row-major ``[H, in]`` (R ``[H, P or H]``, projection ``[P, H]``): the
  canonical math orientation, so canonical blocks are copied, never transposed.
- A pseudo-layer is ``layer * D + direction`` (forward 0, backward 1).
- Buffer order: every matrix of every pseudo-layer first (pseudo-layer-major, linLayerID
  order, the projection after a pseudo-layer's R matrices), then every bias vector in the same
  order. cuDNN documents the buffer as opaque (query ``cudnnGetRNNWeightParams``); this order
  is [read in source: apache/mxnet ``src/operator/rnn-inl.h``, whose GPU path hands its flat
  parameter vector to ``cudnnRNNForward*`` unchanged while its CPU path reads every weight
  first and the biases at the end (``b_ptr = w + size - bias_size``), and
  ``python/mxnet/gluon/rnn/rnn_layer.py``, which concatenates i2h, h2h (, h2r) weights of
  every layer and direction, then the biases]. For a single pseudo-layer it is also what
  tf_keras builds (``gru_lstm_utils.canonical_to_params``: weights, then biases).
  ``tests/adapters/test_gpu_adapters.py`` checks it against real cuDNN buffers (TF and PyTorch).

TensorFlow (``tf-cudnn``) never needs the buffer order: ``CudnnRNNCanonicalToParamsV2`` takes
lists of canonical weights and biases and asks cuDNN where each goes. The lists are
pseudo-layer-major in linLayerID order, the projection appended after each pseudo-layer's 8
matrices [read in source: tensorflow ``stream_executor/cuda/cuda_dnn.cc``
``CudnnRnnParamsDescriptor::Create`` and ``CheckAndFetchProjectionWeights``].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.params import DIRECTION_NAMES, block_shapes, layer_dirs
from harness.spec import Case

# canonical NAME per linLayerID
MATRICES = {
    "lstm": ("W_i", "W_f", "W_g", "W_o", "R_i", "R_f", "R_g", "R_o"),
    "gru": ("W_r", "W_z", "W_n", "R_r", "R_z", "R_n"),
}
BIASES = {
    "lstm": ("bW_i", "bW_f", "bW_g", "bW_o", "bR_i", "bR_f", "bR_g", "bR_o"),
    "gru": ("bW_r", "bW_z", "bW_n", "bR_r", "bR_z", "bR_n"),
}
PROJECTION_ID = 8


def matrix_names(case: Case) -> tuple[str, ...]:
    """Canonical NAMEs of one pseudo-layer's matrices, by linLayerID (projection last)."""
    return MATRICES[case.cell] + (("Wp",) if case.proj_size else ())


def bias_names(case: Case) -> tuple[str, ...]:
    """Canonical NAMEs of one pseudo-layer's bias vectors, by linLayerID."""
    return BIASES[case.cell]


def pseudo_layers(case: Case) -> list[tuple[int, int]]:
    """(layer, direction) per pseudo-layer. cuDNN has no reverse-only mode (the adapters
    declare it not applicable); the layouts still describe such a case, one pseudo-layer per
    layer, so that mapping tables and conversions work for every case."""
    return list(layer_dirs(case))


def scoped(case: Case, layer: int, d: int, name: str) -> str:
    """Native name with the layer/direction scope of the native weight files: bare for
    one unidirectional layer, else ``layer{k}/{forward|backward}/NAME``."""
    if case.num_layers == 1 and case.num_directions == 1:
        return name
    return f"layer{layer}/{DIRECTION_NAMES[d]}/{name}"


# The flat buffer ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Region:
    """Where one canonical block lies in cuDNN's flat buffer (row-major, C order)."""

    layer: int
    direction: int
    lin_id: int
    name: str  # canonical NAME, e.g. R_f
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def is_bias(self) -> bool:
        return self.name.startswith("b")


def regions(case: Case) -> tuple[Region, ...]:
    """Every block of the buffer in buffer order: all matrices, then all biases (module doc)."""
    out: list[Region] = []
    offset = 0
    for names in (matrix_names(case), bias_names(case)):
        for layer, d in pseudo_layers(case):
            shapes = block_shapes(case, layer)
            for k, name in enumerate(names):
                lin_id = PROJECTION_ID if name == "Wp" else k
                region = Region(layer, d, lin_id, name, offset, shapes[name])
                out.append(region)
                offset += region.size
    return tuple(out)


def buffer_size(case: Case) -> int:
    """Elements in the buffer (``CudnnRNNParamsSize``)."""
    last = regions(case)[-1]
    return last.offset + last.size


# tf-cudnn: the lists CudnnRNNCanonicalToParamsV2 takes ------------------------------------------

def tf_weight_name(lin_id: int) -> str:
    return f"weights/{lin_id}"


def tf_bias_name(lin_id: int) -> str:
    return f"biases/{lin_id}"


def tf_native_names(case: Case) -> tuple[list[str], list[str]]:
    """Native names (layout ``tf-cudnn``) in the order of ``CudnnRNNCanonicalToParamsV2``'s
    ``weights`` and ``biases`` lists: pseudo-layer-major, linLayerID order, the projection
    (``weights/8``) right after each pseudo-layer's recurrent matrices."""
    n_mat = len(MATRICES[case.cell])
    weights, biases = [], []
    for layer, d in pseudo_layers(case):
        ids = list(range(n_mat)) + ([PROJECTION_ID] if case.proj_size else [])
        weights += [scoped(case, layer, d, tf_weight_name(k)) for k in ids]
        biases += [scoped(case, layer, d, tf_bias_name(k)) for k in range(n_mat)]
    return weights, biases


Native = dict[str, np.ndarray]


def tf_lists(native: Native, case: Case) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The ``weights`` and ``biases`` lists the ``tf-cudnn`` adapter hands to
    ``CudnnRNNCanonicalToParamsV2`` (float64; the adapter casts them)."""
    weight_keys, bias_keys = tf_native_names(case)
    return [native[n] for n in weight_keys], [native[n] for n in bias_keys]


def tf_params(native: Native, case: Case) -> np.ndarray:
    """What ``CudnnRNNCanonicalToParamsV2`` builds from :func:`tf_lists`: each tensor copied,
    flattened in C order, into the region cuDNN reports for its (pseudo-layer, linLayerID)."""
    weights, biases = tf_lists(native, case)
    # TF's region lists run pseudo-layer-major; regions() runs in buffer order (matrices first)
    by_key = {(r.layer, r.direction, r.is_bias, r.lin_id): r for r in regions(case)}
    order = pseudo_layers(case)
    n_mat, n_bias = len(matrix_names(case)), len(bias_names(case))
    buf = np.zeros(buffer_size(case))
    for i, w in enumerate(weights):
        layer, d = order[i // n_mat]
        r = by_key[(layer, d, False, i % n_mat)]  # the projection, 9th, is linLayerID 8
        assert w.size == r.size, (r, w.shape)
        buf[r.offset:r.offset + r.size] = np.ravel(w, order="C")
    for i, b in enumerate(biases):
        layer, d = order[i // n_bias]
        r = by_key[(layer, d, True, i % n_bias)]
        assert b.size == r.size, (r, b.shape)
        buf[r.offset:r.offset + r.size] = b
    return buf


# keras-cudnn: tf_keras CuDNNLSTM / CuDNNGRU ---------------------------------------------------

KERAS_NAMES = ("kernel", "recurrent_kernel", "bias")  # the layer's weights, in set_weights order

# Slices of the stored gate blocks tf_keras hands to cuDNN, by linLayerID. CuDNNLSTM stores
# i f c o (= cuDNN order); CuDNNGRU stores z r h and swaps to cuDNN's r z h. Bias blocks: the
# first len(...) are the input biases, the rest the recurrent ones.
KERAS_GATE_SLICES = {"lstm": (0, 1, 2, 3), "gru": (1, 0, 2)}


def keras_weights(native: Native, case: Case, layer: int, d: int) -> list[np.ndarray]:
    """``[kernel, recurrent_kernel, bias]`` of one CuDNNLSTM/CuDNNGRU layer (layout
    ``keras-cudnn``), in the order ``set_weights`` takes them."""
    return [native[scoped(case, layer, d, n)] for n in KERAS_NAMES]


def keras_params(kernel: np.ndarray, recurrent_kernel: np.ndarray, bias: np.ndarray, cell: str
                 ) -> np.ndarray:
    """The flat buffer tf_keras's CuDNNLSTM / CuDNNGRU hands to ``CudnnRNNV3`` for one layer:
    per gate (cuDNN order) the ``[in, H]`` column slice of ``kernel``, then of
    ``recurrent_kernel``, each flattened in C order **without** a transpose, then the bias
    slices. [read in source: tf_keras/src/layers/rnn/cudnn_lstm.py and cudnn_gru.py
    ``_process_batch``; gru_lstm_utils.canonical_to_params with transpose_weights=False]"""
    H = recurrent_kernel.shape[0]
    gates = KERAS_GATE_SLICES[cell]
    n = len(gates)

    def col(m: np.ndarray, g: int) -> np.ndarray:
        return m[:, g * H:(g + 1) * H].ravel(order="C")

    weights = [col(kernel, g) for g in gates] + [col(recurrent_kernel, g) for g in gates]
    biases = [bias[g * H:(g + 1) * H] for g in gates] + [bias[(n + g) * H:(n + g + 1) * H]
                                                          for g in gates]
    return np.concatenate(weights + biases)


def keras_buffers(native: Native, case: Case) -> dict[tuple[int, int], np.ndarray]:
    """(layer, direction) -> the buffer the ``keras-cudnn`` adapter's layer for it hands to
    cuDNN (one unidirectional single-layer cuDNN RNN each)."""
    return {(layer, d): keras_params(*keras_weights(native, case, layer, d), case.cell)
            for layer, d in pseudo_layers(case)}
