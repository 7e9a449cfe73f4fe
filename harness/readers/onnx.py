"""ONNX models (``.onnx``, layout ``onnx``): the ``W``, ``R``, ``B``, ``P`` initializers of the
model's LSTM/GRU nodes, checked against the case (a missing ``B`` or ``P`` is zeros, as the
operator defines: the layout's optional tensors, applied by ``Layout.from_native``). A tensor
stored as external data (in another file) is refused, never read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.cells import cell_named
from harness.errors import WeightsError
from harness.spec import Case

SUFFIXES = (".onnx",)


def read(path: Path, layout: str, case: Case, *, select: str | None, max_bytes: int | None
         ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The nodes' tensors (:func:`read_onnx`); a layout other than ``onnx`` is refused."""
    if layout != "onnx":
        raise WeightsError(f"an ONNX model holds `onnx` tensors, not {layout!r}; use "
                           "--from onnx", file=path)
    return read_onnx(path, case, select=select)


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



def infer(path: Path, select: str | None, max_bytes: int | None) -> tuple[dict, str, list[str]]:
    """The case fields of the first LSTM/GRU node (the stack's depth from their number): its
    attributes (hidden_size, direction, clip, input_forget, linear_before_reset, HardSigmoid
    activations) and its ``W``/``P`` inputs."""
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

