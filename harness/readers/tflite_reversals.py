"""Where a fused LSTM op of a ``.tflite`` reads its input reversed in time (a ``REVERSE_V2`` on
the time axis before it): the two ops of a Keras ``Bidirectional(LSTM)`` as the converter writes
them (:func:`bidirectional_pairs`), and a lone op of a Keras ``LSTM(go_backwards=True)``
(:func:`reversal_of`), for :mod:`harness.readers.tflite`. A form that would pair wrongly is
named, not read (:class:`~harness.errors.WeightsError`)."""

from __future__ import annotations

from harness.errors import WeightsError
from harness.frameworks import litert_flatbuffer as fb

UNI = fb.FUSED_LSTM


def reversal_of(flat: fb.Flat, n: int, op: fb.Op, label: str) -> tuple[int, ...]:
    """Keras ``go_backwards`` as the converter writes it: a lone fused LSTM op reading its input
    through a ``REVERSE_V2`` on the time axis
    (:func:`~harness.frameworks.litert_flatbuffer.reversed_by`), its y in reading order, or
    reversed back by one more ``REVERSE_V2`` that is its only reader. The index of that first
    ``REVERSE_V2``, then of the one reversing y back where there is one; () for an op that
    reads its input as it is. Any other reversal is named, not read (it would pair wrongly)."""
    rin = fb.reversed_by(flat, op)
    if rin is None:
        return ()
    r = flat.ops.index(rin)
    readers = [k for k, o in enumerate(flat.ops) if op.outputs[0] in o.inputs]
    back = [k for k in readers if flat.ops[k].name == "REVERSE_V2"]
    problem = ""
    if getattr(op.options, "timeMajor", False):
        problem = "the op is time major"
    elif _constant(flat, rin.inputs[1]) not in ([1], [-2]):
        problem = f"the REVERSE_V2 op {r} is not on the time axis (1)"
    elif back and (len(readers) != 1 or _constant(flat, flat.ops[back[0]].inputs[1])
                   not in ([1], [-2])):
        names = ", ".join(f"{flat.ops[k].name} (op {k})" for k in readers)
        problem = (f"its y is read by {names}, not by one REVERSE_V2 on the time axis (1) "
                   f"alone")
    if problem:
        raise WeightsError(f"op {n} {UNI} reads its input through the REVERSE_V2 op {r}: "
                           f"{problem}; rnn-harness reads a Keras go_backwards layer (batch "
                           f"major, its input reversed on the time axis, its y reversed back "
                           f"by one REVERSE_V2 or not)", file=label)
    return (r, back[0]) if back else (r,)


def bidirectional_pairs(flat: fb.Flat, label: str) -> dict[int, tuple[int, ...]]:
    """Keras ``Bidirectional(LSTM)`` as the converter writes it (TensorFlow 2.21): two fused
    LSTM ops on one input, the backward one reading it through a ``REVERSE_V2`` on the time
    axis (:func:`~harness.frameworks.litert_flatbuffer.reversed_by`), its output reversed back
    by another, both joined by ``CONCATENATION`` on the last axis (merge_mode concat), forward
    first. By forward op: (forward, reverse in, backward, reverse out, concatenation). A pair
    merged otherwise (sum, mul, ave) or shaped otherwise is named, not read; a reversed op with
    no forward sibling on its input (Keras ``go_backwards``) is left to be read alone."""
    readers: dict[int, list[int]] = {}
    for n, o in enumerate(flat.ops):
        for i in o.inputs:
            readers.setdefault(i, []).append(n)
    pairs = {}
    for b, bwd in enumerate(flat.ops):
        rin = fb.reversed_by(flat, bwd) if bwd.name == UNI else None
        fwds = [n for n in readers.get(rin.inputs[0], []) if flat.ops[n].name == UNI] \
            if rin is not None else []
        if not fwds:
            continue
        f, r = fwds[0], flat.ops.index(rin)
        fwd = flat.ops[f]
        outs = readers.get(bwd.outputs[0], [])
        r2 = outs[0] if len(outs) == 1 and flat.ops[outs[0]].name == "REVERSE_V2" else -1
        joins = readers.get(fwd.outputs[0], [])
        j = joins[0] if len(joins) == 1 else -1
        problem = pair_problem(flat, fwd, bwd, r, r2, j)
        if problem:
            names = ", ".join(f"{flat.ops[n].name} (op {n})" for n in joins) or "no op"
            raise WeightsError(
                f"op {f} {UNI} and op {b} {UNI} (on a REVERSE_V2, op {r}, of its input) form a "
                f"bidirectional layer whose directions are read by {names}: {problem}; "
                f"rnn-harness reads the converter's merge_mode concat (the backward output "
                f"reversed back, CONCATENATION on the last axis)", file=label)
        pairs[f] = (f, r, b, r2, j)
    return pairs


def pair_problem(flat: fb.Flat, fwd: fb.Op, bwd: fb.Op, r: int, r2: int, j: int) -> str:
    """What keeps two fused LSTM ops from being a Keras concat bidirectional layer, or ''."""
    major = [bool(getattr(o.options, "timeMajor", False)) for o in (fwd, bwd)]
    clips = [float(getattr(o.options, "cellClip", 0.0) or 0.0) for o in (fwd, bwd)]
    axis = 0 if major[0] else 1
    if major[0] != major[1] or clips[0] != clips[1]:
        return "the two ops' options (time major, cell clip) differ"
    if r2 < 0:
        return "the backward output is not reversed back by one REVERSE_V2"
    if any(_constant(flat, flat.ops[k].inputs[1]) not in ([axis], [axis - 3])
           for k in (r, r2)):
        return f"a REVERSE_V2 is not on the time axis ({axis})"
    if j < 0 or flat.ops[j].name != "CONCATENATION":
        return "not joined by one CONCATENATION"
    join = flat.ops[j]
    if join.inputs != [fwd.outputs[0], flat.ops[r2].outputs[0]] \
            or getattr(join.options, "axis", None) not in (2, -1):
        return "the CONCATENATION is not forward then backward on the last axis"
    return ""


def _constant(flat: fb.Flat, i: int) -> list[int] | None:
    """A small constant integer tensor's values, None where it holds none."""
    try:
        return [int(v) for v in flat.stored(i).ravel()]
    except Exception:  # not a constant: no data in its buffer
        return None
