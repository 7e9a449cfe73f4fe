"""Deployed files in a case: as its weights (``weights: {file: model.tflite}``,
``{file: model.xml}``) and as its shipped file (``shipped:``, which ``litert-shipped`` and
``openvino-shipped`` run as it is). The recurrent layers of a ``.tflite`` and of an OpenVINO IR
are read by the readers of those formats, which compare reads them with too
(:func:`harness.readers.tflite.read_tflite`, :func:`harness.readers.openvino_ir.read_sequences`),
never parsed again here.

The layers ``select`` names (comma-separated names, in that order), or every recurrent layer of
the file in file order, are the case's stack, as canonical tensors (layout ``canonical``),
checked against the case field by field as a framework file's are
(:func:`harness.readers.dispatch.check_fields`). A quantized file's weights are dequantized on
their own grids (int8, 16x8: the values the file's integers stand for). What the file fixes of
its input (batch, steps) binds only the shipped file: :func:`infer` leaves it out,
:func:`shipped_layer` checks it.

Beside the readers' dispatch by suffix (:mod:`harness.readers.dispatch`), not in it: the .tflite
reader reads the flatbuffer with the framework toolkit's schema helper
(:mod:`harness.frameworks.litert_flatbuffer`) and keeps the file's grids for the quantized
judge.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import WeightsError
from harness.params import key
from harness.spec import Case

TFLITE, IR = ".tflite", ".xml"
SUFFIXES = (TFLITE, IR)
LAYOUT = "canonical"
# the case fields one layer tells (the stack's num_layers and input_size are the stack's)
LAYER_FIELDS = ("cell", "hidden_size", "direction", "cell_clip", "gate_clip", "reset_after")


@dataclass(frozen=True)
class FileLayer:
    """One recurrent layer of a deployed file: its ``name`` (what ``select`` names), the case
    ``fields`` it tells (no batch or steps), its weights as one layer's ``canonical`` tensors,
    the ``batch`` and ``seq_len`` the file fixes (None: free), and what runs it: the .tflite op
    (:class:`harness.readers.tflite.TfliteOp`) or the IR's sequence op
    (:class:`harness.readers.openvino_ir.IrSequence`)."""

    name: str
    fields: dict
    canonical: dict[str, np.ndarray] = field(repr=False)
    batch: int | None = None
    seq_len: int | None = None
    tflite: Any = field(default=None, repr=False)
    ir: Any = field(default=None, repr=False)

    @property
    def scheme(self) -> str:
        """How the file stores the layer: ``float``, or a .tflite's ``int8``, ``16x8``,
        ``dynamic`` (integer weights on grids)."""
        return "float" if self.tflite is None else self.tflite.scheme


def _limit(max_bytes: int | None) -> int:
    from harness.memory import max_memory

    return max_memory() if max_bytes is None else max_bytes


def file_layers(path: Path, max_bytes: int | None = None) -> list[FileLayer]:
    """Every recurrent layer of the ``.tflite`` or IR ``path``, in file order. A file without
    one that can be read, a missing .bin, a damaged file: :class:`WeightsError` naming it."""
    path = Path(path)
    limit = _limit(max_bytes)
    if path.suffix.lower() == TFLITE:
        from harness.readers.tflite import read_tflite

        return [_tflite_layer(d) for d in read_tflite(path, "weights", limit)]
    if path.suffix.lower() == IR:
        from harness.readers.limits import one_line
        from harness.readers.openvino_ir import read_sequences

        if not path.with_suffix(".bin").is_file():
            raise WeightsError(f"its weights file {path.with_suffix('.bin').name} is missing "
                               "(an OpenVINO IR keeps its constants in the .bin beside the "
                               ".xml)", file=path)
        return [_ir_layer(path, s) for s in one_line(path, lambda: read_sequences(path, limit))]
    raise WeightsError(f"not a deployed file type {path.suffix!r} (expected .tflite or an "
                       "OpenVINO IR .xml)", file=path)


def _tflite_layer(read: dict) -> FileLayer:
    case: Case = read["case"]
    fields = _fields_of(case)
    batch = case.batch if "batch" in case.model_fields_set else None
    steps = case.seq_len if "seq_len" in case.model_fields_set else None
    return FileLayer(read["name"], fields, dict(read["canonical"].tensors), batch, steps,
                     tflite=read["tflite"])


def _ir_layer(path: Path, seq: Any) -> FileLayer:
    from harness.layouts import get_layout
    from harness.readers.openvino_ir import fields_of, onnx_native

    if seq.problem is not None:
        raise WeightsError(seq.problem, file=path)
    read = fields_of(seq)
    case = Case(name="weights", **read)
    canonical = get_layout("onnx").from_native(onnx_native(seq), case, file=str(path))
    return FileLayer(seq.name, _fields_of(case), dict(canonical.tensors), read.get("batch"),
                     read.get("seq_len"), ir=seq)


def _fields_of(case: Case) -> dict:
    dumped = case.model_dump(include={"input_size", *LAYER_FIELDS}, exclude_none=True)
    dumped["direction"] = case.dir_mode
    if not case.cell_kind.reads("reset_after"):
        dumped.pop("reset_after", None)
    return dumped


def chosen(path: Path, select: str | None, max_bytes: int | None = None, *,
           field: str = "select") -> list[FileLayer]:
    """The layers ``select`` names (comma-separated, each a layer's name), in that order, or
    every layer of the file; one stack: each layer reads the one before it."""
    layers = file_layers(path, max_bytes)
    if select:
        by_name = {la.name: la for la in layers}
        picked = []
        for name in (s.strip() for s in select.split(",")):
            if name not in by_name:
                shown = ", ".join(repr(n) for n in list(by_name)[:8])
                raise WeightsError(f"select names no recurrent layer {name!r} (its layers: "
                                   f"{shown})", file=path, field=field)
            picked.append(by_name[name])
        layers = picked
    for below, above in zip(layers, layers[1:], strict=False):
        D = 2 if below.fields["direction"] == "bidirectional" else 1
        for what, want in (("cell", below.fields["cell"]),
                           ("hidden_size", below.fields["hidden_size"]),
                           ("direction", below.fields["direction"]),
                           ("input_size", D * below.fields["hidden_size"])):
            if above.fields[what] != want:
                raise WeightsError(
                    f"its layers {below.name!r} and {above.name!r} are not one stack ({what} "
                    f"{above.fields[what]}, the layer below gives {want}): select the layers "
                    "of one stack", file=path, field=field)
    return layers


def infer(path: Path, select: str | None, max_bytes: int | None) -> tuple[dict, str, list[str]]:
    """The case fields the chosen layers tell (no batch or steps: those bind only the shipped
    file), the layout (``canonical``) and notes."""
    layers = chosen(path, select, max_bytes)
    fields = {**layers[0].fields, "num_layers": len(layers)}
    notes = [f"read {len(layers)} recurrent layer(s): {', '.join(la.name for la in layers)}"]
    if layers[0].scheme != "float":
        notes.append(f"the weights are dequantized from the file's {layers[0].scheme} grids")
    return fields, LAYOUT, notes


def read(path: Path, layout: str, case: Case, *, select: str | None, max_bytes: int | None
         ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The chosen layers' weights as the case's canonical tensors (``layer{k}/...``)."""
    if layout != LAYOUT:
        raise WeightsError(f"a {path.suffix} file holds {LAYOUT!r} tensors, not {layout!r}",
                           file=path, field="layout")
    tensors: dict[str, np.ndarray] = {}
    for k, layer in enumerate(chosen(path, select, max_bytes)):
        for d in case.directions:
            prefix = key(0, d, "")
            for name, a in layer.canonical.items():
                if name.startswith(prefix):
                    tensors[key(k, d, name[len(prefix):])] = np.asarray(a, dtype=np.float64)
    return tensors, []


def handles(path: str | Path) -> bool:
    """Whether ``path`` is a deployed file this module reads (by suffix)."""
    return Path(path).suffix.lower() in SUFFIXES


def read_case_weights(path: Path, case: Case, *, layout: str | None = None,
                      select: str | None = None, max_bytes: int | None = None
                      ) -> tuple[str, dict[str, np.ndarray], list[str]]:
    """A case's deployed weights file, as :func:`harness.readers.read_case_weights` reads the
    others: ``(layout, native tensors, notes)``, the file's fields checked against the case."""
    from harness.readers.dispatch import checked_read
    from harness.readers.limits import check_file, check_size

    path = Path(path)
    check_file(path)
    check_size(path, path.stat().st_size, max_bytes, "is")
    try:
        found = infer(path, select, max_bytes)
    except WeightsError as exc:
        if exc.field == "select":
            exc.field = "weights.select"
        raise
    return checked_read(path, case, layout, found, lambda inferred: read(
        path, inferred, case, select=select, max_bytes=max_bytes))


def shipped_layer(case: Case, max_bytes: int | None = None) -> FileLayer:
    """The one layer of the case's ``shipped:`` file (its ``select``, or the file's only
    layer), checked against the case: its fields, and the batch and steps the file fixes.
    Every difference: :class:`WeightsError` naming the file and the field."""
    from harness.readers.dispatch import check_fields
    from harness.readers.limits import check_file

    spec = case.shipped
    if spec is None:
        raise WeightsError("the case names no shipped file", file=case.source, field="shipped")
    path = case.resolve(spec.file)
    check_file(path)
    stat = path.stat()
    layers = _chosen_once(str(path), stat.st_mtime_ns, stat.st_size, spec.select,
                          _limit(max_bytes))
    if len(layers) != 1:
        raise WeightsError(f"holds {len(layers)} recurrent layers "
                           f"({', '.join(repr(la.name) for la in layers)}): the shipped file "
                           "runs one; name it in shipped.select", file=path, field="shipped.select")
    [layer] = layers
    check_fields(path, {**layer.fields, "num_layers": 1}, case)
    return layer


@functools.lru_cache(maxsize=4)
def _chosen_once(path: str, mtime_ns: int, size: int, select: str | None, limit: int
                 ) -> list[FileLayer]:
    # a pair asks for its shipped layer several times (applicability, route, run): read once
    return chosen(Path(path), select, limit, field="shipped.select")
