"""Which reader reads a file: by its suffix, one format module per kind of file.

A format module (:mod:`.torch`, :mod:`.keras`, :mod:`.onnx`, :mod:`.flax`) declares its
``SUFFIXES``, ``read(path, layout, case, *, select, max_bytes)`` (the native tensors of
``layout``, refusing a layout the format does not hold) and ``infer(path, select, max_bytes)``
(the case fields the file tells, its layout and notes). ``.npz`` is the harness's own contract
(:func:`harness.npz.load_npz`) and holds bare tensors, so sizes are never inferred from it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.errors import WeightsError
from harness.layouts import LAYOUTS
from harness.npz import load_npz
from harness.readers import flax, keras, onnx, torch
from harness.readers.limits import check_file, check_size, one_line
from harness.spec import Case

FORMATS = (torch, keras, onnx, flax)
BY_SUFFIX = {suffix: fmt for fmt in FORMATS for suffix in fmt.SUFFIXES}


def read_native(path: str | Path, layout: str, case: Case, *, select: str | None = None,
                max_bytes: int | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """Native tensors of ``layout`` from ``path``, whatever its format (by suffix).

    ``max_bytes``: the memory limit; an .npz whose arrays would need more, or another file
    larger than it, is refused before it is read."""
    path = Path(path)
    suffix = path.suffix.lower()
    check_file(path)
    if suffix == ".npz":
        return npz_group(load_npz(path, what="weights", max_bytes=max_bytes), select, path), []
    check_size(path, path.stat().st_size, max_bytes, "is")
    native, notes = one_line(path, lambda: _read_framework_file(path, suffix, layout, case,
                                                                select, max_bytes))
    for name, a in native.items():
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise WeightsError(f"expected floating-point values, got "
                               f"{getattr(a, 'dtype', type(a).__name__)}", file=path, field=name)
    return native, notes


def npz_group(arrays: dict[str, np.ndarray], select: str | None, path: Path
              ) -> dict[str, np.ndarray]:
    """The tensors of an .npz under ``select``, a group of its names (``encoder`` holds
    ``encoder/kernel`` or ``encoder.weight_ih_l0``), named without it; all of them where there
    is no select. A select that names no group is refused, naming it and the groups there are:
    read whole, the file would silently give other tensors than the ones chosen."""
    if not select:
        return arrays
    prefixes = (select,) if select.endswith(("/", ".")) else (select + "/", select + ".")
    group = {name[len(p):]: a for name, a in arrays.items() for p in prefixes
             if name.startswith(p) and len(name) > len(p)}
    if not group:
        groups = sorted({re.split(r"[/.]", name, maxsplit=1)[0] for name in arrays
                         if re.search(r"[/.]", name)})
        shown = ", ".join(repr(g) for g in groups[:10]) + (" ..." if len(groups) > 10 else "")
        raise WeightsError(f"select {select!r} names no group of the file's tensors (no name "
                           f"starts with {' or '.join(repr(p) for p in prefixes)}); its groups: "
                           f"{shown or 'none'}", file=path)
    return group


def _read_framework_file(path: Path, suffix: str, layout: str, case: Case, select: str | None,
                         max_bytes: int | None) -> tuple[dict[str, np.ndarray], list[str]]:
    fmt = BY_SUFFIX.get(suffix)
    if fmt is None:
        raise WeightsError(f"unknown weights file type {suffix!r} (expected .npz, "
                           f"{', '.join(torch.SUFFIXES + keras.SUFFIXES)}, .onnx or .msgpack)",
                           file=path)
    return fmt.read(path, layout, case, select=select, max_bytes=max_bytes)


def infer_case(path: str | Path, *, select: str | None = None
               ) -> tuple[Case, str, list[str]]:
    """The case a framework file describes, read from its tensors' names and shapes and, where
    the file keeps them, its attributes or config: ``(case, layout, notes)``.

    - ``.pt``/``.pth``/``.bin``: an nn.LSTM/GRU (or cell) state_dict (:func:`.torch.infer`).
    - ``.onnx``: the LSTM/GRU nodes' attributes and ``W``/``P`` inputs (:func:`.onnx.infer`).
    - ``.h5``/``.keras`` (``.weights.h5``): the recurrent layers' shapes, and their config where
      the file has one (:func:`.keras.infer`).
    - ``.msgpack``: a flax tree's names and shapes (:func:`.flax.infer`)."""
    path = Path(path)
    fields, layout, notes = infer_fields(path, select=select)
    name = re.sub(r"[^A-Za-z0-9_.=+-]", "-", path.name.split(".")[0]) or "weights"
    try:
        case = Case(name=name if name[0].isalnum() else "w" + name, **fields)
    except ValueError as exc:
        raise WeightsError(f"the sizes read from the file make no case ({exc})".splitlines()[0],
                           file=path) from None
    notes.append("read from the file: " + ", ".join(f"{k}={v}" for k, v in fields.items()))
    return case, layout, notes


def infer_fields(path: str | Path, *, select: str | None = None
                 ) -> tuple[dict, str, list[str]]:
    """What a framework file tells about its case (the format's ``infer``): ``(fields, layout,
    notes)``, under the memory limit. An .npz holds bare tensors: refused."""
    path = Path(path)
    check_file(path)
    suffix = path.suffix.lower()
    fmt = BY_SUFFIX.get(suffix)
    if fmt is None:
        raise WeightsError(f"sizes cannot be read from a {suffix} file: give --case (an .npz "
                           "holds bare tensors)", file=path)
    from harness.memory import max_memory

    limit = max_memory()
    check_size(path, path.stat().st_size, limit, "is")
    return one_line(path, lambda: fmt.infer(path, select, limit))


def fitting_layouts(native: dict[str, np.ndarray], case: Case) -> list[str]:
    """Registered layouts whose tensor names and shapes are exactly those of ``native``."""
    have = {k: tuple(np.shape(v)) for k, v in native.items()}
    out = []
    for name, layout in LAYOUTS.items():
        if case.cell in layout.cells:
            try:
                if layout.shapes(case) == have:
                    out.append(name)
            except (AssertionError, KeyError, ValueError):
                continue
    return out


def read_case_weights(path: str | Path, case: Case, *, layout: str | None = None,
                      select: str | None = None, max_bytes: int | None = None
                      ) -> tuple[str, dict[str, np.ndarray], list[str]]:
    """A case's weights file (``weights: {file: ...}``): ``(layout, native tensors, notes)``.

    The layout is ``layout`` where the case names one, else the one the file makes unambiguous:
    a framework file's own (a .pt holds ``torch`` tensors; a Keras file's layer classes tell
    ``keras`` from ``keras-cudnn``; a flax tree's names ``flax`` from ``flax-nnx``), or for an
    .npz the one registered layout whose names and shapes its tensors are exactly. What a
    framework file tells about the case (its sizes, directions, GRU variant, activations:
    the format's ``infer``) is checked against the case, field by field."""
    path = Path(path)
    if path.is_dir():
        raise WeightsError("weights file is a folder, expected a file", file=path)
    suffix = path.suffix.lower()
    if suffix == ".npz":  # load_npz refuses what is not a regular file itself
        native = npz_group(load_npz(path, what="weights", max_bytes=max_bytes), select, path)
        notes = [f"read the {len(native)} tensors under {select!r}"] if select else []
        if layout is None:
            fits = fitting_layouts(native, case)
            if len(fits) != 1:
                found = (f"fit layouts {', '.join(fits)}" if fits else
                         "fit no layout's names and shapes for this case")
                raise WeightsError(f"its tensors {found}: give weights.layout", file=path,
                                   field="weights.layout")
            layout = fits[0]
            notes = [*notes, f"layout {layout!r}: the only one the tensors fit"]
        return layout, native, notes
    check_file(path)
    fmt = BY_SUFFIX.get(suffix)
    if fmt is None:
        raise WeightsError(f"unknown weights file type {suffix!r} (expected .npz, "
                           f"{', '.join(torch.SUFFIXES + keras.SUFFIXES)}, .onnx or .msgpack)",
                           file=path)
    check_size(path, path.stat().st_size, max_bytes, "is")
    found = one_line(path, lambda: fmt.infer(path, select, max_bytes))
    return checked_read(path, case, layout, found, lambda inferred: read_native(
        path, inferred, case, select=select, max_bytes=max_bytes))


def checked_read(path: str | Path, case: Case, layout: str | None,
                 found: tuple[dict, str, list[str]],
                 read: Callable[[str], tuple[dict[str, np.ndarray], list[str]]]
                 ) -> tuple[str, dict[str, np.ndarray], list[str]]:
    """What a model file's reader ``found`` (its fields, its layout, notes) checked against the
    case and the ``layout`` the case gives, then its tensors ``read`` in that layout:
    ``(layout, native tensors, notes)``."""
    fields, inferred, notes = found
    check_fields(path, fields, case)
    if layout is not None and layout != inferred:
        raise WeightsError(f"the file holds {inferred!r} tensors, not {layout!r} (leave "
                           "weights.layout out: the file tells it)", file=path,
                           field="weights.layout")
    native, more = read(inferred)
    return inferred, native, notes + more


def check_fields(path: str | Path, fields: dict, case: Case) -> None:
    """Refuse a file whose case fields (a format's ``infer``) differ from the case's, naming
    the first that differs. ``bidirectional`` (the file has a reverse direction) is not judged
    for a reverse case: a file holding its one reverse direction says true there."""
    for key, value in fields.items():
        if key == "bidirectional":
            if case.dir_mode == "reverse":
                continue
            have: object = case.num_directions == 2
        elif key == "direction":
            have = case.dir_mode
        else:
            have = getattr(case, key)
        same = (math.isclose(have, value, rel_tol=1e-6)
                if isinstance(value, float) and isinstance(have, float) else have == value)
        if not same:
            def shown(v: object) -> str:
                return str(v).lower() if isinstance(v, bool) or v is None else str(v)

            raise WeightsError(f"the file holds {shown(value)}, the case says {shown(have)}",
                               file=path, field=key)
