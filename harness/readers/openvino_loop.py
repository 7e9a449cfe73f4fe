"""A recurrent layer written as a loop in an OpenVINO IR: a ``TensorIterator`` whose body is
one ``LSTMCell`` (or ``GRUCell``) stepping over the time axis of its input, the form
OpenVINO's TensorIterator API builds (``set_sliced_input``, ``set_merged_input``,
``get_concatenated_slices``, ``get_iter_value``):

- the input X sliced along the time axis (``axis`` 0 or 1 of a rank-3 X, part size 1, stride
  1 from the first step to the last, or -1 from the last to the first: ONNX's reverse);
- H (and C) merged inputs, a back edge carrying each from the cell's output to its input;
- the per-step h concatenated along the time axis with the input's stride (so that y[t] is
  the step that read x[t]), and the final h (and c) as outputs;
- nothing in the body but the cell, its constants (through a ``Convert``: f16 decompression),
  and ``Squeeze``/``Unsqueeze`` between the body's parameters and results and the cell.

Anything else (a ``Loop``, with its condition; other ops in the body; part of the time axis)
is not read: :func:`recognize` says why, naming the loop and its body's ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CELLS = {"LSTMCell": "lstm", "GRUCell": "gru"}
# a cell op's input ports (LSTMCell-4, GRUCell-3)
CELL_PORTS = {"lstm": {"X": 0, "H": 1, "C": 2, "W": 3, "R": 4, "B": 5},
              "gru": {"X": 0, "H": 1, "W": 2, "R": 3, "B": 4}}
PASS_THROUGH = ("Squeeze", "Unsqueeze")
BODY_OPS = {"Parameter", "Result", "Const", "Convert", *PASS_THROUGH}
# the state each cell output carries, by output index
STATES = {0: "H", 1: "C"}


@dataclass
class LoopCell:
    """The one cell of a recognized TensorIterator: the body's ``cell_op`` (an IrOp), ``cell``
    (lstm, gru), ``direction`` (forward, reverse), the X slice's ``x_axis``, and ``roles``:
    the loop's input index of ``X``, ``H``, ``C``, its output index of ``Y`` (the per-step h),
    ``Ho``, ``Co`` (the final states), and ``y_axis`` (Y's concatenation axis)."""

    cell_op: Any
    cell: str
    direction: str
    x_axis: int
    roles: dict[str, int] = field(default_factory=dict)


def named(op: Any) -> str:
    """The loop and its body's ops, as the not-readable message names them."""
    return f"{op.type} {op.name!r} (body: {', '.join(sorted(set(op.body)))})"


def recognize(op: Any) -> LoopCell | str:
    """The cell of the TensorIterator ``op`` (an IrOp read with its body), or why it is not
    read (the loop named with its body's ops)."""
    body = op.graph
    cells = [] if body is None else [o for o in body.ops.values() if o.type in CELLS]
    other = [] if body is None else [o for o in body.ops.values()
                                     if o.type not in BODY_OPS and o.type not in CELLS]
    if op.type != "TensorIterator" or len(cells) != 1 or other:
        return named(op)
    got = _wiring(op, body, cells[0])
    return got if isinstance(got, LoopCell) else f"{named(op)}: {got}"


def _int(attrs: dict[str, str], key: str, default: int) -> int | None:
    try:
        return int(attrs.get(key, default))
    except ValueError:
        return None


def _traced(body: Any, op: Any, port: int) -> tuple[Any, int] | None:
    """The op and output port feeding ``op``'s ``port`` in ``body``, through Squeeze and
    Unsqueeze (their axes inputs are constants)."""
    for _ in range(8):
        edge = body.edges.get((op.id, port))
        src = None if edge is None else body.ops.get(edge[0])
        if src is None:
            return None
        if src.type not in PASS_THROUGH:
            return src, edge[1]
        op, port = src, 0
    return None


def _wiring(op: Any, body: Any, cell_op: Any) -> LoopCell | str:
    cell = CELLS[cell_op.type]
    inputs = {a.get("internal_layer_id"): a for tag, a in op.port_map if tag == "input"}
    backs = {e.get("to-layer"): e.get("from-layer") for e in op.back_edges}
    roles: dict[str, int] = {}
    x_axis, stride = 0, 1
    for role in ("X", "H", "C"):
        if role not in CELL_PORTS[cell]:
            continue
        src = _traced(body, cell_op, CELL_PORTS[cell][role])
        entry = None if src is None else inputs.get(src[0].id)
        if src is None or src[0].type != "Parameter" or entry is None:
            return f"the cell's {role} is not one of the loop's inputs"
        port = _int(entry, "external_port_id", -1)
        if port is None or port < 0:
            return f"the loop's input of the cell's {role} has no port"
        roles[role] = port
        if role == "X":
            slicing = [_int(entry, k, d) for k, d in
                       (("axis", -1), ("stride", 1), ("part_size", 1), ("start", 0),
                        ("end", -1))]
            x_axis, stride = slicing[0], slicing[1]
            if slicing not in ([0, 1, 1, 0, -1], [1, 1, 1, 0, -1], [0, -1, 1, -1, 0],
                               [1, -1, 1, -1, 0]):
                return ("X is not sliced one step at a time over the whole of axis 0 or 1 "
                        f"(axis, stride, part_size, start, end: {slicing})")
            continue
        result = body.ops.get(backs.get(src[0].id, ""))
        fed = None if result is None else _traced(body, result, 0)
        if "axis" in entry or fed is None or fed[0] is not cell_op \
                or STATES.get(cell_op.outputs.index(fed[1]) if fed[1] in cell_op.outputs
                              else -1) != role:
            return f"the cell's {role} is not carried from one step to the next"
    for tag, entry in op.port_map:
        if tag != "output":
            continue
        result = body.ops.get(entry.get("internal_layer_id", ""))
        fed = None if result is None else _traced(body, result, 0)
        if fed is None or fed[0] is not cell_op or fed[1] not in cell_op.outputs:
            continue
        state = STATES.get(cell_op.outputs.index(fed[1]))
        port = _int(entry, "external_port_id", -1)
        if port not in op.outputs or state is None:
            continue
        if "axis" in entry:
            slicing = [_int(entry, k, d) for k, d in
                       (("stride", 1), ("part_size", 1), ("start", 0), ("end", -1))]
            axis = _int(entry, "axis", -1)
            whole = [1, 1, 0, -1] if stride == 1 else [-1, 1, -1, 0]
            if state == "H" and slicing == whole and axis in (0, 1):
                roles["Y"], roles["y_axis"] = op.outputs.index(port), axis
        elif _int(entry, "iteration", -1) == -1:
            roles[f"{state}o"] = op.outputs.index(port)
    wanted = ["Y", "Ho"] + (["Co"] if "C" in roles else [])
    missing = [w for w in wanted if w not in roles]
    if missing:
        return (f"its outputs lack {', '.join(missing)} (the per-step h concatenated with "
                "X's stride, the final h and c)")
    return LoopCell(cell_op, cell, "forward" if stride == 1 else "reverse", x_axis, roles)
