"""Weights given to :func:`harness.check` as they are at hand: a file, a framework object, or
native arrays. Each becomes what a case file's ``weights: {file: ...}`` names, so that it goes
through the very reading a case file's does (:func:`harness.readers.read_case_weights`: the
format's reader, its limits and checks against the case):

- a path: the file itself;
- a torch ``nn.LSTM``/``nn.GRU`` (or cell, or a model holding one): its ``state_dict()``,
  saved as users save it (``torch.save``) and read back with ``weights_only=True``;
- an ONNX ``ModelProto``: saved as an ``.onnx`` file;
- a Keras layer or model (Keras 3 or tf_keras): its recurrent layers' variables and configs,
  taken as the Keras reader takes them from a file (:func:`harness.readers.keras.fields_of_layers`,
  :func:`~harness.readers.keras.native_of_layers`), saved as an ``.npz`` of that layout;
- a mapping of native arrays (``{"weight_ih_l0": ...}``): saved as an ``.npz``.

What the weights tell about the case (sizes, directions, the GRU variant, activations) is
:attr:`GivenWeights.fields`: it fills in what a case built in code leaves out.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.npz import save_npz
from harness.readers.keras import keras_library, keras_object_layers
from harness.spec import Case, TensorFile


@dataclass
class GivenWeights:
    """Weights for a case: ``entry(case)`` is the case's ``weights:`` entry (writing what it
    needs into the check's temporary folder); ``fields`` what they tell about the case."""

    entry: Callable[[Case], TensorFile]
    fields: dict[str, Any] = field(default_factory=dict)
    # what errors name instead of the temporary file an object became (None: a file given)
    label: str | None = None


def given_weights(weights: Any, folder: Path, *, layout: str | None = None,
                  select: str | None = None) -> GivenWeights:
    """:class:`GivenWeights` of a path, a framework object or a mapping of arrays; files made
    go into ``folder``."""
    if isinstance(weights, str | os.PathLike):
        return _file(Path(weights).resolve(), layout, select)
    torch = sys.modules.get("torch")  # an object of a framework that is not imported cannot be
    if torch is not None and isinstance(weights, torch.nn.Module):
        path = folder / "module.pt"
        # a view is saved as its storage, as in a user's file: the reader checks its logical
        # shape against the case and the memory limit before converting it
        torch.save(weights.state_dict(), path)
        return _file(path, layout, select, f"the torch {type(weights).__name__} module")
    onnx = sys.modules.get("onnx")
    if onnx is not None and isinstance(weights, onnx.ModelProto):
        path = folder / "model.onnx"
        onnx.save(weights, str(path))
        return _file(path, layout, select, "the ONNX model")
    library = keras_library(weights)
    if library is not None:
        return _keras(weights, library, folder, layout, select)
    if isinstance(weights, Mapping):
        path = folder / "weights.npz"
        save_npz(path, {str(k): np.asarray(v) for k, v in weights.items()})
        return GivenWeights(lambda case: TensorFile(file=str(path), layout=layout),
                            label="the weights mapping")
    raise HarnessError(f"weights: expected a file path, a torch nn.Module, a Keras layer or "
                       f"model, an ONNX ModelProto or a mapping of arrays, got "
                       f"{type(weights).__name__}")


def _file(path: Path, layout: str | None, select: str | None, label: str | None = None
          ) -> GivenWeights:
    from harness.readers.dispatch import infer_fields

    fields: dict[str, Any] = {}
    if path.suffix.lower() != ".npz":  # an .npz holds bare tensors: the case gives the sizes
        with named(label, path):
            fields, _, _ = infer_fields(path, select=select)
    return GivenWeights(lambda case: TensorFile(file=str(path), layout=layout, select=select),
                        fields, label)


@contextlib.contextmanager
def named(label: str | None, made: Path) -> Iterator[None]:
    """An error naming a file made from an object (in ``made``, a file or the folder of them)
    names the object instead (``label``)."""
    try:
        yield
    except HarnessError as exc:
        if label is not None and exc.file is not None and Path(exc.file).is_relative_to(made):
            exc.file = label
            exc.message = exc.message.split(" (weights.file of ")[0]
        raise


def _keras(obj: Any, library: str, folder: Path, layout: str | None,
           select: str | None) -> GivenWeights:
    from harness.readers.dispatch import check_fields
    from harness.readers.keras import fields_of_layers, native_of_layers

    where = f"Keras {type(obj).__name__} {getattr(obj, 'name', '')!r}"
    layers = keras_object_layers(obj)
    if any(not la["dirs"][0] for la in layers):
        raise HarnessError(f"{where}: a recurrent layer has no weights yet: call or build the "
                           "model first")
    fields, found, _ = fields_of_layers(layers, where, keras3=library == "keras3",
                                        select=select)
    if layout is not None and layout != found:
        raise HarnessError(f"{where} holds {found!r} tensors, not {layout!r}")

    def entry(case: Case) -> TensorFile:
        check_fields(where, fields, case)
        native, _ = native_of_layers(layers, found, case, select=select, path=where)
        path = folder / f"keras-{case.name}.npz"
        save_npz(path, native)
        return TensorFile(file=str(path), layout=found)

    return GivenWeights(entry, fields, where)
