"""Keras files (layouts ``keras``, ``keras-cudnn``): ``.h5`` (tf_keras HDF5, ``model.save`` or
``save_weights``; Keras 3 ``.weights.h5``) and ``.keras`` (Keras 3 / tf_keras zip). The recurrent
layers' variables are read with h5py (no TensorFlow import). ``LSTM``/``GRU`` give ``keras``
tensors, ``CuDNNLSTM``/``CuDNNGRU`` ``keras-cudnn`` ones; ``Bidirectional`` gives
``forward``/``backward``. Several recurrent layers are read as a stack, in model order
(``select`` picks layers by name).

Nothing is read from outside the file: HDF5 external links, external raw storage and virtual
datasets are refused, and the datasets' declared sizes (a ``.keras`` zip's members once
inflated) are checked against the memory limit before any is read (:func:`_check_hdf5`).
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from harness.cells import cell_named
from harness.errors import WeightsError
from harness.layouts.keras import CELL_VARIABLES
from harness.params import DIRECTION_NAMES
from harness.readers.limits import check_size
from harness.spec import Case

SUFFIXES = (".h5", ".hdf5", ".keras")
# Keras layer class -> (cell, the layout its variables are in)
RNN_CLASSES = {"LSTM": ("lstm", "keras"), "GRU": ("gru", "keras"),
               "CuDNNLSTM": ("lstm", "keras-cudnn"), "CuDNNGRU": ("gru", "keras-cudnn")}


def read(path: Path, layout: str, case: Case, *, select: str | None, max_bytes: int | None
         ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The recurrent layers' tensors (:func:`read_keras`); a layer of another layout is
    refused there, by name."""
    return read_keras(path, layout, case, select=select, max_bytes=max_bytes)


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
    return native_of_layers(_keras_layers(path, max_bytes), layout, case, select=select,
                            path=path)


def native_of_layers(layers: list[dict], layout: str, case: Case, *, select: str | None,
                     path: Path | str) -> tuple[dict[str, np.ndarray], list[str]]:
    """The native tensors of ``layers`` (entries of :func:`layer_entry`, as a file's are read,
    or taken from a live model); ``path`` names where they came from in messages."""
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


def layer_entry(name: str, cls: str | None, cfg: dict | None, dirs: dict) -> dict:
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
        check_size(path, total, max_bytes, "declares datasets of", field=name)


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
            ours = [w for w in wnames if w.rsplit("/", 1)[-1].split(":")[0] in CELL_VARIABLES]
            if len(ours) not in (3, 6) or len(ours) != len(wnames):
                continue
            dirs: dict[int, dict[str, np.ndarray]] = {}
            for w in ours:
                d = 1 if "/backward_" in w else 0
                dirs.setdefault(d, {})[w.rsplit("/", 1)[-1].split(":")[0]] = np.asarray(g[w])
            cls, cfg = classes.get(lname, (None, None))
            if cls is None:
                cls = _class_from_shapes(dirs[0], path, lname)
            layers.append(layer_entry(lname, cls, cfg, dirs))
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
            check_size(path, sum(i.file_size for i in members), max_bytes, "inflates to")
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
        return {name: np.asarray(v[str(i)]) for i, name in enumerate(CELL_VARIABLES)}

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
            layers.append(layer_entry(la["config"]["name"], info[0], info[1], dirs))
        return layers
    for gname in sorted(f["layers"]):  # no config: every group with cell variables
        g = f["layers"][gname]
        if "forward_layer" in g:
            layers.append(layer_entry(gname, None, None, {0: vars_of(g["forward_layer"]),
                                                          1: vars_of(g["backward_layer"])}))
        elif "cell" in g:
            layers.append(layer_entry(gname, None, None, {0: vars_of(g)}))
    return layers



def infer(path: Path, select: str | None, max_bytes: int | None) -> tuple[dict, str, list[str]]:
    """The case fields of the first recurrent layer (the stack's depth from their number): the
    sizes from its shapes, and from its config where the file has one recurrent_activation,
    reset_after and go_backwards (``hard_sigmoid`` is Keras 3's in a ``.keras`` or
    ``.weights.h5`` file, else tf_keras's)."""
    keras3 = path.suffix.lower() == ".keras" or path.name.lower().endswith(".weights.h5")
    return fields_of_layers(_keras_layers(path, max_bytes), path, keras3=keras3, select=select)


def fields_of_layers(layers: list[dict], path: Path | str, *, keras3: bool, select: str | None
                     ) -> tuple[dict, str, list[str]]:
    """:func:`infer` on ``layers`` (entries of :func:`layer_entry`); ``keras3``: whether
    ``hard_sigmoid`` is Keras 3's."""
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


# A Keras layer or model in memory (the API's and compare's objects), read as a file is


def keras_library(obj: Any) -> str | None:
    """``keras3`` or ``tf_keras`` for a layer (or model) of that library, else None."""
    for module, library in (("keras", "keras3"), ("tf_keras", "tf_keras")):
        k = sys.modules.get(module)
        layers = getattr(k, "layers", None)
        if layers is not None and isinstance(obj, layers.Layer):
            if module == "keras" and not k.__version__.startswith("3"):
                return "tf_keras"  # keras 2 is tf_keras under its old name
            return library
    return None


def keras_object_layers(obj: Any) -> list[dict]:
    """The recurrent layers of a Keras layer or model, as the Keras reader lists a file's
    (:func:`layer_entry`): class, config and each direction's cell variables, nested models
    flattened, in model order."""
    def variables(rnn: Any) -> dict[str, np.ndarray]:
        # tf_keras names a variable lstm/lstm_cell/kernel:0, Keras 3 kernel
        return {v.name.split("/")[-1].split(":")[0]: np.asarray(v.numpy()) for v in rnn.weights}

    found: list[dict] = []

    def visit(layer: Any) -> None:
        cls = type(layer).__name__
        if cls == "Bidirectional":
            inner = layer.forward_layer
            if type(inner).__name__ in RNN_CLASSES:
                found.append(layer_entry(layer.name, type(inner).__name__, inner.get_config(),
                                         {0: variables(inner), 1: variables(layer.backward_layer)}))
        elif cls in RNN_CLASSES:
            found.append(layer_entry(layer.name, cls, layer.get_config(), {0: variables(layer)}))
        else:
            for sub in getattr(layer, "layers", ()):
                visit(sub)

    visit(obj)
    return found
