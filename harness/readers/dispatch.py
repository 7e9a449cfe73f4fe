"""Which reader reads a file: by its suffix, one format module per kind of file.

A format module (:mod:`.torch`, :mod:`.keras`, :mod:`.onnx`, :mod:`.flax`) declares its
``SUFFIXES``, ``read(path, layout, case, *, select, max_bytes)`` (the native tensors of
``layout``, refusing a layout the format does not hold) and ``infer(path, select, max_bytes)``
(the case fields the file tells, its layout and notes). ``.npz`` is the harness's own contract
(:func:`harness.npz.load_npz`) and holds bare tensors, so sizes are never inferred from it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from harness.errors import WeightsError
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
        return load_npz(path, what="weights", max_bytes=max_bytes), []
    check_size(path, path.stat().st_size, max_bytes, "is")
    native, notes = one_line(path, lambda: _read_framework_file(path, suffix, layout, case,
                                                                select, max_bytes))
    for name, a in native.items():
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise WeightsError(f"expected floating-point values, got "
                               f"{getattr(a, 'dtype', type(a).__name__)}", file=path, field=name)
    return native, notes


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
    check_file(path)
    suffix = path.suffix.lower()
    fmt = BY_SUFFIX.get(suffix)
    if fmt is None:
        raise WeightsError(f"sizes cannot be read from a {suffix} file: give --case (an .npz "
                           "holds bare tensors)", file=path)
    from harness.memory import max_memory

    limit = max_memory()
    check_size(path, path.stat().st_size, limit, "is")
    fields, layout, notes = one_line(path, lambda: fmt.infer(path, select, limit))
    name = re.sub(r"[^A-Za-z0-9_.=+-]", "-", path.name.split(".")[0]) or "weights"
    try:
        case = Case(name=name if name[0].isalnum() else "w" + name, **fields)
    except ValueError as exc:
        raise WeightsError(f"the sizes read from the file make no case ({exc})".splitlines()[0],
                           file=path) from None
    notes.append("read from the file: " + ", ".join(f"{k}={v}" for k, v in fields.items()))
    return case, layout, notes
