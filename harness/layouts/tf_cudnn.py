"""TF ``CudnnRNN*`` ops: cuDNN's canonical weights (``tf-cudnn``) and its opaque buffer
(``tf-cudnn-params``). The shared facts are in ``harness/cudnn.py``.

``tf-cudnn``: one tensor per cuDNN linLayerID, named after the op's input lists
(``CudnnRNNCanonicalToParamsV2(weights=[...], biases=[...])``, ``CudnnRNNParamsToCanonicalV2``
outputs), scoped per layer and direction as the native weight files are:

    weights/0..3   W_i W_f W_c(=g) W_o   [H, in_l]     GRU weights/0..2: W_r W_z W_h(=n)
    weights/4..7   R_i R_f R_c R_o       [H, P or H]   GRU weights/3..5: R_r R_z R_h
    weights/8      projection Wp         [P, H]        LSTM with num_proj only
    biases/0..3    bW_i .. bW_o          [H]           GRU biases/0..2: bW_r bW_z bW_h
    biases/4..7    bR_i .. bR_o          [H]           GRU biases/3..5

Matrices are in math orientation (what ``CudnnRNNParamsToCanonicalV2`` returns: ``[H, in]``,
the projection ``[P, H]``), so every block is copied. cuDNN adds no forget bias at run time:
a case's ``forget_bias`` is stored in ``biases/1`` (bW_f).

``tf-cudnn-params``: the single flat ``params`` vector the ``CudnnRNN*`` ops run on
(``CudnnRNNParamsSize`` elements): every matrix of every pseudo-layer (layer-major, forward
before backward), flattened row-major, then every bias. cuDNN calls this buffer opaque; the
order and its sources are in ``harness/cudnn.py``, and ``tests/adapters/test_gpu_adapters.py``
checks it against the buffers TensorFlow and PyTorch obtain from cuDNN.
"""

from __future__ import annotations

from harness.cudnn import (
    BIASES,
    MATRICES,
    PROJECTION_ID,
    buffer_size,
    regions,
    tf_bias_name,
    tf_weight_name,
)
from harness.layouts.base import Layout, NativeTensor, Placement, grid
from harness.params import key
from harness.spec import Case


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    tensors = [grid(case, layer, d, tf_weight_name(lin_id), [[name]])
               for lin_id, name in enumerate(MATRICES[case.cell])]
    if case.proj_size:
        tensors.append(grid(case, layer, d, tf_weight_name(PROJECTION_ID), [["Wp"]]))
    tensors += [grid(case, layer, d, tf_bias_name(lin_id), [[name]], fold_forget_bias=True)
                for lin_id, name in enumerate(BIASES[case.cell])]
    return tensors


def describe_params(case: Case, layer: int, d: int) -> list[NativeTensor]:
    placements = tuple(
        Placement(
            index=(slice(r.offset, r.offset + r.size),),
            sources=(key(layer, d, r.name),),
            transform="copy" if r.is_bias else "reshape",  # matrices: row-major [H, in]
            fold_forget_bias=r.name == "bW_f",
            where=f"[{r.offset}:{r.offset + r.size}]",
        )
        for r in regions(case) if (r.layer, r.direction) == (layer, d)
    )
    return [NativeTensor("params", (buffer_size(case),), placements)]


def runtime(case: Case) -> list[str]:
    notes = []
    if case.cell_kind.has_cell_state:
        notes.append("cuDNN LSTM: i, f, c (= g), o with both biases added; no peepholes, no "
                     "clipping" + ("; h = Wp (o * tanh c) (num_proj)" if case.proj_size else ""))
    else:
        notes.append("cuDNN GRU is reset-after: h' = tanh(W_h x + bW_h + r * (R_h h + bR_h)), "
                     "h = (1 - z) h' + z h (cuDNN calls z 'i')")
    if case.seq_lengths is not None:
        notes.append("sequence_lengths: cuDNN writes zeros at padded steps, starts the backward "
                     "direction at each sequence's last valid step and returns the states of "
                     "the last valid step")
    return notes


def runtime_canonical(case: Case) -> list[str]:
    return runtime(case) + [
        "CudnnRNNCanonicalToParamsV2 takes weights = weights/0..7 (+ weights/8) and biases = "
        "biases/0..7 of every pseudo-layer (layer-major, forward before backward) and copies "
        "each into the region cuDNN reports for it (layout tf-cudnn-params)"]


def runtime_params(case: Case) -> list[str]:
    return runtime(case) + [
        "the buffer is opaque to cuDNN's users: this order (all matrices, then all biases) is "
        "read in MXNet's source, which hands its flat vector to cuDNN unchanged (harness/cudnn.py)"]


TF_CUDNN = Layout(
    name="tf-cudnn",
    title="TF CudnnRNN canonical weights (CudnnRNNCanonicalToParamsV2 weights/biases lists)",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime_canonical,
    scoped_names=True,
)

TF_CUDNN_PARAMS = Layout(
    name="tf-cudnn-params",
    title="cuDNN opaque RNN parameter buffer (CudnnRNN params)",
    cells=("lstm", "gru"),
    describe=describe_params,
    runtime=runtime_params,
)
