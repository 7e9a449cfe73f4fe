"""Weights from the files people actually have, as native tensors of a layout.

One module per format, each with its reader and what the format tells about the case
(``infer``); the dispatch by suffix is :mod:`harness.readers.dispatch`:

- ``.npz``: the native weight-file contract (docs/cases.md, "Native weight files"), loaded
  without pickle (:func:`harness.npz.load_npz`).
- ``.pt`` / ``.pth`` / ``.bin`` (layout ``torch``): a PyTorch ``state_dict``
  (:mod:`harness.readers.torch`).
- ``.h5`` / ``.hdf5`` / ``.keras`` (layouts ``keras``, ``keras-cudnn``): the recurrent layers of
  a tf_keras or Keras 3 model or weights file, read with h5py (:mod:`harness.readers.keras`).
- ``.onnx`` (layout ``onnx``): the LSTM/GRU nodes' weights, subgraphs included, folded from
  constant chains where they are not initializers (:mod:`harness.readers.onnx`;
  :func:`harness.readers.onnx_layers.recurrent_layers` lists every recurrent node).
- ``.msgpack`` (layouts ``flax``, ``flax-nnx``): a ``flax.serialization.to_bytes`` parameter
  tree, decoded under limits without flax (:mod:`harness.readers.flax`).

Beside them, the deployed files (:mod:`harness.readers.deployed`: a case's ``.tflite`` or
OpenVINO IR weights and its shipped file): a ``.tflite``'s fused LSTM ops and recognized GRU
loops (:mod:`harness.readers.tflite`, :mod:`harness.readers.tflite_while`), an IR's sequence
ops (:mod:`harness.readers.openvino_ir`), read as ``compare`` reads them; and a Keras layer or
model in memory (:func:`harness.readers.keras.keras_object_layers`).

The files may come from strangers. Nothing is read from outside the file: HDF5 external links,
external raw storage and virtual datasets, and ONNX external data, are refused. Sizes are
checked against the memory limit before anything is read: the file's, a zip's members once
inflated (``.keras``, ``torch.save``; a legacy non-zip ``torch.save`` file is refused), an HDF5
file's datasets as declared, a ``.msgpack``'s objects counted in its bytes, the tensors an ONNX
model's recurrent nodes use as declared (the rest is never parsed); a torch tensor's logical
shape (a view is saved as its storage alone) against the case and the limit before it is
converted. Whatever else a malformed
file makes a reader raise is one line naming the file (:mod:`harness.readers.limits`).

Every reader returns ``(native, notes)``: the tensors under the layout's names, and lines worth
telling the user (what was read from where).

The readers sit below the run: they import no adapter, runner or tool, and no framework at
import time.
"""

from __future__ import annotations

from harness.readers.dispatch import fitting_layouts, infer_case, read_case_weights, read_native
from harness.readers.flax import read_flax_msgpack
from harness.readers.keras import read_keras
from harness.readers.onnx import read_onnx
from harness.readers.torch import read_torch

__all__ = ["fitting_layouts", "infer_case", "read_case_weights", "read_flax_msgpack",
           "read_keras", "read_native", "read_onnx", "read_torch"]
