"""Weights from the files people actually have, as native tensors of a layout.

- ``.npz``: the native weight-file contract (docs/cases.md, "Native weight files"), loaded
  without pickle.
- ``.pt`` / ``.pth`` / ``.bin`` (layout ``torch``): a PyTorch ``state_dict`` saved with
  ``torch.save``, loaded with ``torch.load(..., weights_only=True)`` (no code runs). A model's
  state_dict prefixes the RNN's names (``encoder.rnn.weight_ih_l0``); the prefix is found, or
  chosen with ``select``.
- ``.h5`` (tf_keras HDF5, ``model.save`` or ``save_weights``) and ``.keras`` (Keras 3 / tf_keras
  zip) (layouts ``keras``, ``keras-cudnn``): the recurrent layers' variables, read with h5py
  (no TensorFlow import). ``LSTM``/``GRU`` give ``keras`` tensors, ``CuDNNLSTM``/``CuDNNGRU``
  ``keras-cudnn`` ones; ``Bidirectional`` gives ``forward``/``backward``. Several recurrent
  layers are read as a stack, in model order (``select`` picks layers by name).
- ``.onnx`` (layout ``onnx``): the ``W``, ``R``, ``B``, ``P`` initializers of the model's LSTM/GRU
  nodes, checked against the case (a missing ``B`` or ``P`` is zeros, as the operator defines:
  the layout's optional tensors, applied by ``Layout.from_native``).
- ``.msgpack`` (layouts ``flax``, ``flax-nnx``): ``flax.serialization.to_bytes`` of a parameter
  tree, decoded here with ``msgpack.unpackb`` under limits and flax's array encoding read by
  :func:`read_flax_msgpack` itself (no flax import; ``flax.serialization.msgpack_restore`` has no
  size, entry or dtype limits).

The files may come from strangers. Nothing is read from outside the file: HDF5 external links,
external raw storage and virtual datasets, and ONNX external data, are refused. Sizes are
checked against the memory limit before anything is read: the file's, a zip's members once
inflated (``.keras``, ``torch.save``), an HDF5 file's datasets as declared. Whatever else a
malformed file makes a reader raise is one line naming the file.

Every reader returns ``(native, notes)``: the tensors under the layout's names, and lines worth
telling the user (what was read from where).
"""

from __future__ import annotations

import json
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from harness.cells import CELLS, cell_named, cell_with_gates
from harness.errors import WeightsError
from harness.npz import load_npz
from harness.params import DIRECTION_NAMES
from harness.spec import Case

RNN_CLASSES = {"LSTM": ("lstm", "keras"), "GRU": ("gru", "keras"),
               "CuDNNLSTM": ("lstm", "keras-cudnn"), "CuDNNGRU": ("gru", "keras-cudnn")}
KERAS_VARS = ("kernel", "recurrent_kernel", "bias")
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
KERAS_SUFFIXES = (".h5", ".hdf5", ".keras")
FLAX_SUFFIX = ".msgpack"
FLAX_LAYOUTS = ("flax", "flax-nnx")
T = TypeVar("T")


def read_native(path: str | Path, layout: str, case: Case, *, select: str | None = None,
                max_bytes: int | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """Native tensors of ``layout`` from ``path``, whatever its format (by suffix).

    ``max_bytes``: the memory limit; an .npz whose arrays would need more, or another file
    larger than it, is refused before it is read."""
    path = Path(path)
    suffix = path.suffix.lower()
    _check_file(path)
    if suffix == ".npz":
        return load_npz(path, what="weights", max_bytes=max_bytes), []
    _check_size(path, path.stat().st_size, max_bytes, "is")
    native, notes = _one_line(path, lambda: _read_framework_file(path, suffix, layout, case,
                                                                 select, max_bytes))
    for name, a in native.items():
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise WeightsError(f"expected floating-point values, got "
                               f"{getattr(a, 'dtype', type(a).__name__)}", file=path, field=name)
    return native, notes


def _check_file(path: Path) -> None:
    if not path.exists():
        raise WeightsError("weights file not found", file=path)
    if not path.is_file():  # a folder; a FIFO would block the first read forever
        raise WeightsError("not a regular file (a folder, FIFO, device or socket): refused",
                           file=path)


def _check_size(path: Path, size: int, max_bytes: int | None, what: str,
                field: str | None = None) -> None:
    """Refuse ``size`` bytes (a file's, a zip member's once inflated, an HDF5 dataset's as
    declared) over the memory limit, before anything is read."""
    if max_bytes is not None and size > max_bytes:
        raise WeightsError(f"{what} {size / 2**30:.3g} GiB, more than the memory limit of "
                           f"{max_bytes / 2**30:.3g} GiB", file=path, field=field)


def _one_line(path: Path, read: Callable[[], T]) -> T:
    """``read()``, with whatever a malformed file makes a framework's reader (or ours) raise
    turned into one line naming the file."""
    try:
        return read()
    except WeightsError:
        raise
    except Exception as exc:  # a malformed file the framework's own reader chokes on
        first = (str(exc).splitlines() or [""])[0][:200]
        raise WeightsError(f"not a readable {path.suffix.lower()} weights file "
                           f"({type(exc).__name__}: {first})", file=path) from None


def _check_zip(path: Path, max_bytes: int | None) -> None:
    """A zip (``torch.save``'s format) whose members would inflate past the memory limit is
    refused from its directory, before any member is read."""
    if not zipfile.is_zipfile(path):
        return
    with zipfile.ZipFile(path) as z:
        _check_size(path, sum(i.file_size for i in z.infolist()), max_bytes,
                    "inflates to")


def _read_framework_file(path: Path, suffix: str, layout: str, case: Case, select: str | None,
                         max_bytes: int | None) -> tuple[dict[str, np.ndarray], list[str]]:
    if suffix in TORCH_SUFFIXES:
        if layout != "torch":
            raise WeightsError(f"a PyTorch file holds `torch` tensors, not {layout!r}; use "
                               "--from torch", file=path)
        return read_torch(path, select=select, max_bytes=max_bytes)
    if suffix in KERAS_SUFFIXES:
        return read_keras(path, layout, case, select=select, max_bytes=max_bytes)
    if suffix == FLAX_SUFFIX:
        if layout not in FLAX_LAYOUTS:
            raise WeightsError(f"a flax .msgpack file holds `flax` or `flax-nnx` tensors, not "
                               f"{layout!r}; use --from flax", file=path)
        return read_flax_msgpack(path, max_bytes=max_bytes)
    if suffix == ".onnx":
        if layout != "onnx":
            raise WeightsError(f"an ONNX model holds `onnx` tensors, not {layout!r}; use "
                               "--from onnx", file=path)
        return read_onnx(path, case, select=select)
    raise WeightsError(f"unknown weights file type {suffix!r} (expected .npz, "
                       f"{', '.join(TORCH_SUFFIXES + KERAS_SUFFIXES)}, .onnx or .msgpack)",
                       file=path)


# PyTorch ---------------------------------------------------------------------------------------

_TORCH_NAME = re.compile(r"^(?P<prefix>.*?)(?P<name>(weight|bias)_(ih|hh|hr)_l\d+(_reverse)?)$")
# nn.LSTMCell / nn.GRUCell: the tensors of one layer, without the _l0 suffix
_TORCH_CELL_NAME = re.compile(r"^(?P<prefix>(.*\.)?)(?P<name>(weight|bias)_(ih|hh))$")


def read_torch(path: Path, *, select: str | None = None, max_bytes: int | None = None
               ) -> tuple[dict[str, np.ndarray], list[str]]:
    """An ``nn.LSTM``/``nn.GRU`` state_dict (maybe inside a model's) from a ``torch.save`` file."""
    try:
        import torch
    except ImportError as exc:
        raise WeightsError(f"reading a PyTorch file needs torch ({exc})", file=path) from None
    _check_zip(path, max_bytes)
    try:
        with warnings.catch_warnings():  # a pickle protocol the weights_only loader reads
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses pickled code: say so in one line
        raise WeightsError(f"cannot load with torch.load(weights_only=True): "
                           f"{str(exc).splitlines()[0][:300]}", file=path) from None
    flat: dict[str, object] = {}

    def walk(o: object, prefix: str) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{prefix}{k}.")
        elif isinstance(o, torch.Tensor):
            flat[prefix[:-1]] = o

    walk(obj, "")
    groups: dict[str, dict[str, np.ndarray]] = {}
    cells = set()
    for name, t in flat.items():
        m = _TORCH_NAME.match(name) or _TORCH_CELL_NAME.match(name)
        if not m:
            continue
        if t.layout != torch.strided:
            raise WeightsError(f"expected a dense tensor, got {t.layout}", file=path, field=name)
        if t.is_complex() or not t.is_floating_point():
            raise WeightsError(f"expected real floating-point values, got {t.dtype}", file=path,
                               field=name)
        native = m["name"] if "_l" in m["name"] else m["name"] + "_l0"  # a cell is one layer
        if native != m["name"]:
            cells.add(m["prefix"])
        groups.setdefault(m["prefix"], {})[native] = t.detach().to(torch.float64).numpy()
    if select is not None:
        prefix = select if select == "" or select.endswith(".") else select + "."
        if prefix not in groups:
            raise WeightsError(f"no RNN weights under {select!r}; found: "
                               f"{', '.join(repr(p.rstrip('.')) for p in groups) or 'none'}",
                               file=path)
        groups = {prefix: groups[prefix]}
    if not groups:
        raise WeightsError("no nn.LSTM/nn.GRU/nn.LSTMCell/nn.GRUCell tensors (weight_ih_l0, "
                           "weight_ih, ...) in the file", file=path)
    if len(groups) > 1:
        raise WeightsError("several RNN modules in the file: "
                           f"{', '.join(repr(p.rstrip('.')) for p in groups)}; choose one with "
                           "--select", file=path)
    prefix, native = next(iter(groups.items()))
    notes = [f"read {len(native)} tensors of the module {prefix.rstrip('.')!r}"] if prefix else []
    if prefix in cells:
        notes.append("an nn.LSTMCell/nn.GRUCell: read as one layer (weight_ih as weight_ih_l0, "
                     "...)")
    return native, notes


# Keras ---------------------------------------------------------------------------------------

def _snake(name: str) -> str:
    """Keras's ``to_snake_case``: how .keras files name layer groups (``CuDNNLSTM`` ->
    ``cu_dnnlstm``)."""
    s = re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", s).lower()


def _config_layers(config: dict) -> list[dict]:
    """Layer configs of a Sequential/Functional model config, nested models flattened."""
    out = []
    for layer in config.get("config", {}).get("layers", []) if isinstance(config, dict) else []:
        if layer.get("class_name") in ("Sequential", "Functional", "Model"):
            out += _config_layers(layer)
        else:
            out.append(layer)
    return out


def _rnn_info(layer: dict) -> tuple[str, dict] | None:
    """(class, LSTM/GRU config) of a recurrent layer config, or None."""
    cls = layer.get("class_name")
    if cls == "Bidirectional":
        inner = layer["config"]["layer"]
        if inner["class_name"] not in RNN_CLASSES:
            return None
        return inner["class_name"], inner["config"]
    return (cls, layer["config"]) if cls in RNN_CLASSES else None


def read_keras(path: Path, layout: str, case: Case, *, select: str | None = None,
               max_bytes: int | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """The recurrent layers of a Keras model or weights file (.h5 legacy, .keras zip)."""
    layers = _keras_layers(path, max_bytes)
    if select is not None:
        wanted = [s.strip() for s in select.split(",")]
        missing = [w for w in wanted if w not in {la["name"] for la in layers}]
        if missing:
            raise WeightsError(f"no recurrent layer named {', '.join(map(repr, missing))}; found: "
                               f"{', '.join(repr(la['name']) for la in layers)}", file=path)
        layers = [la for la in layers if la["name"] in wanted]
    layers = [la for la in layers if la["cell"] in (None, case.cell)] if select is None else layers
    if not layers:
        raise WeightsError(f"no {case.cell.upper()} layer (LSTM, GRU, CuDNNLSTM, CuDNNGRU, "
                           "Bidirectional) in the file", file=path)
    notes = []
    for la in layers:
        if la["layout"] is not None and la["layout"] != layout:
            raise WeightsError(
                f"layer {la['name']!r} is a {la['class']}: its weights are in layout "
                f"{la['layout']!r}, not {layout!r}" + (
                    " (CuDNN layers feed cuDNN C-order buffers, not Keras kernels: "
                    "docs/layouts.md, keras-cudnn)"
                    if "cudnn" in (la["layout"] + layout) else ""), file=path)
        if la["class"] == "GRU" and la.get("reset_after") is not None and \
                la["reset_after"] != case.reset_after:
            raise WeightsError(f"layer {la['name']!r} has reset_after={la['reset_after']}, the "
                               f"case says reset_after={case.reset_after}", file=path)
        notes.append(f"read {la['class'] or 'recurrent layer'} {la['name']!r}"
                     + (" (bidirectional)" if len(la["dirs"]) == 2 else ""))
    single = len(layers) == 1 and len(layers[0]["dirs"]) == 1
    native = {}
    for k, la in enumerate(layers):
        for d, tensors in la["dirs"].items():
            for name, arr in tensors.items():
                native[name if single else f"layer{k}/{DIRECTION_NAMES[d]}/{name}"] = arr
    return native, notes


def _layer_entry(name: str, cls: str | None, cfg: dict | None, dirs: dict) -> dict:
    cell, lay = RNN_CLASSES.get(cls, (None, None)) if cls else (None, None)
    return {"name": name, "class": cls, "cell": cell, "layout": lay, "dirs": dirs,
            "reset_after": (cfg or {}).get("reset_after") if cls == "GRU" else None,
            "config": cfg or {}}


def _keras_layers(path: Path, max_bytes: int | None) -> list[dict]:
    """The layers of a ``.keras`` zip or an HDF5 file (:func:`_read_keras_zip`,
    :func:`_read_keras_h5`)."""
    try:
        import h5py
    except ImportError as exc:
        raise WeightsError(f"reading a Keras file needs h5py ({exc})", file=path) from None
    if path.suffix.lower() == ".keras":
        return _read_keras_zip(path, h5py, max_bytes)
    return _read_keras_h5(path, h5py, max_bytes)


def _check_hdf5(f, path: Path, max_bytes: int | None) -> None:
    """Refuse, before any dataset is read, what would pull in bytes from outside the file or
    past the memory limit: external links (another HDF5 file), datasets with external raw
    storage (any file's bytes read as weights) or virtual datasets (mapped from other files),
    and datasets whose declared sizes add up to more than the limit (an unwritten chunked
    dataset reads as its fill value: a few KB on disk can declare gigabytes)."""
    import h5py

    # h5py's visitors stop at the first callback that returns something; raising inside one
    # breaks h5py's lock, so the callbacks return what is wrong and it is raised here
    def link(name: str) -> str | None:
        return name if isinstance(f.get(name, getlink=True), h5py.ExternalLink) else None

    name = f.visit_links(link)  # every link once; external ones are not followed
    if name is not None:
        raise WeightsError("is an external link to another HDF5 file: refused (weights are "
                           "read from this file only)", file=path, field=name)
    total = 0

    def dataset(name: str, obj) -> tuple[str, str] | None:
        nonlocal total
        if not isinstance(obj, h5py.Dataset):
            return None
        if obj.external:
            return name, ("has external raw storage (its bytes live in another file): refused "
                          "(weights are read from this file only)")
        if obj.is_virtual:
            return name, ("is a virtual dataset (mapped from other files): refused (weights are "
                          "read from this file only)")
        total += (obj.size or 0) * obj.dtype.itemsize  # size: None for an empty dataspace
        if max_bytes is not None and total > max_bytes:
            return name, ""
        return None

    found = f.visititems(dataset)  # every object once; soft and external links not followed
    if found is not None:
        name, why = found
        if why:
            raise WeightsError(why, file=path, field=name)
        _check_size(path, total, max_bytes, "declares datasets of", field=name)


def _read_keras_h5(path: Path, h5py, max_bytes: int | None) -> list[dict]:
    """Legacy HDF5 (``model.save('x.h5')`` / ``save_weights``): groups named by layer, each with
    a ``weight_names`` attribute (``lstm/lstm_cell/kernel:0``, ``.../forward_lstm/...``)."""
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise WeightsError(f"not a readable HDF5 file ({exc})", file=path) from None
    with f:
        _check_hdf5(f, path, max_bytes)
        root = f["model_weights"] if "model_weights" in f else f
        if "layer_names" not in root.attrs:
            if "layers" in f:  # a Keras 3 ``.weights.h5`` file
                return _keras3_layers(f, None, path)
            raise WeightsError("no layer_names attribute: not a Keras HDF5 weights file", file=path)
        config = None
        if "model_config" in f.attrs:
            raw = f.attrs["model_config"]
            config = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        classes = {}
        for la in _config_layers(config) if config else []:
            info = _rnn_info(la)
            if info:
                classes[la["config"]["name"]] = info
        layers = []
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in root.attrs["layer_names"]]
        for lname in names:
            g = root[lname]
            wnames = [n.decode() if isinstance(n, bytes) else str(n)
                      for n in g.attrs.get("weight_names", [])]
            ours = [w for w in wnames if w.rsplit("/", 1)[-1].split(":")[0] in KERAS_VARS]
            if len(ours) not in (3, 6) or len(ours) != len(wnames):
                continue
            dirs: dict[int, dict[str, np.ndarray]] = {}
            for w in ours:
                d = 1 if "/backward_" in w else 0
                dirs.setdefault(d, {})[w.rsplit("/", 1)[-1].split(":")[0]] = np.asarray(g[w])
            cls, cfg = classes.get(lname, (None, None))
            if cls is None:
                cls = _class_from_shapes(dirs[0], path, lname)
            layers.append(_layer_entry(lname, cls, cfg, dirs))
        return layers


def _class_from_shapes(tensors: dict[str, np.ndarray], path: Path, layer: str) -> str:
    """LSTM, GRU, CuDNNLSTM or CuDNNGRU of a layer saved without a model config, from its
    shapes, as tf_keras's HDF5 loader tells them apart: the recurrent kernel is [H, G H] (G = 4
    for an LSTM, 3 for a GRU); a CuDNN layer's bias holds both bias vectors, 2 G H (an LSTM's
    plain bias is 4H; a GRU's 3H, or [2, 3H] with reset_after). Names do not decide it: Keras
    2.x names plain and CuDNN layers' weights alike (``lstm_1/kernel:0``)."""
    rk, bias = tensors.get("recurrent_kernel"), tensors.get("bias")
    if rk is None or bias is None or rk.ndim != 2 or rk.shape[0] == 0:
        raise WeightsError("expected a 2-D recurrent_kernel and a bias", file=path, field=layer)
    H = rk.shape[0]
    gates = rk.shape[1] // H
    if gates not in (3, 4) or rk.shape[1] != gates * H:
        raise WeightsError(f"recurrent_kernel of shape {list(rk.shape)} is neither an LSTM's "
                           f"[H, 4H] nor a GRU's [H, 3H]", file=path, field=layer)
    cell = "LSTM" if gates == 4 else "GRU"
    if bias.shape == (2 * gates * H,):
        return "CuDNN" + cell
    if bias.shape in ((gates * H,), (2, gates * H)):
        return cell
    raise WeightsError(f"bias of shape {list(bias.shape)} fits neither a {cell} ({gates * H} or "
                       f"[2, {gates * H}]) nor a CuDNN{cell} ({2 * gates * H})", file=path,
                       field=layer)


def _read_keras_zip(path: Path, h5py, max_bytes: int | None) -> list[dict]:
    """A ``.keras`` zip: ``config.json`` plus ``model.weights.h5`` whose groups are named by class
    (``layers/lstm``, ``layers/lstm_1``, ``layers/bidirectional/forward_layer``) and whose
    variables are numbered in creation order (kernel, recurrent_kernel, bias)."""
    import io

    try:
        with zipfile.ZipFile(path) as z:
            # the members' sizes, from the zip's directory, before any is inflated (a zip bomb)
            members = [z.getinfo(n) for n in ("config.json", "model.weights.h5")]
            _check_size(path, sum(i.file_size for i in members), max_bytes, "inflates to")
            # a member reads at most its directory's file_size (zipfile stops there)
            config = json.loads(z.read(members[0]))
            weights = z.read(members[1])
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        raise WeightsError(f"not a readable .keras file ({type(exc).__name__}: {exc})",
                           file=path) from None
    with h5py.File(io.BytesIO(weights), "r") as f:
        _check_hdf5(f, path, max_bytes)
        return _keras3_layers(f, config, path)


def _keras3_layers(f, config: dict | None, path: Path) -> list[dict]:
    def vars_of(g) -> dict[str, np.ndarray]:
        v = g["cell/vars"] if "cell/vars" in g else g["vars"]
        return {name: np.asarray(v[str(i)]) for i, name in enumerate(KERAS_VARS)}

    layers = []
    if config is not None:
        counters: dict[str, int] = {}
        for la in _config_layers(config):
            base = _snake(la["class_name"])
            i = counters.get(base, 0)
            counters[base] = i + 1
            info = _rnn_info(la)
            if info is None:
                continue
            gname = f"layers/{base}" + (f"_{i}" if i else "")
            if gname not in f:
                raise WeightsError(f"no weights group {gname!r} for layer "
                                   f"{la['config']['name']!r}", file=path)
            g = f[gname]
            dirs = ({0: vars_of(g["forward_layer"]), 1: vars_of(g["backward_layer"])}
                    if "forward_layer" in g else {0: vars_of(g)})
            layers.append(_layer_entry(la["config"]["name"], info[0], info[1], dirs))
        return layers
    for gname in sorted(f["layers"]):  # no config: every group with cell variables
        g = f["layers"][gname]
        if "forward_layer" in g:
            layers.append(_layer_entry(gname, None, None, {0: vars_of(g["forward_layer"]),
                                                          1: vars_of(g["backward_layer"])}))
        elif "cell" in g:
            layers.append(_layer_entry(gname, None, None, {0: vars_of(g)}))
    return layers


# Flax ----------------------------------------------------------------------------------------

# flax.serialization's msgpack extension codes (flax/serialization.py _MsgpackExtType)
_EXT_NDARRAY, _EXT_COMPLEX, _EXT_NPSCALAR = 1, 2, 3
# what a flax parameter file may hold: float arrays only (bfloat16 comes back as float32, exact)
_FLAX_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64,
                "bfloat16": None}
_FLAX_MAX_DEPTH = 16  # layer/direction/gate/kind under a few module levels
_FLAX_MAX_ENTRIES = 100_000  # map keys and arrays in all


def _flax_array(data: bytes, path: Path) -> np.ndarray:
    """One ``_ndarray_to_bytes`` payload: msgpack (shape, dtype name, C-order bytes), the dtype
    checked against :data:`_FLAX_DTYPES` and the bytes against the shape before any view."""
    import msgpack

    try:
        shape, name, buffer = msgpack.unpackb(data, raw=True, max_array_len=64,
                                              max_map_len=0, max_str_len=64)
    except Exception as exc:
        raise WeightsError(f"a malformed array entry ({type(exc).__name__})", file=path) from None
    name = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
    if name not in _FLAX_DTYPES:
        raise WeightsError(f"an array of dtype {name!r}: only "
                           f"{', '.join(_FLAX_DTYPES)} are read", file=path)
    if (not isinstance(shape, list | tuple) or len(shape) > 8
            or not all(isinstance(n, int) and 0 <= n < 2**40 for n in shape)
            or not isinstance(buffer, bytes)):
        raise WeightsError("a malformed array entry (shape or data)", file=path)
    if name == "bfloat16":
        words = np.frombuffer(buffer, dtype="<u2") if len(buffer) % 2 == 0 else None
        if words is None or words.size != int(np.prod(shape, dtype=np.int64)):
            raise WeightsError(f"an array of shape {list(shape)} with {len(buffer)} bytes",
                               file=path)
        # bfloat16 is the top half of a float32: widen exactly
        return (words.astype("<u4") << 16).view("<f4").reshape(shape)
    dtype = np.dtype(_FLAX_DTYPES[name])
    if len(buffer) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise WeightsError(f"an array of shape {list(shape)} and dtype {name} with "
                           f"{len(buffer)} bytes", file=path)
    return np.frombuffer(buffer, dtype=dtype).reshape(shape).copy()


def read_flax_msgpack(path: Path, *, max_bytes: int | None = None
                      ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The float arrays of a ``flax.serialization.to_bytes`` file, flattened to ``a/b/c`` names.

    A leading ``params`` collection and ``cell`` levels (nn.RNN's) are dropped, so the tree of a
    harness file (``layer0/forward/ii/kernel``) and a model's ``{"params": ...}`` read alike; a
    bare cell tree (``ii/kernel``, ...) is read as ``layer0/forward``. flax's chunked arrays
    (``__msgpack_chunked_array__``) are joined. Anything but maps, float arrays and the chunk
    bookkeeping is refused, as are trees deeper than 16 levels or with more than 100000
    entries."""
    import msgpack

    data = path.read_bytes()
    _check_size(path, len(data), max_bytes, "is")

    def ext(code: int, payload: bytes) -> object:
        if code == _EXT_NDARRAY:
            return _flax_array(payload, path)
        kind = {_EXT_COMPLEX: "a complex number", _EXT_NPSCALAR: "a scalar"}.get(code, "unknown")
        raise WeightsError(f"a msgpack extension of type {code} ({kind}): only arrays are "
                           "read", file=path)

    try:
        tree = msgpack.unpackb(data, raw=False, ext_hook=ext, strict_map_key=False,
                               max_map_len=_FLAX_MAX_ENTRIES, max_array_len=_FLAX_MAX_ENTRIES,
                               max_str_len=1000, max_bin_len=len(data), max_ext_len=len(data))
    except WeightsError:
        raise
    except Exception as exc:
        raise WeightsError(f"not a flax .msgpack file ({type(exc).__name__}: "
                           f"{(str(exc).splitlines() or [''])[0][:200]})", file=path) from None
    if not isinstance(tree, dict):
        raise WeightsError(f"expected a map of parameters at the top, got {type(tree).__name__}",
                           file=path)
    flat: dict[str, np.ndarray] = {}
    stack: list[tuple[str, object, int]] = [("", tree, 0)]
    entries = 0
    while stack:
        where, node, depth = stack.pop()
        entries += 1
        if depth > _FLAX_MAX_DEPTH or entries > _FLAX_MAX_ENTRIES:
            raise WeightsError(f"a tree deeper than {_FLAX_MAX_DEPTH} levels or with more than "
                               f"{_FLAX_MAX_ENTRIES} entries: refused", file=path)
        if isinstance(node, dict) and node.get("__msgpack_chunked_array__") is True:
            node = _flax_unchunk(node, path, where)
        if isinstance(node, np.ndarray):
            flat[where] = node
        elif isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str) or not k or "/" in k:
                    raise WeightsError(f"a key {str(k)[:40]!r} that is not a plain name",
                                       file=path, field=where or None)
                stack.append((f"{where}/{k}" if where else k, v, depth + 1))
        else:
            raise WeightsError(f"holds a {type(node).__name__}, not an array or a map",
                               file=path, field=where or None)
    notes = []
    names = {}
    for name, arr in flat.items():
        parts = name.split("/")
        if parts[0] == "params" and all(n.startswith("params/") for n in flat):
            parts = parts[1:]
        parts = [p for p in parts if p != "cell"]
        names["/".join(parts)] = arr
    if names and not any(n.startswith("layer") for n in names):
        names = {f"layer0/forward/{n}": a for n, a in names.items()}
        notes.append("a single cell's tree: read as layer0/forward")
    notes.append(f"read {len(names)} arrays")
    return names, notes


def _flax_unchunk(node: dict, path: Path, where: str) -> np.ndarray:
    """flax's chunked array: ``shape`` and ``chunks`` as {"0": ..., "1": ...} maps."""
    try:
        shape = [node["shape"][str(i)] for i in range(len(node["shape"]))]
        chunks = [node["chunks"][str(i)] for i in range(len(node["chunks"]))]
        if not all(isinstance(c, np.ndarray) and c.ndim == 1 for c in chunks) or not all(
                isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError
        flat = np.concatenate(chunks) if chunks else np.zeros(0)
        return flat.reshape(shape)
    except (KeyError, TypeError, ValueError):
        raise WeightsError("a malformed chunked array", file=path, field=where or None) from None


# ONNX ----------------------------------------------------------------------------------------

def read_onnx(path: Path, case: Case, *, select: str | None = None
              ) -> tuple[dict[str, np.ndarray], list[str]]:
    """``W``, ``R``, ``B``, ``P`` of the model's LSTM/GRU nodes (graph order = layer order)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as exc:
        raise WeightsError(f"reading an ONNX model needs onnx ({exc})", file=path) from None
    model = _load_onnx(path)
    graph = model.graph
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:  # weights folded into Constant nodes
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(a.t)
    op = case.cell.upper()
    nodes = [n for n in graph.node if n.op_type == op]
    if select is not None:
        wanted = [s.strip() for s in select.split(",")]
        nodes = [n for n in nodes if n.name in wanted]
    if not nodes:
        raise WeightsError(f"no {op} node" + (f" named {select!r}" if select else "") +
                           " in the model", file=path)
    if len(nodes) != case.num_layers:
        raise WeightsError(f"the model has {len(nodes)} {op} node(s) ("
                           f"{', '.join(n.name or '?' for n in nodes)}), the case has "
                           f"{case.num_layers} layer(s); choose nodes with --select", file=path)
    native, notes = {}, []
    for k, node in enumerate(nodes):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        _check_onnx_attrs(path, node.name, attrs, case)
        name = (lambda n: n) if case.num_layers == 1 else (lambda n, k=k: f"layer{k}/{n}")
        inputs = list(node.input) + [""] * 8
        # Optional inputs left out take the operator's defaults (Layout.from_native: B and P
        # zeros); constant lengths or states are read so that from_native can check them.
        for idx, tname in ((1, "W"), (2, "R"), (3, "B"), (4, "sequence_lens"), (5, "initial_h"),
                           (6, "initial_c"), (7, "P")):
            src = inputs[idx]
            if not src:
                if tname in ("W", "R"):
                    raise WeightsError(f"node {node.name!r} has no {tname} input", file=path)
                if tname in ("B", "P") and (tname == "B" or case.peepholes):
                    notes.append(f"node {node.name!r} has no {tname}: zeros, as the operator "
                                 "defines")
                continue
            if src not in values:
                if tname in ("W", "R", "B", "P"):
                    raise WeightsError(f"node {node.name!r} input {tname} ({src!r}) is computed, "
                                       "not an initializer: export with constant folding",
                                       file=path)
                continue  # lengths and states fed at run time: the inputs file's business
            key = "sequence_lens" if tname == "sequence_lens" else name(tname)
            native[key] = np.asarray(values[src], dtype=np.float64)
        notes.append(f"read {op} node {node.name or k!r}")
    return native, notes


def _load_onnx(path: Path):
    """The model, without its external data: a tensor stored in another file (``location``
    may name any path) is refused, never read."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise WeightsError(f"not a readable ONNX model ({type(exc).__name__}: "
                           f"{(str(exc).splitlines() or [''])[0][:200]})", file=path) from None
    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node
                                               for a in n.attribute if a.HasField("t")]
    for t in tensors:
        if uses_external_data(t):
            raise WeightsError("stored as external data (in another file): refused (weights "
                               "are read from the model file only)", file=path, field=t.name)
    return model


def _check_onnx_attrs(path: Path, node: str, attrs: dict, case: Case) -> None:
    def say(attr: str, got: object, want: object) -> None:
        raise WeightsError(f"node {node!r} has {attr}={got!r}, the case says {want!r}", file=path)

    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction != case.dir_mode:
        say("direction", direction, case.dir_mode)
    if attrs.get("hidden_size", case.hidden_size) != case.hidden_size:
        say("hidden_size", attrs["hidden_size"], case.hidden_size)
    if attrs.get("layout", 0) != 0:
        say("layout", attrs["layout"], 0)
    if (case.cell_kind.reads("reset_after")
            and attrs.get("linear_before_reset", 0) != int(case.reset_after)):
        say("linear_before_reset", attrs.get("linear_before_reset", 0), int(case.reset_after))
    if (case.cell_kind.reads("input_forget")
            and attrs.get("input_forget", 0) != int(case.input_forget)):
        say("input_forget", attrs.get("input_forget", 0), int(case.input_forget))
    clip = attrs.get("clip")
    if (clip is None) != (case.gate_clip is None) or (clip is not None and
                                                      abs(clip - case.gate_clip) > 1e-6):
        say("clip", clip, case.gate_clip)


# What a file says about the case ---------------------------------------------------------------

def infer_case(path: str | Path, *, select: str | None = None
               ) -> tuple[Case, str, list[str]]:
    """The case a framework file describes, read from its tensors' names and shapes and, where
    the file keeps them, its attributes or config: ``(case, layout, notes)``.

    - ``.pt``/``.pth``/``.bin``: an nn.LSTM/GRU (or cell) state_dict: cell and hidden size from
      ``weight_hh`` [G H, H] (``weight_hr`` [P, H] with a projection), input size from
      ``weight_ih_l0``, layers and directions from the names. PyTorch has sigmoid gates and
      reset-after GRUs only.
    - ``.onnx``: the LSTM/GRU nodes' attributes (hidden_size, direction, clip, input_forget,
      linear_before_reset, HardSigmoid activations) and ``W``/``P`` inputs.
    - ``.h5``/``.keras`` (``.weights.h5``): the recurrent layers' shapes, and their config where
      the file has one (recurrent_activation, reset_after, go_backwards).
    - ``.msgpack``: a flax tree's names and shapes (:func:`_infer_flax`)."""
    path = Path(path)
    _check_file(path)
    suffix = path.suffix.lower()
    infer = {**dict.fromkeys(TORCH_SUFFIXES, _infer_torch), ".onnx": _infer_onnx,
             FLAX_SUFFIX: _infer_flax,
             **dict.fromkeys(KERAS_SUFFIXES, _infer_keras)}.get(suffix)
    if infer is None:
        raise WeightsError(f"sizes cannot be read from a {suffix} file: give --case (an .npz "
                           "holds bare tensors)", file=path)
    from harness.memory import max_memory

    limit = max_memory()
    _check_size(path, path.stat().st_size, limit, "is")
    fields, layout, notes = _one_line(path, lambda: infer(path, select, limit))
    name = re.sub(r"[^A-Za-z0-9_.=+-]", "-", path.name.split(".")[0]) or "weights"
    try:
        case = Case(name=name if name[0].isalnum() else "w" + name, **fields)
    except ValueError as exc:
        raise WeightsError(f"the sizes read from the file make no case ({exc})".splitlines()[0],
                           file=path) from None
    notes.append("read from the file: " + ", ".join(f"{k}={v}" for k, v in fields.items()))
    return case, layout, notes


def _infer_torch(path: Path, select: str | None, max_bytes: int | None
                 ) -> tuple[dict, str, list[str]]:
    native, notes = read_torch(path, select=select, max_bytes=max_bytes)
    hh = native.get("weight_hh_l0")
    ih = native.get("weight_ih_l0")
    if hh is None or ih is None:
        raise WeightsError("no weight_ih_l0 / weight_hh_l0: cannot tell the sizes", file=path)
    for name in ("weight_ih_l0", "weight_hh_l0", "weight_hr_l0"):
        t = native.get(name)
        if t is not None and (t.ndim != 2 or 0 in t.shape):
            raise WeightsError(f"expected a matrix with rows and columns, got shape "
                               f"{list(t.shape)}: cannot tell the sizes", file=path, field=name)
    hr = native.get("weight_hr_l0")
    H = hr.shape[1] if hr is not None else hh.shape[1]
    gates = hh.shape[0] // H
    if gates not in (3, 4) or hh.shape[0] != gates * H:
        raise WeightsError(f"weight_hh_l0 of shape {list(hh.shape)} is neither an LSTM's [4H, H] "
                           "nor a GRU's [3H, H]", file=path, field="weight_hh_l0")
    layers = 1 + max(int(m.group(1)) for m in map(re.compile(r".*_l(\d+)").match, native) if m)
    fields = {"cell": "lstm" if gates == 4 else "gru", "input_size": int(ih.shape[1]),
              "hidden_size": int(H), "num_layers": layers,
              "bidirectional": any(k.endswith("_reverse") for k in native)}
    if hr is not None:
        fields["proj_size"] = int(hr.shape[0])
    return fields, "torch", notes


def _infer_onnx(path: Path, select: str | None, max_bytes: int | None
                ) -> tuple[dict, str, list[str]]:
    import onnx
    from onnx import numpy_helper

    model = _load_onnx(path)
    values = {t.name: t for t in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type in ("LSTM", "GRU")]
    if select is not None:
        wanted = [s.strip() for s in select.split(",")]
        nodes = [n for n in nodes if n.name in wanted]
    if not nodes:
        raise WeightsError("no LSTM or GRU node in the model", file=path)
    ops = {n.op_type for n in nodes}
    if len(ops) > 1:
        raise WeightsError("the model has both LSTM and GRU nodes; choose with --select",
                           file=path)
    first = nodes[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in first.attribute}
    cell = first.op_type.lower()
    if "hidden_size" not in attrs:
        raise WeightsError(f"node {first.name!r} has no hidden_size attribute: cannot tell the "
                           "sizes", file=path)
    W = first.input[1] if len(first.input) > 2 else ""
    if not W or not first.input[2]:
        raise WeightsError(f"node {first.name!r} has no W and R inputs: cannot tell the sizes",
                           file=path)
    if W not in values:
        raise WeightsError(f"node {first.name!r} input W is computed, not an initializer",
                           file=path)
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    fields: dict = {"cell": cell, "input_size": int(numpy_helper.to_array(values[W]).shape[2]),
                    "hidden_size": int(attrs["hidden_size"]), "num_layers": len(nodes),
                    "direction": direction}
    if attrs.get("clip") is not None:
        fields["gate_clip"] = float(attrs["clip"])
    if cell_named(cell).reads("input_forget"):
        fields["input_forget"] = bool(attrs.get("input_forget", 0))
        fields["peepholes"] = len(first.input) > 7 and bool(first.input[7])
    else:
        fields["reset_after"] = bool(attrs.get("linear_before_reset", 0))
    acts = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
    if acts:
        if any(a not in ("Sigmoid", "Tanh", "HardSigmoid") for a in acts) or acts[1] != "Tanh":
            raise WeightsError(f"node {first.name!r} has activations {acts}: the harness knows "
                               "Sigmoid/HardSigmoid gates with Tanh", file=path)
        if acts[0] == "HardSigmoid":
            alpha = (attrs.get("activation_alpha") or [0.2])[0]
            fields["recurrent_activation"] = ("hard_sigmoid_tf_keras" if abs(alpha - 0.2) < 1e-6
                                              else "hard_sigmoid_keras3")
    return fields, "onnx", []


def _infer_flax(path: Path, select: str | None, max_bytes: int | None
                ) -> tuple[dict, str, list[str]]:
    """Sizes from a flax tree: the cell from its gate names (``ii``: LSTM, ``ir``: GRU, flax's
    only GRU being reset-after; ``dense_i``: the nnx tree, 4H or 3H columns), ``H`` from a
    recurrent kernel [H, .], the input size from layer 0's input kernel, layers and directions
    from the names."""
    native, notes = read_flax_msgpack(path, max_bytes=max_bytes)

    def get(name: str) -> np.ndarray:
        t = native.get(f"layer0/forward/{name}")
        if t is None or t.ndim != 2 or 0 in t.shape:
            raise WeightsError(f"no matrix layer0/forward/{name}: cannot tell the sizes",
                               file=path)
        return t

    names = {n.split("/")[2] for n in native if n.count("/") == 3}
    if "dense_i" in names:
        layout, H = "flax-nnx", get("dense_h/kernel").shape[0]
        gates = get("dense_i/kernel").shape[1] // H
        kind = cell_with_gates(gates)
        cell = kind.name if kind else None
        I = get("dense_i/kernel").shape[0]
    else:
        layout = "flax"
        # linen names each gate's dense layers i<gate> and h<gate>: the first gate tells
        kind = next((c for c in CELLS.values() if f"i{c.gates[0]}" in names), None)
        cell = kind.name if kind else None
        H = get(f"h{kind.gates[0]}/kernel").shape[0] if kind else 0
        I = get(f"i{kind.gates[0]}/kernel").shape[0] if kind else 0
    if cell is None:
        raise WeightsError("neither an LSTM (ii, hi, ...) nor a GRU (ir, hr, ...) tree",
                           file=path)
    layers = 1 + max(int(m.group(1)) for m in map(re.compile(r"layer(\d+)/").match, native)
                     if m)
    fields = {"cell": cell, "input_size": int(I), "hidden_size": int(H), "num_layers": layers,
              "bidirectional": any("/backward/" in n for n in native)}
    return fields, layout, notes


def _infer_keras(path: Path, select: str | None, max_bytes: int | None
                 ) -> tuple[dict, str, list[str]]:
    keras3 = path.suffix.lower() == ".keras" or path.name.lower().endswith(".weights.h5")
    layers = _keras_layers(path, max_bytes)
    if select is not None:
        wanted = [s.strip() for s in select.split(",")]
        layers = [la for la in layers if la["name"] in wanted]
    if not layers:
        raise WeightsError("no recurrent layer (LSTM, GRU, CuDNNLSTM, CuDNNGRU, Bidirectional) "
                           "in the file", file=path)
    first = layers[0]
    t = first["dirs"][0]
    cls = first["class"] or _class_from_shapes(t, path, first["name"])
    cell, layout = RNN_CLASSES[cls]
    H = t["recurrent_kernel"].shape[0]
    fields: dict = {"cell": cell, "input_size": int(t["kernel"].shape[0]), "hidden_size": int(H),
                    "num_layers": len(layers)}
    cfg = first["config"]
    if len(first["dirs"]) == 2:
        fields["direction"] = "bidirectional"
    elif cfg.get("go_backwards"):
        fields["direction"] = "reverse"
    if cell_named(cell).reads("reset_after") and layout == "keras":
        fields["reset_after"] = t["bias"].ndim == 2
    act = cfg.get("recurrent_activation", "sigmoid")
    if act == "hard_sigmoid":
        fields["recurrent_activation"] = "hard_sigmoid_keras3" if keras3 else \
            "hard_sigmoid_tf_keras"
    elif act != "sigmoid":
        raise WeightsError(f"layer {first['name']!r} has recurrent_activation={act!r}: the "
                           "harness knows sigmoid and hard_sigmoid", file=path)
    notes = [] if cfg else ["no layer config in the file: sigmoid gates assumed"]
    return fields, layout, notes
