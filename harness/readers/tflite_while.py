"""The ``WHILE`` loop the TFLite converter emits for a Keras ``GRU(reset_after=True)`` (TFLite
has no fused GRU op), read as a canonical GRU layer (:mod:`harness.readers.tflite`).

The loop body's cell is recognized by following its dataflow from the carried hidden state
``h`` and the time step's input ``x_t`` (a ``GATHER`` of the carried input sequence): two
``FULLY_CONNECTED`` ops with constant float kernels, ``Wx`` [3H, I] on ``x_t`` and ``Wh``
[3H, H] on ``h`` (each with its bias, or none: a zero bias the converter dropped), each
``SPLIT`` into three [B, H] blocks along its last axis, and then exactly::

    z = LOGISTIC(ADD(x_z, h_z))      r = LOGISTIC(ADD(x_r, h_r))
    n = TANH(ADD(x_n, MUL(r, h_n)))  h' = ADD(MUL(z, h), MUL(SUB(1, z), n))

which is the canonical GRU with reset after (docs/equations.md): ``W_g``, ``bW_g`` the rows of
``Wx`` and its bias for gate g, ``R_g``, ``bR_g`` those of ``Wh``. Which block is z, r or n is
read from that dataflow, not assumed. A body that departs from it in any op returns None (the
caller names the form as not readable, with its ops).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.frameworks import litert_flatbuffer as fb

NONE_ACTIVATION = 0  # ActivationFunctionType.NONE


def _activation(op: fb.Op) -> int:
    return int(getattr(op.options, "fusedActivationFunction", 0) or 0)


def _const(flat: fb.Flat, i: int) -> bool:
    return i >= 0 and flat.model.buffers[flat.subgraph.tensors[i].buffer].data is not None


def read_gru_body(data: bytes, body_index: int) -> dict[str, Any] | None:
    """The GRU a WHILE loop's body subgraph computes: ``{"W": {g: [H, I]}, "R": {g: [H, H]},
    "bW": {g: [H]}, "bR": {g: [H]}, "tensors": {"W_g": words}, "H", "I"}`` for g in r, z, n;
    None where the body is not exactly that cell (module text)."""
    try:
        return _read(fb.read(data, body_index))
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def _read(flat: fb.Flat) -> dict[str, Any] | None:
    made = {o: op for op in flat.ops for o in op.outputs}
    carried = {int(i) for i in flat.subgraph.inputs}
    names = [op.name for op in flat.ops]
    if names.count("FULLY_CONNECTED") != 2 or names.count("SPLIT") != 2:
        return None

    def by(name: str, i: int) -> fb.Op:
        op = made.get(i)
        if op is None or op.name != name:
            raise KeyError(name)
        if name in ("ADD", "MUL", "SUB", "FULLY_CONNECTED") and \
                _activation(op) != NONE_ACTIVATION:
            raise KeyError(name)
        return op

    # h' = ADD(MUL(z, h), MUL(SUB(1, z), n)): the body output that such an ADD makes
    for out in flat.subgraph.outputs:
        op = made.get(int(out))
        if op is None or op.name != "ADD":
            continue
        found = _from_update(flat, by, carried, op)
        if found is not None:
            return found
    return None


def _gates(flat: fb.Flat, by: Any, i: int) -> tuple[fb.Op, int, fb.Op]:
    """The SPLIT block ``i`` comes from, its position, and the FULLY_CONNECTED it splits."""
    split = by("SPLIT", i)
    axis = int(np.ravel(flat.stored(split.inputs[0]))[0])
    if axis not in (1, -1) or len(split.outputs) != 3:
        raise KeyError("SPLIT")
    return split, split.outputs.index(i), by("FULLY_CONNECTED", split.inputs[1])


def _from_update(flat: fb.Flat, by: Any, carried: set[int], update: fb.Op
                 ) -> dict[str, Any] | None:
    a, b = (made for made in update.inputs)
    for zh, rest in ((a, b), (b, a)):
        try:
            keep = by("MUL", zh)
            blend = by("MUL", rest)
        except KeyError:
            continue
        for z_out, h in (tuple(keep.inputs), tuple(keep.inputs)[::-1]):
            if h not in carried:
                continue
            z = by("LOGISTIC", z_out)
            for one_minus, n_out in (tuple(blend.inputs), tuple(blend.inputs)[::-1]):
                try:
                    sub = by("SUB", one_minus)
                    n = by("TANH", n_out)
                except KeyError:
                    continue
                if sub.inputs[1] != z_out or not _const(flat, sub.inputs[0]) or \
                        float(np.ravel(flat.value(sub.inputs[0]))[0]) != 1.0:
                    continue
                return _cell(flat, by, carried, h, z, n)
    return None


def _pair(flat: fb.Flat, by: Any, i: int) -> tuple[tuple[fb.Op, int, fb.Op], ...]:
    """The two gate blocks an ADD sums: each (SPLIT, position, FULLY_CONNECTED)."""
    add = by("ADD", i)
    return tuple(_gates(flat, by, j) for j in add.inputs)


def _cell(flat: fb.Flat, by: Any, carried: set[int], h: int, z: fb.Op, n: fb.Op
          ) -> dict[str, Any] | None:
    z_blocks = _pair(flat, by, z.inputs[0])
    fcs = {id(fc): fc for _, _, fc in z_blocks}
    if len(fcs) != 2:
        return None
    recurrent = next(fc for _, _, fc in z_blocks if fc.inputs[0] == h)
    inp = next(fc for _, _, fc in z_blocks if fc is not recurrent)
    gather = by("GATHER", inp.inputs[0])
    if gather.inputs[0] not in carried:
        return None
    pos = {"z": {fc_id: p for _, p, fc in z_blocks for fc_id in [id(fc)]}}
    # n = TANH(ADD(x_n, MUL(r, h_n))), r = LOGISTIC(ADD(x_r, h_r))
    add_n = by("ADD", n.inputs[0])
    for x_n, rh in (tuple(add_n.inputs), tuple(add_n.inputs)[::-1]):
        try:
            mul = by("MUL", rh)
            xs = _gates(flat, by, x_n)
        except KeyError:
            continue
        if xs[2] is not inp:
            continue
        for r_out, h_n in (tuple(mul.inputs), tuple(mul.inputs)[::-1]):
            try:
                r = by("LOGISTIC", r_out)
                hs = _gates(flat, by, h_n)
            except KeyError:
                continue
            if hs[2] is not recurrent:
                continue
            r_blocks = _pair(flat, by, r.inputs[0])
            pos["r"] = {id(fc): p for _, p, fc in r_blocks}
            pos["n"] = {id(inp): xs[1], id(recurrent): hs[1]}
            if set(pos["r"]) != {id(inp), id(recurrent)}:
                return None
            return _weights(flat, inp, recurrent, pos)
    return None


def _weights(flat: fb.Flat, inp: fb.Op, recurrent: fb.Op, pos: dict[str, dict[int, int]]
             ) -> dict[str, Any] | None:
    for fc in (inp, recurrent):
        if [sorted(pos[g][id(fc)] for g in "rzn")] != [[0, 1, 2]]:
            return None
        if not _const(flat, fc.inputs[1]) or flat.tensor_type(fc.inputs[1]) != "FLOAT32":
            return None
    Wx, Wh = flat.value(inp.inputs[1]), flat.value(recurrent.inputs[1])
    H = Wh.shape[1]
    if Wx.ndim != 2 or Wh.shape != (3 * H, H) or Wx.shape[0] != 3 * H:
        return None
    out: dict[str, Any] = {"W": {}, "R": {}, "bW": {}, "bR": {}, "tensors": {}, "H": H,
                           "I": Wx.shape[1]}
    for kind, bias_kind, fc, W in (("W", "bW", inp, Wx), ("R", "bR", recurrent, Wh)):
        has_bias = len(fc.inputs) > 2 and fc.inputs[2] >= 0
        b = flat.value(fc.inputs[2]) if has_bias else np.zeros(3 * H)
        if b.shape != (3 * H,):
            return None
        for g in "rzn":
            rows = slice(pos[g][id(fc)] * H, (pos[g][id(fc)] + 1) * H)
            out[kind][g], out[bias_kind][g] = W[rows], b[rows]
            what = "kernel" if kind == "W" else "recurrent kernel"
            out["tensors"][f"{kind}_{g}"] = (f"the loop body's {what}, rows {rows.start}:"
                                             f"{rows.stop} (tensor {fc.inputs[1]})")
            out["tensors"][f"{bias_kind}_{g}"] = (
                f"the loop body's {what} bias, rows {rows.start}:{rows.stop} "
                f"(tensor {fc.inputs[2]})" if has_bias else "no bias in the file (zero)")
    return out
