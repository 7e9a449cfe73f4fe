"""Converting native weights between layouts: ``from_native`` of A, ``to_native`` of B.

Both directions go through the canonical parameters, so a conversion is exact (blocks are
copied, transposed or reshaped; summed biases are added once), except that a forget bias folded
into a stored bias (TF1 cells' ``forget_bias`` into cuDNN's or Keras's ``bias``) is added or
removed in float64, costing at most one rounding. It is refused, with one line
saying why, where the target cannot hold the case's parameters. The reason comes from the
target itself, never from a table kept here:

- the layout's ``cells``;
- the capabilities of the adapters that run the layout (:data:`WEIGHT_CAPABILITIES`, the ones
  about what is stored: peepholes, projection, reset-before GRU, directions, stacks), with the
  adapter's own wording ("PyTorch nn.LSTM has no peephole connections");
- a round trip through the target (``to_native`` then ``from_native``) that must give back
  parameters with the same effect (``bW + bR`` where only the sum acts); a block the target
  drops or merges is named.

Capabilities that are run-time semantics only (clipping, activations, dtypes, lengths) do not
stop a conversion; they come back as notes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.adapters import ADAPTERS
from harness.adapters.base import REQUIREMENTS, Adapter
from harness.errors import HarnessError, WeightsError
from harness.layouts import Layout
from harness.params import Canonical, expected_shapes, key, layer_dirs
from harness.readers.dispatch import fitting_layouts
from harness.spec import Case

# Capabilities that decide whether a layout can hold a case's parameters at all.
# The recurrent activation is among them: weights trained through a hard sigmoid mean nothing
# under a framework whose gates are sigmoids.
WEIGHT_CAPABILITIES = frozenset({"cells", "directions", "multi_layer", "peepholes", "projection",
                                 "projection_layers", "gru_reset_after", "forget_bias",
                                 "recurrent_activations"})
# A file in a framework's own loadable form is run by that framework with the source's
# semantics or not at all: clipping and a coupled input-forget gate refuse it too.
SEMANTICS = WEIGHT_CAPABILITIES | {"gate_clip", "cell_clip", "proj_clip", "input_forget"}


class CannotHold(HarnessError):
    """The target layout cannot hold the case's parameters (exit code 2, one line)."""


def _reasons(adapter: Adapter, case: Case, weights: bool,
             which: frozenset[str] = WEIGHT_CAPABILITIES) -> list[str]:
    caps = adapter.capabilities
    out = []
    for cap, needed, has, reason in REQUIREMENTS:
        if (cap in which) == weights and needed(case) and not has(caps, case):
            out.append(caps.reasons.get(cap) or f"{adapter.title or adapter.name}: {reason(case)}")
    return out


def users(layout: Layout) -> list[Adapter]:
    """The adapters that run ``layout``."""
    return [a for a in ADAPTERS.values() if a.layout_name == layout.name]


def refusal(case: Case, layout: Layout) -> str | None:
    """Why ``layout`` cannot hold the parameters of ``case`` (None: it can)."""
    if case.cell not in layout.cells:
        return f"layout {layout.name!r} has no {case.cell.upper()}"
    try:
        layout.tensors(case)
    except (AssertionError, ValueError, KeyError) as exc:  # the description refuses the case
        return f"layout {layout.name!r} cannot describe it ({exc})"
    found = [_reasons(a, case, weights=True) for a in users(layout)]
    if found and all(found):
        return found[0][0]
    return None


def runtime_notes(case: Case, layout: Layout) -> list[str]:
    """What the adapters of ``layout`` cannot run in ``case`` although the weights convert."""
    notes = []
    for a in users(layout):
        for r in _reasons(a, case, weights=False):
            notes.append(f"{a.name}: {r} (the weights convert exactly; the case's run-time "
                         "semantics do not)")
    return notes


def effective(case: Case, canonical: Canonical) -> dict[str, np.ndarray]:
    """The parameters as they act: a bias pair is its sum, except GRU's n biases with
    reset_after (bR_n sits inside r * (...)), which act apart."""
    out = {}
    for layer, d in layer_dirs(case):
        for k, v in canonical.block(layer, d).items():
            kind, _, g = k.partition("_")
            if kind == "bR" and g not in case.cell_kind.separate_biases(case.reset_after):
                continue
            if kind == "bW" and g not in case.cell_kind.separate_biases(case.reset_after):
                v = v + canonical.tensors.get(key(layer, d, f"bR_{g}"), 0.0)
            out[key(layer, d, k)] = v
    return out


def lost_in(case: Case, layout: Layout, canonical: Canonical) -> list[str]:
    """Canonical blocks whose effect does not survive ``layout``'s round trip.

    Blocks are copied, transposed or reshaped, so they come back bit for bit, except where the
    layout stores ``bW_f + forget_bias``: (x + fb) − fb is x only to within the rounding of the
    sum, at most one ulp of |x| + |fb| per addition. A block that is dropped or merged differs
    by its own size and is named."""
    native = layout.to_native(canonical, case)
    back = layout.from_native(native, case)
    want, got = effective(case, canonical), effective(case, back)
    slack = 2 * np.finfo(np.float64).eps  # two roundings: the fold and the unfold
    fb = abs(case.forget_bias)
    return [k for k, v in want.items()
            if k not in got or got[k].shape != v.shape
            or not (np.abs(got[k] - v) <= slack * (np.abs(v) + fb)).all()]


def convert(case: Case, src: Layout, dst: Layout, native: dict[str, np.ndarray], *,
            file: str | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """Native tensors of ``dst`` holding what ``native`` (layout ``src``) holds, and notes.

    Raises :class:`CannotHold` when ``dst`` (or ``src``) cannot hold the case's parameters."""
    for role, layout in (("source", src), ("target", dst)):
        reason = refusal(case, layout)
        if reason:
            raise CannotHold(f"{role} layout {layout.name!r} cannot hold this case: {reason}")
    canonical = src.from_native(native, case, file=file)
    missing = sorted(set(expected_shapes(case)) - set(canonical.tensors))
    if missing:
        raise CannotHold(f"source layout {src.name!r} cannot hold this case: it has no "
                         f"{_names(missing)}")
    lost = lost_in(case, dst, canonical)
    if lost:
        raise CannotHold(f"target layout {dst.name!r} cannot hold this case: it would lose "
                         f"{_names(lost)}")
    out = dst.to_native(canonical, case)
    dtypes = {np.asarray(v).dtype for v in native.values()}
    if len(dtypes) == 1:  # keep the file's precision where every value survives it exactly
        dt = dtypes.pop()
        with np.errstate(over="ignore"):  # a summed bias may overflow it: then float64 is kept
            kept = all(np.array_equal(v.astype(dt).astype(np.float64), v) for v in out.values())
        if kept:
            out = {k: v.astype(dt) for k, v in out.items()}
    return out, runtime_notes(case, dst)


def _names(keys: list[str]) -> str:
    names = sorted({k.rsplit("/", 1)[1] for k in keys})
    return ", ".join(names)


def pick_case(cases: list[Case], name: str | None, fits: Callable[[Case], None],
              file: str) -> Case:
    """The one case of a (matrix) case file meant: by ``name``, else the one the weights fit
    (``fits`` raises HarnessError when they do not)."""
    if name is not None:
        chosen = [c for c in cases if c.name == name]
        if not chosen:
            raise HarnessError(f"no case named {name!r}; the file has: "
                               f"{', '.join(c.name for c in cases)}", file=file)
        return chosen[0]
    if len(cases) == 1:
        return cases[0]
    ok, errors = [], {}
    for c in cases:
        try:
            fits(c)
            ok.append(c)
        except HarnessError as exc:
            errors[c.name] = exc
    if len(ok) == 1:
        return ok[0]
    if not ok and len({str(e) for e in errors.values()}) == 1:
        raise next(iter(errors.values()))  # the same reason for every case: say it
    raise HarnessError(f"the file expands to {len(cases)} cases and the weights fit "
                       f"{len(ok)} of them ({', '.join(c.name for c in ok) or 'none'}); choose "
                       "one with --name", file=file)


def read_for(case: Case, layout: Layout, path: str, select: str | None = None
             ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Native tensors of ``layout`` from ``path`` (any supported format), checked against the
    layout's names and shapes; a mismatch names the layouts the file does fit."""
    from harness.memory import max_memory
    from harness.readers import read_native

    # the file's size is checked against the memory limit before it is read (a zip bomb)
    native, notes = read_native(path, layout.name, case, select=select, max_bytes=max_memory())
    try:
        layout.from_native(native, case, file=path)
    except WeightsError as exc:
        fits = [n for n in fitting_layouts(native, case) if n != layout.name]
        if fits:
            exc.message += f" (the file fits layout {', '.join(fits)})"
        raise
    return native, notes


def guard(cases: list[Case], name: str | None) -> None:
    """The memory guard of ``run`` (:func:`harness.prepare.check_memory`), for the cases a
    command may use, before any file is read."""
    from harness.prepare import check_memory

    for c in cases:
        if name is None or c.name == name:
            check_memory(c)



# Files in a framework's own loadable form --------------------------------------------------------

# Output extension -> (layout, the adapter whose framework loads it). ``.npz``: any layout.
FRAMEWORK_FILES = {".pt": ("torch", "torch-cpu"), ".pth": ("torch", "torch-cpu"),
                   ".onnx": ("onnx", "onnxruntime"), ".weights.h5": ("keras", "keras3"),
                   ".msgpack": ("flax", "flax-linen")}


def output_kind(path: str) -> str:
    """``.pt``, ``.onnx``, ``.weights.h5``, ``.msgpack`` or ``.npz`` of an output path (else
    refused)."""
    low = path.lower()
    for ext in (".weights.h5", ".pt", ".pth", ".onnx", ".msgpack", ".npz"):
        if low.endswith(ext):
            return ext
    raise HarnessError("the output is a .pt (PyTorch state_dict), .onnx (ONNX model), "
                       ".weights.h5 (Keras 3 weights), .msgpack (flax parameters) or .npz "
                       "(native tensors) file", file=path)


def framework_refusal(case: Case, ext: str) -> str | None:
    """Why the framework that loads an ``ext`` file cannot run ``case``'s weights with their
    semantics (hard sigmoid gates, peepholes, clipping, ...), in the adapter's words."""
    adapter = ADAPTERS[FRAMEWORK_FILES[ext][1]]
    reasons = _reasons(adapter, case, weights=True, which=SEMANTICS)
    return reasons[0] if reasons else None


def check_output(in_path: str, out_path: str) -> None:
    """Before anything is read: OUT is not IN (by any path: a link, ``./w.npz``), nor a
    folder."""
    out = Path(out_path)
    if out.is_dir():
        raise HarnessError("is a folder; OUT is the file to write", file=out_path)
    same = out.exists() and Path(in_path).exists() and os.path.samefile(in_path, out_path)
    if same or Path(in_path).resolve() == out.resolve():
        raise HarnessError(f"is the input file {in_path}; write the converted weights to "
                           "another file", file=out_path)


def write_framework_file(path: str, ext: str, case: Case, native: dict[str, np.ndarray]) -> None:
    """Write the file as :func:`_write_framework_file` makes it, atomically (a temporary file
    beside it, then a rename), creating its folder as ``.npz`` outputs do; a path that cannot
    be written is one line naming it."""
    from harness.npz import writing

    with np.errstate(over="ignore"):  # overflow is refused just below, as one line
        native = {k: np.asarray(v, dtype=np.float32) for k, v in native.items()}
    for name, v in native.items():
        if not np.isfinite(v).all():
            raise WeightsError(f"values overflow float32, the precision of a {ext} file "
                               f"(largest finite: {np.finfo(np.float32).max:.5g})", file=path,
                               field=name)
    out = Path(path)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        # Keras's save_weights wants the name to end in .weights.h5
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=ext)
        os.close(fd)
        try:
            _write_framework_file(tmp, ext, case, native)
            os.chmod(tmp, 0o644)
            os.replace(tmp, out)
        finally:
            Path(tmp).unlink(missing_ok=True)


def _write_framework_file(path: str, ext: str, case: Case, native: dict[str, np.ndarray]) -> None:
    """``native`` (the target layout's tensors) as a file the framework loads: a state_dict for
    ``torch.nn.LSTM/GRU.load_state_dict``, an ONNX model of the LSTM/GRU node(s), Keras 3
    ``model.load_weights`` weights of a Sequential(Input, LSTM/GRU [Bidirectional] ...), the
    ``flax.serialization.to_bytes`` of the ``flax`` tree ``{layer{k}: {forward|backward: {GATE:
    {kernel, bias}}}}`` (:func:`flax_tree`). Float32, the frameworks' own precision."""
    if ext in (".pt", ".pth"):
        import torch

        torch.save({k: torch.from_numpy(v) for k, v in native.items()}, path)
    elif ext == ".onnx":
        import onnx

        onnx.save(onnx_model(case, native), path)
    elif ext == ".msgpack":
        from flax import serialization

        Path(path).write_bytes(serialization.to_bytes(flax_tree(native)))
    else:
        keras_model(case, native).save_weights(path)


def flax_tree(native: dict[str, np.ndarray]) -> dict:
    """The nested tree of ``flax`` names (``layer0/forward/ii/kernel`` -> tree[layer0][forward]
    [ii][kernel]): each leaf a cell's parameter, so ``tree[layer][direction]`` is what
    ``nn.RNN``'s ``{"params": {"cell": ...}}`` holds."""
    tree: dict = {}
    for name, value in native.items():
        *scopes, leaf = name.split("/")
        node = tree
        for s in scopes:
            node = node.setdefault(s, {})
        node[leaf] = value
    return tree


def onnx_model(case: Case, native: dict[str, np.ndarray]):
    """The harness's ONNX graph of the case (one node per layer, time-major ``X`` [T, N, I],
    outputs ``Y{k}``, ``Y_h{k}``, ``Y_c{k}``), without the initial states as graph inputs
    (zeros, the operator's default) and with any length of sequence and batch."""
    import onnx

    from harness.frameworks.onnx import build_model

    model = build_model(case.model_copy(update={"dtype": "float32"}), native, lengths=False)
    graph = model.graph
    states = {i.name for i in graph.input if i.name.startswith("initial_")}
    keep = [i for i in graph.input if i.name not in states]
    del graph.input[:]
    graph.input.extend(keep)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in states:
                node.input[i] = ""
    for v in list(graph.input) + list(graph.output):  # any T and N
        axes = ({0: "T", 1: "N"} if v.name == "X" else {1: "N"} if v.name.startswith("Y_")
                else {0: "T", 2: "N"} if v.name.startswith("Y") else {})
        dims = v.type.tensor_type.shape.dim
        for axis, label in axes.items():
            dims[axis].dim_param = label
    onnx.checker.check_model(model)
    return model


def keras_model(case: Case, native: dict[str, np.ndarray]):
    """A Keras 3 Sequential: Input((None, I)) and the adapters' stack of the case
    (:func:`harness.frameworks.keras.make_layers`: one LSTM/GRU layer per case layer,
    ``Bidirectional`` for two directions, ``go_backwards`` for reverse) in float32, weights set
    from the ``keras`` layout's tensors."""
    from harness.frameworks.keras import KERAS3_ACTIVATIONS, load_native, make_layers
    from harness.frameworks.tf import import_tf

    import_tf()  # TensorFlow first, without its C++ start-up lines: Keras imports it
    import keras

    float32 = case.model_copy(update={"dtype": "float32"})
    # a Sequential's layers have one output each: no final states
    layers = make_layers(keras, float32, activation=KERAS3_ACTIVATIONS[case.recurrent_activation],
                         return_state=False)
    model = keras.Sequential([keras.Input((None, case.input_size)), *layers])
    load_native(float32, layers, native, np.float32)
    return model


def read_any(path: str, src_name: str | None, case_file: str | None, name: str | None,
             select: str | None) -> tuple[Case, Layout, dict[str, np.ndarray], list[str]]:
    """The case, source layout and native tensors of ``path``: sizes and semantics from the case
    file when one is given, else from the file itself (:func:`harness.readers.infer_case`)."""
    from harness.cases import load_cases
    from harness.layouts import get_layout
    from harness.readers import infer_case

    if case_file is None:
        case, inferred, notes = infer_case(path, select=select)
        try:
            guard([case], None)
        except HarnessError as exc:  # sizes read from the file: its name says where they are
            exc.file = exc.file or str(path)
            raise
        if src_name is not None and src_name != inferred:
            raise HarnessError(f"the file holds {inferred!r} tensors, not {src_name!r}",
                               file=path, field="--from")
        src = get_layout(inferred)
        native, more = read_for(case, src, path, select)
        return case, src, native, notes + more
    cases = load_cases(case_file)
    guard(cases, name)
    if src_name is None:  # the layout the file makes unambiguous, as a case's weights.file
        from harness.memory import max_memory
        from harness.readers import read_case_weights

        def fits(c: Case) -> tuple[str, dict[str, np.ndarray], list[str]]:
            try:
                return read_case_weights(path, c, select=select, max_bytes=max_memory())
            except WeightsError as exc:
                if exc.field == "weights.layout":
                    exc.field, exc.message = "--from", exc.message.replace(
                        "give weights.layout", "give --from")
                raise

        case = pick_case(cases, name, fits, case_file)
        found, native, notes = fits(case)
        src = get_layout(found)
        src.from_native(native, case, file=path)
        return case, src, native, notes
    src = get_layout(src_name)
    case = pick_case(cases, name, lambda c: read_for(c, src, path, select), case_file)
    native, notes = read_for(case, src, path, select)
    return case, src, native, notes


def convert_file(case_file: str | None, src_name: str | None, dst_name: str | None, in_path: str,
                 out_path: str, *, name: str | None = None, select: str | None = None
                 ) -> list[str]:
    """``rnn-harness convert``: read ``in_path`` (as ``src_name``, default the layout the file
    makes unambiguous; sizes from ``case_file`` or from the file), write ``out_path`` in the
    form its extension names: ``.pt``, ``.onnx``, ``.weights.h5`` (the framework's own loadable
    file) or ``.npz`` (``dst_name``'s native tensors, default the source layout's). Returns the
    lines to print."""
    from harness.layouts import get_layout
    from harness.npz import save_npz

    ext = output_kind(out_path)
    check_output(in_path, out_path)
    if ext in FRAMEWORK_FILES:
        own = FRAMEWORK_FILES[ext][0]
        if dst_name is not None and dst_name != own:
            raise HarnessError(f"a {ext} file holds {own!r} tensors, not {dst_name!r}; write "
                               f".npz for layout {dst_name!r}", field="--to")
        dst_name = own
    case, src, native, notes = read_any(in_path, src_name, case_file, name, select)
    # an .npz without --to keeps the source's own layout: the file's tensors, checked and bare
    dst = get_layout(dst_name) if dst_name is not None else src
    if ext in FRAMEWORK_FILES:
        reason = framework_refusal(case, ext)
        if reason:
            raise CannotHold(f"a {ext} file cannot hold this case: {reason}")
    out, more = convert(case, src, dst, native, file=in_path)
    if ext in FRAMEWORK_FILES:
        write_framework_file(out_path, ext, case, out)
    else:
        save_npz(out_path, out)
    return notes + more + [f"{case.name}: converted {len(native)} tensor(s) of layout {src.name!r} "
                           f"to {len(out)} of layout {dst.name!r}: {out_path}"]
