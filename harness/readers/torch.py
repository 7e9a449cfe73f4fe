"""PyTorch files (``.pt`` / ``.pth`` / ``.bin``, layout ``torch``): a ``state_dict`` saved with
``torch.save``, loaded with ``torch.load(..., weights_only=True)`` (no code runs) once its zip
members are within the memory limit (a legacy, non-zip file is refused: its sizes cannot be
checked before torch allocates them). torch.load keeps a view a view (a tensor saved as its
storage, ``torch.zeros(1).expand(2**25, 4)`` in 3 KB): each tensor's logical shape is checked
against the case and the memory limit before it is converted. A model's state_dict prefixes
the RNN's names (``encoder.rnn.weight_ih_l0``); the prefix is found, or chosen with
``select``. An ``nn.LSTMCell``/``nn.GRUCell`` is read as one layer.
"""

from __future__ import annotations

import math
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np

from harness.errors import WeightsError, whole_sentences
from harness.readers.limits import check_size, check_zip
from harness.spec import Case

SUFFIXES = (".pt", ".pth", ".bin")


def read(path: Path, layout: str, case: Case, *, select: str | None, max_bytes: int | None
         ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The ``torch`` tensors of ``path`` (:func:`read_torch`), each checked against the shape
    the case gives it before it is converted; another layout is refused."""
    if layout != "torch":
        raise WeightsError(f"a PyTorch file holds `torch` tensors, not {layout!r}; use "
                           "--from torch", file=path)
    from harness.layouts import LAYOUTS

    torch_layout = LAYOUTS["torch"]
    expected = dict(torch_layout.shapes(case))
    expected.update({name: opt.shape for name, opt in torch_layout.optional(case).items()})
    return read_torch(path, select=select, max_bytes=max_bytes, expected=expected)


_TORCH_NAME = re.compile(r"^(?P<prefix>.*?)(?P<name>(weight|bias)_(ih|hh|hr)_l\d+(_reverse)?)$")
# nn.LSTMCell / nn.GRUCell: the tensors of one layer, without the _l0 suffix
_TORCH_CELL_NAME = re.compile(r"^(?P<prefix>(.*\.)?)(?P<name>(weight|bias)_(ih|hh))$")


def read_torch(path: Path, *, select: str | None = None, max_bytes: int | None = None,
               expected: dict[str, tuple[int, ...]] | None = None
               ) -> tuple[dict[str, np.ndarray], list[str]]:
    """An ``nn.LSTM``/``nn.GRU`` state_dict (maybe inside a model's) from a ``torch.save``
    file, as float64 arrays. Each tensor's logical shape is checked before it is converted:
    against ``expected`` (native name -> shape) where it names the tensor, and, as float64,
    against the memory limit ``max_bytes``."""
    import torch

    native, notes = _torch_tensors(path, select, max_bytes)
    total = 0
    for name, t in native.items():
        shape = tuple(t.shape)
        if expected is not None and name in expected and shape != tuple(expected[name]):
            raise WeightsError(f"expected shape {list(expected[name])}, got {list(shape)}",
                               file=path, field=name)
        # a view (torch.zeros(1).expand(2**25, 4)) is saved as its small storage: its
        # logical size, not the file's, is what converting it allocates
        total += math.prod(shape) * 8
        check_size(path, total, max_bytes, "its tensors would take, as float64 with views at "
                   "their full shape,", field=name)
    return {name: t.detach().to(torch.float64).numpy() for name, t in native.items()}, notes


def _torch_tensors(path: Path, select: str | None, max_bytes: int | None
                   ) -> tuple[dict[str, object], list[str]]:
    """The RNN module's tensors in a ``torch.save`` file as torch loaded them (views kept as
    views: nothing is copied or converted here), under their native names, and notes."""
    try:
        import torch
    except ImportError as exc:
        raise WeightsError(f"reading a PyTorch file needs torch ({exc})", file=path) from None
    with path.open("rb") as f:  # torch.load's own test: a zip's first local header
        zipped = f.read(4) == b"PK\x03\x04"
    if zipped and not zipfile.is_zipfile(path):
        raise WeightsError("a damaged torch.save file: it starts as a zip archive, but its "
                           "central directory cannot be read (the file is truncated or "
                           "corrupted)", file=path)
    if not zipped:
        raise WeightsError("cannot load a torch.save file in the legacy format (before torch 1.6, "
                           "or _use_new_zipfile_serialization=False; not a zip archive): its "
                           "tensors' sizes are declared inside its pickle, where they cannot be "
                           "checked against the memory limit before torch allocates them; "
                           "re-save it with torch.save (torch >= 1.6)", file=path)
    check_zip(path, max_bytes)
    try:
        with warnings.catch_warnings():  # a pickle protocol the weights_only loader reads
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses pickled code: say so in one line
        raise WeightsError(f"cannot load with torch.load(weights_only=True): "
                           f"{whole_sentences(str(exc))}", file=path) from None
    flat: dict[str, object] = {}

    def walk(o: object, prefix: str) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{prefix}{k}.")
        elif isinstance(o, torch.Tensor):
            flat[prefix[:-1]] = o

    walk(obj, "")
    groups: dict[str, dict[str, torch.Tensor]] = {}
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
        groups.setdefault(m["prefix"], {})[native] = t
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


def infer(path: Path, select: str | None, max_bytes: int | None) -> tuple[dict, str, list[str]]:
    """The case fields of an nn.LSTM/GRU (or cell) state_dict: cell and hidden size from
    ``weight_hh`` [G H, H] (``weight_hr`` [P, H] with a projection), input size from
    ``weight_ih_l0``, layers and directions from the names. PyTorch has sigmoid gates and
    reset-after GRUs only."""
    # shapes only: a tensor the sizes are read from is not converted (it may be a view)
    native, notes = _torch_tensors(path, select, max_bytes)
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

