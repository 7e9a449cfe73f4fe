"""Every recurrent layer of a model file or object, as canonical parameters (:class:`Layer`).

A layer is one stacked layer of one recurrent module, with its one or two directions: a
torch ``nn.GRU(num_layers=2)`` saved as ``rnn`` is two layers, ``rnn/layer0`` and
``rnn/layer1`` (a port may well stack its layers otherwise: a Keras model holds one ``GRU``
per layer), a Keras ``GRU`` or ``Bidirectional`` layer is one, an ONNX ``LSTM``/``GRU`` node
is one per stacked layer of it (a node holds one). Each layer's case holds its cell, sizes,
directions and semantics (reset_after, the gate activation, ...), with ``num_layers`` 1 and
``input_size`` what that layer reads.

The formats' readers (:mod:`harness.readers`) do the reading, with their limits on untrusted
files; :func:`layers_of` is the one place that lists a file's layers, format by format (an
ONNX model's: every LSTM/GRU node the ONNX layer finder finds, in ``If``/``Loop``/``Scan``
bodies too, with weights folded through constant chains; a node whose weights depend on a
graph input is an :class:`Unread`, listed, not compared).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.dtypes import round_to
from harness.errors import HarnessError, WeightsError
from harness.layouts import get_layout
from harness.params import Canonical, key
from harness.readers.keras import keras_library, keras_object_layers
from harness.readers.limits import check_file, check_size, check_zip, one_line
from harness.spec import Case

# the adapter that runs a layer of each layout in its own framework, as a run does
ADAPTER_OF_LAYOUT = {"torch": "torch-cpu", "keras": "keras3", "onnx": "onnxruntime",
                     "flax": "flax-linen", "flax-nnx": "flax-nnx"}
# the narrowest format whose values a layer's tensors all are: the rounding they were stored with
STORED_FORMATS = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Layer:
    """One recurrent layer of a model: ``path`` names it (``select`` matches it or ``name``);
    ``case`` its one-layer case; ``canonical`` its weights (``layer0/forward/W_r``, ...);
    ``native`` the same weights as its framework stores them (``layout``); ``dtype`` the
    narrowest floating-point format holding every value (how they were stored)."""

    source: str  # the file, or what the object given is
    name: str  # the module, Keras layer or node name
    path: str  # name, and the stacked layer where the module holds several
    case: Case
    layout: str
    canonical: Canonical = field(repr=False)
    native: dict[str, np.ndarray] = field(repr=False)
    dtype: str = "float32"
    adapter: str | None = None  # the adapter that runs it in its framework (None: none does)
    where: str = ""  # where it is in words (an ONNX node in a branch), "" where path says it
    onnx: Any = field(default=None, repr=False)  # an ONNX node: models.onnx_nodes.OnnxNode
    ir: Any = field(default=None, repr=False)  # an IR's op: frameworks.openvino_ir.IrOpRef
    # a stacked layer of a module read whole (torch ``num_layers=2``): its index there, and the
    # file's names of the tensors ``native`` names as a one-layer module's (``weight_hh_l0`` ->
    # ``weight_hh_l1``), so that what the doctor and the outputs say is in the file's terms
    index: int = 0
    file_names: dict[str, str] = field(default_factory=dict, repr=False)
    tflite: Any = field(default=None, repr=False)  # a .tflite op: readers.tflite.TfliteOp

    def in_file_terms(self, text: str) -> str:
        """``text`` about this layer alone (its tensors, "layer 0", ``y L0``) in the file's
        terms: the stacked layer's index and the file's tensor names."""
        if not self.index and not self.file_names:
            return text
        names = sorted(self.file_names, key=len, reverse=True)
        pattern = r"\b(?:" + "|".join(map(re.escape, names)) + r")\b" if names else None
        if pattern:
            text = re.sub(pattern, lambda m: self.file_names[m.group(0)], text)
        return re.sub(r"\b(layer |L)0\b", lambda m: f"{m.group(1)}{self.index}", text)

    @property
    def sizes(self) -> str:
        c = self.case
        return (f"{c.cell.upper()} I={c.input_size} H={c.hidden_size}"
                + (f" P={c.proj_size}" if c.proj_size else "") + f" {c.dir_mode}")


@dataclass(frozen=True)
class Unread:
    """A recurrent layer found but not compared: ``path`` where it is, ``problem`` why (an
    ONNX node whose weights depend on a graph input)."""

    source: str
    path: str
    problem: str


def layers_of(source: Any, role: str, max_bytes: int | None = None) -> list[Layer]:
    """The recurrent layers of ``source``: a file (.pt/.pth/.bin, .keras/.h5, .onnx, .msgpack),
    a torch ``nn.Module``, a Keras layer or model, or an ONNX ``ModelProto``, in model order.
    ``role`` (``original``, ``shipped``) names the layers' cases. A file with no recurrent
    layer that can be read (one whose weights depend on a graph input cannot), or one that
    cannot be read, raises :class:`WeightsError` naming it."""
    return read_layers(source, role, max_bytes)[0]


def read_layers(source: Any, role: str, max_bytes: int | None = None
                ) -> tuple[list[Layer], list[Unread]]:
    """:func:`layers_of`, and the layers found that cannot be compared (:class:`Unread`)."""
    from harness.memory import max_memory

    limit = max_memory() if max_bytes is None else max_bytes
    from harness.readers import tflite as _tflite  # a .tflite path or its bytes
    if _tflite.is_tflite(source):
        return [Layer(**fields) for fields in _tflite.read_tflite(source, role, limit)], []
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        check_file(path)
        check_size(path, path.stat().st_size, limit, "is")
        return _file_layers(path, str(path), role, limit)
    keras = keras_library(source)
    if keras is not None:
        return _keras_object_layers(source, keras, role), []
    with _object_file(source) as (path, label):
        return _file_layers(path, label, role, limit)


@contextlib.contextmanager
def _object_file(obj: Any) -> Iterator[tuple[Path, str]]:
    """A torch module's state_dict or an ONNX model saved as a user would save it, read back
    through the file's reader; errors name the object."""
    with tempfile.TemporaryDirectory(prefix="rnn-harness-") as folder:
        torch = sys.modules.get("torch")
        onnx = sys.modules.get("onnx")
        if torch is not None and isinstance(obj, torch.nn.Module):
            path, label = Path(folder) / "module.pt", f"the torch {type(obj).__name__} module"
            torch.save(obj.state_dict(), path)
        elif onnx is not None and isinstance(obj, onnx.ModelProto):
            path, label = Path(folder) / "model.onnx", "the ONNX model"
            onnx.save(obj, str(path))
        else:
            raise HarnessError(f"expected a model file, a torch nn.Module, a Keras layer or "
                               f"model or an ONNX ModelProto, got {type(obj).__name__}")
        try:
            yield path, label
        except HarnessError as exc:
            if exc.file is not None and Path(exc.file).is_relative_to(folder):
                exc.file = label
            raise


# Files ---------------------------------------------------------------------------------------

def _file_layers(path: Path, label: str, role: str, limit: int
                 ) -> tuple[list[Layer], list[Unread]]:
    from harness.readers import keras, onnx, torch

    suffix = path.suffix.lower()
    if suffix in torch.SUFFIXES:
        groups = [(prefix or "state_dict", prefix) for prefix in _torch_groups(path, limit)]
    elif suffix in keras.SUFFIXES:
        entries = one_line(path, lambda: keras._keras_layers(path, limit))
        keras3 = suffix == ".keras" or path.name.lower().endswith(".weights.h5")
        found = [layer for e in entries
                 for layer in _keras_entry_layers(e, path, label, role, keras3)]
        return _nonempty(found, path, label), []
    elif suffix in onnx.SUFFIXES:
        found, unread = _onnx_layers(path, label, role, limit)
        if not found and unread:
            raise WeightsError(f"no recurrent layer whose weights can be read: {unread[0].problem}"
                               + (f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""),
                               file=label)
        return _nonempty(found, path, label), unread
    elif suffix == ".xml":  # an OpenVINO IR, its .bin beside it
        return _nonempty(_ir_layers(path, label, role, limit), path, label), []
    elif suffix == ".msgpack":
        groups = [(path.stem.split(".")[0] or "params", None)]
    elif suffix == ".npz":
        raise WeightsError("an .npz holds bare tensors: compare reads a model file (.pt, "
                           ".keras, .h5, .onnx, .msgpack) or a framework object, whose layers "
                           "tell their sizes", file=label)
    else:
        raise WeightsError(f"unknown model file type {suffix!r} (expected .pt, .pth, .bin, "
                           ".keras, .h5, .onnx, .msgpack, .tflite or an OpenVINO IR .xml)",
                           file=label)
    found = [layer for name, select in groups
             for layer in _read_group(path, label, name, select, role, limit)]
    return _nonempty(found, path, label), []


def _onnx_layers(path: Path, label: str, role: str, limit: int
                ) -> tuple[list[Layer], list[Unread]]:
    """(layers, unread) of the ONNX model ``path``; errors name ``label``."""
    from harness.models.onnx_nodes import node_of
    from harness.readers import onnx as onnx_reader
    from harness.readers.onnx_layers import recurrent_layers

    found = one_line(path, lambda: recurrent_layers(path, limit))
    layers, unread = [], []
    data = path.read_bytes()
    for n in found:
        if n.problem is not None:
            unread.append(Unread(label, n.path, n.problem))
            continue
        try:
            fields = onnx_reader.fields_of(path, n)
            case = case_of(role, fields, label)
            native = onnx_reader.native_of(path, n, case)
            canonical = get_layout("onnx").from_native(native, case, file=label)
        except WeightsError as exc:
            if exc.file is not None and Path(exc.file) == path:
                exc.file = label
            raise
        node = node_of(n, native, data)
        layers.append(Layer(label, n.name, n.path, case, "onnx", canonical, native,
                            stored_dtype(native.values()), ADAPTER_OF_LAYOUT["onnx"],
                            where=n.where, onnx=node))
    return layers, unread


def _ir_layers(path: Path, label: str, role: str, limit: int) -> list[Layer]:
    """The layers of an OpenVINO IR: each sequence op in ONNX's layout, stored as the .bin's
    constants are (float16 where compressed)."""
    from harness.models.openvino_ir import ir_layers

    layers = []
    for r in ir_layers(path, label, limit):
        case = case_of(role, r.fields, label)
        canonical = get_layout("onnx").from_native(r.native, case, file=label)
        layers.append(Layer(label, r.name, r.name, case, "onnx", canonical, r.native,
                            stored_dtype(r.ref.weights.values()), None, where=r.where, ir=r.ref))
    return layers


def _nonempty(layers: list[Layer], path: Path, label: str) -> list[Layer]:
    if not layers:
        raise WeightsError("no recurrent layer (LSTM or GRU) in the file", file=label)
    return layers


def _torch_groups(path: Path, limit: int) -> list[str]:
    """The prefixes of the RNN modules in a ``torch.save`` state_dict (``encoder.rnn``; ``""``
    for a bare one). A file the torch reader refuses (legacy format, damaged, pickled code) is
    refused as it says."""
    from harness.readers import torch as torch_reader
    from harness.readers.dispatch import infer_fields

    with path.open("rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    if not zipped or not zipfile.is_zipfile(path):
        infer_fields(path)  # raises the reader's own one line
    check_zip(path, limit)

    def names() -> list[str]:
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
        found: list[str] = []

        def walk(o: object, prefix: str) -> None:
            if isinstance(o, dict):
                for k, v in o.items():
                    walk(v, f"{prefix}{k}.")
            elif isinstance(o, torch.Tensor):
                name = prefix[:-1]
                m = (torch_reader._TORCH_NAME.match(name)
                     or torch_reader._TORCH_CELL_NAME.match(name))
                if m and m["prefix"].rstrip(".") not in found:
                    found.append(m["prefix"].rstrip("."))

        walk(obj, "")
        return found

    try:
        return one_line(path, names)
    except WeightsError as exc:  # the reader's own words for a file torch cannot load
        infer_fields(path)
        raise exc from None


def _read_group(path: Path, label: str, name: str, select: str | None, role: str,
                limit: int) -> list[Layer]:
    """The layers of one module (a torch prefix, an ONNX node, a flax tree)."""
    from harness.readers.dispatch import infer_fields, read_native

    try:
        fields, layout, _ = infer_fields(path, select=select)
        full = case_of(role, fields, label)
        native, _ = read_native(path, layout, full, select=select, max_bytes=limit)
        canonical = get_layout(layout).from_native(native, full, file=str(path))
    except HarnessError as exc:
        if exc.file is not None and Path(exc.file) == path:
            exc.file = label
        raise
    return _split(label, name, full, layout, canonical, native, role)


def case_of(role: str, fields: dict, label: str) -> Case:
    try:
        return Case(name=role, **fields)
    except ValueError as exc:
        raise WeightsError(f"the sizes read make no case ({exc})".splitlines()[0],
                           file=label) from None


def _split(label: str, name: str, full: Case, layout: str, canonical: Canonical,
           native: dict[str, np.ndarray], role: str) -> list[Layer]:
    """One :class:`Layer` per stacked layer of a module read whole."""
    lay = get_layout(layout)
    out = []
    for k in range(full.num_layers):
        fields = full.model_dump(exclude={"source", "name"}, exclude_none=True)
        fields.update(num_layers=1, input_size=full.layer_input_size(k))
        case = Case(name=role, **fields)
        tensors = {key(0, d, n): canonical[key(k, d, n)]
                   for d in full.directions for n in _block_names(canonical, k, d)}
        one = Canonical(tensors)
        mine = native if full.num_layers == 1 else lay.to_native(one, case)
        path = name if full.num_layers == 1 else f"{name}/layer{k}"
        out.append(Layer(label, name, path, case, layout, one, mine,
                         stored_dtype(tensors.values()), ADAPTER_OF_LAYOUT.get(layout),
                         index=k, file_names=_file_names(mine, native) if k else {}))
    return out


def _file_names(mine: dict[str, np.ndarray], native: dict[str, np.ndarray]) -> dict[str, str]:
    """The file's name of each tensor of a stacked layer's one-layer reading: the file's tensor
    holding the same values (the layout's conversion copies them), the most alike by name
    where several do (two zero biases)."""
    import difflib

    names: dict[str, str] = {}
    for own, a in mine.items():
        same = [n for n, b in native.items() if n not in names.values()
                and np.shape(b) == np.shape(a) and np.array_equal(b, a)]
        if same:
            names[own] = max(same, key=lambda n: difflib.SequenceMatcher(None, own, n).ratio())
    return {own: n for own, n in names.items() if own != n}


def _block_names(canonical: Canonical, layer: int, direction: int) -> list[str]:
    return list(canonical.block(layer, direction))


def stored_dtype(arrays: Any) -> str:
    """The narrowest of float16, bfloat16, float32 that holds every value exactly (else
    float64): how the weights were stored, whatever they were read into."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    for fmt in STORED_FORMATS[:-1]:
        with np.errstate(over="ignore"):
            if all(np.array_equal(round_to(a, fmt), a) for a in arrays):
                return fmt
    return "float64"


# Keras ---------------------------------------------------------------------------------------

def _keras_entry_layers(entry: dict, path: Path | str, label: str, role: str,
                        keras3: bool) -> list[Layer]:
    """The layer of one Keras reader entry (a file's or a live model's layer)."""
    from harness.readers.keras import fields_of_layers, native_of_layers

    fields, layout, _ = fields_of_layers([entry], label, keras3=keras3, select=None)
    case = case_of(role, fields, label)
    native, _ = native_of_layers([entry], layout, case, select=None, path=label)
    canonical = get_layout(layout).from_native(native, case, file=label)
    adapter = "keras3" if keras3 else "keras"
    return [Layer(label, entry["name"], entry["name"], case, layout, canonical, native,
                  stored_dtype(native.values()), adapter if layout == "keras" else None)]


def _keras_object_layers(obj: Any, library: str, role: str) -> list[Layer]:
    label = f"Keras {type(obj).__name__} {getattr(obj, 'name', '')!r}"
    entries = keras_object_layers(obj)
    if any(not e["dirs"][0] for e in entries):
        raise HarnessError(f"{label}: a recurrent layer has no weights yet: call or build the "
                           "model first")
    found = [layer for e in entries
             for layer in _keras_entry_layers(e, label, label, role, library == "keras3")]
    if not found:
        raise WeightsError("no recurrent layer (LSTM or GRU) in the model", file=label)
    return found


# Choosing ------------------------------------------------------------------------------------

def select_layers(layers: list[Layer], select: str) -> list[Layer]:
    """The one layer ``select`` names (its path, or its name where that is one layer); []
    where it names none. A name shared by several layers is refused, listing them."""
    chosen = [la for la in layers if la.path == select]
    if not chosen:
        chosen = [la for la in layers if la.name == select]
    if len(chosen) > 1:
        raise HarnessError(f"{select!r} names {len(chosen)} layers of "
                           f"{chosen[0].source}: choose one of "
                           f"{', '.join(repr(la.path) for la in chosen)}", field="--select")
    return chosen


def shown(name: str) -> str:
    """A layer name as printed: control characters from a stranger's file made visible."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", name)
