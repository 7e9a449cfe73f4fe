"""The reproducer of a differing OpenVINO IR pairing (``compare --out DIR``, beside
:mod:`harness.models.tflite_repro`'s for a ``.tflite``; the folder, data and script head are
:mod:`harness.models.repro_folder`'s): the folder ``DIR/repro-<k>`` holds

- ``model.xml`` / ``model.bin``: the sequence op (or the TensorIterator stepping one cell, its
  W, R, B read from the cell in its body) cut out of the IR as the outputs verdict ran it
  (:func:`harness.frameworks.openvino_ir.cut_out`: the file's own op and constants, with their
  f16 -> f32 decompression, the data inputs made parameters ``ir_X``, ``ir_H``, ``ir_C``,
  ``ir_L``), written by ``openvino.serialize`` (no compression, no transformation);
- ``data.npz``: per run (``default``: the runtime's default inference precision; ``f32``)
  the arrays fed (``<run>/feed/ir_X`` ...), x as float64, the float64 reference on the
  ORIGINAL's weights (``<run>/expected_y``, ``_h_n``, ``_c_n``) and the noise floor in the
  precision that run was judged in (``<run>/floor_...``), computed as the outputs verdict
  computed them; ``original/<block>``, the original's canonical weights as compared with a
  file that sums the biases (each gate's bW + bR in bW, zeros in bR); ``where/<block>``, the
  elements of the op's W, R, B (flattened end to end, counted from 1; 0: none, the bias is
  summed into bW) that hold the block, found by running the harness's own reading
  (:func:`harness.readers.openvino_ir.onnx_native`, the ONNX layout) on the elements'
  indices;
- ``repro.py``: reads the op's W, R, B constants in OpenVINO (through a Convert) and judges
  each block as the weights judge does (the pasted
  :func:`harness.models.weights_measure.float_ratio`), runs the IR at the runtime's default
  precision and pinned to f32 (``INFERENCE_PRECISION_HINT``), prints which precision each
  ran, and judges y per step and direction and the final states by the verdict's rule (the
  pasted :func:`harness.compare.within`, with each run's tolerance and noise-floor factor as
  data); exits 1 where anything differs, 0 where nothing does. It imports NumPy and OpenVINO
  only; every string from the file goes in as data (:mod:`harness.repro.quote`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.models.repro_folder import (
    not_computed,
    original_arrays,
    paste,
    references,
    script_text,
    write_folder,
)
from harness.repro.quote import doc_text

if TYPE_CHECKING:
    from harness.models.comparison import Pairing
    from harness.models.layers import Layer

ABOUT = """The shipped IR's {what}
(from {file}) judged against the ORIGINAL: its weight constants, read in OpenVINO, against
the original's weights; its outputs, run in OpenVINO (CPU) at the runtime's default inference
precision and pinned to f32, against the float64 reference on the original's weights
(data.npz), each by the tolerance and noise floor of the precision compare judged that run
in. Needs NumPy and OpenVINO:"""

MAIN = '''

def sequence_op(model):
    """The op holding W, R, B: the sequence op, or the cell in the TensorIterator's body."""
    op = next(n for n in model.get_ordered_ops() if n.get_type_name() == OP_TYPE)
    if CELL_TYPE:
        op = next(n for n in op.get_function().get_ordered_ops()
                  if n.get_type_name() == CELL_TYPE)
    return op


def constants(op):
    """The op's W, R, B as float64 (through the Convert that decompresses f16), or None and
    why they cannot be read."""
    out = {}
    for name, port in WEIGHT_PORTS.items():
        node = op.input(port).get_source_output().get_node()
        while node.get_type_name() == "Convert":
            node = node.input(0).get_source_output().get_node()
        if node.get_type_name() != "Constant":
            return None, (f"its {name} is computed by {node.get_type_name()} "
                          f"{node.get_friendly_name()!r}, not a constant")
        out[name] = np.asarray(node.get_data(), dtype=np.float64)
        if list(out[name].shape) != SHAPES[name]:
            return None, f"its {name} is shaped {list(out[name].shape)}, not {SHAPES[name]}"
    return out, ""


def weights_differ(op):
    """Each block of the op's constants against the original's; the blocks that differ."""
    tensors, why = constants(op)
    if tensors is None:
        print(f"weights not judged: {why}")
        return []
    flat = np.concatenate([tensors[name].ravel() for name in WEIGHT_PORTS])
    differ = []
    for block, words in WEIGHTS:
        where = DATA["where/" + block]
        got = np.where(where > 0, flat[np.maximum(where, 1) - 1], 0.0)
        ratio = float_ratio(DATA["original/" + block], got, EPS)
        bad = not ratio <= 1.0
        print(f"weights {block:22} {words:34} {ratio:10.3g}x allowed"
              + ("  DIFFERS" if bad else ""))
        if bad:
            differ.append(block)
    return differ


def run_model(core, model, hint):
    """The IR's y [B, T, D*H], h_n (and c_n) [D, B, H] on the run's feed, compiled with
    ``hint`` (None: the runtime's default); the precision it ran at."""
    compiled = core.compile_model(model, "CPU",
                                  {} if hint is None else {"INFERENCE_PRECISION_HINT": hint})
    ran = compiled.get_property("INFERENCE_PRECISION_HINT")
    ran = ran.get_type_name() if hasattr(ran, "get_type_name") else str(ran)
    run = "default" if hint is None else hint
    out = compiled({name: DATA[f"{run}/feed/{name}"] for name in FEEDS})
    got = [np.asarray(out[compiled.output(k)], dtype=np.float64)
           for k in range(len(compiled.outputs))]
    B, D, T, H = got[0].shape
    named = {"y": got[0].transpose(0, 2, 1, 3).reshape(B, T, D * H),
             "h_n": got[1].transpose(1, 0, 2)}
    if len(got) > 2:
        named["c_n"] = got[2].transpose(1, 0, 2)
    return ran, named


def rows(name, shape):
    """(label, slice) per row of the verdict: y per direction and step, a state per
    direction."""
    if name != "y":
        return [(f"{name} direction {d}", (k,)) for k, d in enumerate(DIRECTIONS)]
    return [(f"y direction {d} t={t}", (slice(None), t, slice(k * HIDDEN, (k + 1) * HIDDEN)))
            for k, d in enumerate(DIRECTIONS) for t in range(shape[1])]


def outputs_differ(run, got):
    """Each row of the run's outputs by the verdict's rule: within atol + rtol |r|, or within
    FLOOR_FACTOR x the noise floor of the precision judged in; where it first differs."""
    judged = RUNS[run]
    tol = Tolerance(judged["atol"], judged["rtol"], judged["floor_factor"])
    first, worst = None, 0.0
    for name in ("y", "h_n", "c_n"):
        if f"{run}/expected_{name}" not in DATA:
            continue
        want, floor = DATA[f"{run}/expected_{name}"], DATA[f"{run}/floor_{name}"]
        for label, part in rows(name, want.shape):
            a, r, f = got[name][part], want[part], floor[part]
            max_abs = np.array([np.abs(a - r).max()])
            tol_ratio = np.array([tol_ratios(a, r, tol).max()])
            floor_ratio = _floor_ratio(max_abs, np.array([np.abs(f - r).max()]))
            ratio = float(effective_ratio(tol_ratio, floor_ratio, tol.floor_factor)[0])
            ok = bool(within(tol_ratio, floor_ratio, tol.floor_factor)[0])
            print(f"{run:8} {label:22} max |error| {max_abs[0]:11.3e} {ratio:10.3g}x allowed"
                  + ("" if ok else "  DIFFERS"))
            worst = max(worst, ratio)
            if first is None and not ok:
                first = label
    return first, worst


def main():
    import openvino as ov

    core = ov.Core()
    model = core.read_model(os.path.join(HERE, "model.xml"))
    said = []
    differ = weights_differ(sequence_op(model))
    if differ:
        said.append("weights differ in " + ", ".join(differ))
    for run, judged in RUNS.items():
        ran, got = run_model(core, model, judged["hint"])
        note = "" if ran == judged["precision"] else (
            f" (compare ran it at {judged['precision']})")
        print(f"\\n{run}: INFERENCE_PRECISION_HINT {ran} here{note}; judged as "
              f"{judged['dtype']} (its tolerance and noise floor)")
        first, worst = outputs_differ(run, got)
        if first is not None:
            said.append(f"{run} ({ran}) outputs first at {first} (worst {worst:.3g}x allowed)")
    return verdict(said)
'''


def write_ir_repro(p: Pairing, folder: Path, top: Path) -> str:
    """The reproducer folder of the OpenVINO IR pairing ``p`` (module text); a line saying
    what was written, or why not."""
    from harness import compare
    from harness.frameworks.openvino_ir import cut_out
    from harness.models.weights_measure import compared_tensors, float_ratio, rounding
    from harness.readers.openvino_ir import WEIGHT_PORTS
    from harness.readers.openvino_loop import CELL_PORTS

    why = not_computed(p)
    if why:
        return why
    o, s = p.original, p.shipped
    runs = _runs(p)
    model, _ = cut_out(s.ir, runs[0][2], s.case)
    arrays = original_arrays(compared_tensors(o, s))
    where, words = _where(s)
    arrays |= {f"where/{k}": v for k, v in where.items()}
    judged: dict[str, Any] = {}
    feeds: list[str] = []
    for run, adapter, inputs in runs:
        _, feed = cut_out(s.ir, inputs, s.case)
        feeds = list(feed)
        case = s.case.model_copy(update={"dtype": adapter.case_dtype})
        tol = compare.tolerance_for(case, adapter.name, adapter.tolerances)
        judged[run] = {"hint": adapter.hint, "precision": adapter.precision,
                       "dtype": adapter.case_dtype, "atol": float(tol.atol),
                       "rtol": float(tol.rtol), "floor_factor": tol.floor_factor}
        ref, floor = references(p, inputs, adapter.case_dtype)
        arrays |= {f"{run}/feed/{k}": v for k, v in feed.items()}
        arrays[f"{run}/x"] = np.asarray(inputs.x, np.float64)
        for name in ("y", "h_n", "c_n"):
            want = ref.named().get(name)
            if want is not None:
                arrays[f"{run}/expected_{name}"] = np.asarray(want, np.float64)
                arrays[f"{run}/floor_{name}"] = np.asarray(floor.named()[name], np.float64)
    cell_type, ports, lead = "", WEIGHT_PORTS[s.case.cell], 0
    if s.ir.loop:  # the cell in the TensorIterator's body holds them, without the dirs axis
        cell_type = {"lstm": "LSTMCell", "gru": "GRUCell"}[s.case.cell]
        ports, lead = {k: CELL_PORTS[s.case.cell][k] for k in ("W", "R", "B")}, 1
    figures: list[tuple[str, Any, str]] = [
        ("OP_TYPE", s.ir.op_type, ""),
        ("CELL_TYPE", cell_type, "the cell in a TensorIterator's body that holds W, R, B"),
        ("WEIGHT_PORTS", ports, "the op's input ports of W, R, B"),
        ("SHAPES", {k: list(v.shape[lead:]) for k, v in s.ir.weights.items()}, ""),
        ("EPS", rounding(o, s), "a weight's rounding: epsilon of the coarser stored format"),
        ("HIDDEN", s.case.hidden_size, ""), ("DIRECTIONS", list(s.case.directions), ""),
        ("FEEDS", feeds, "model.xml's parameters, fed <run>/feed/<name>"),
        ("RUNS", judged, "hint (None: the runtime's default), the precision compare ran at, "
         "the dtype judged in and its tolerance"),
        ("WEIGHTS", [[k.split("/", 1)[1], words[k.split("/", 1)[1]]]
                     for k in compared_tensors(o, s)], "[canonical block, where in W, R, B]")]
    script = script_text(
        f"{p.title()}: {s.where or s.path}",
        ABOUT.format(what=doc_text(f"{s.ir.op_type} op {s.ir.name!r} (cut out as a one-op "
                                   "IR)"), file=doc_text(s.source)),
        figures, [paste(float_ratio), paste(compare.Tolerance, compare._quotient,
                                           compare.tol_ratios, compare._floor_ratio,
                                           compare.effective_ratio, compare.within)], MAIN,
        imports=("from dataclasses import dataclass",))
    return write_folder(folder, top, _serialized(model), arrays, script)


def _runs(p: Pairing) -> list[tuple[str, Any, Any]]:
    """(run, adapter, inputs) of each outputs verdict: ``default`` (the runtime's default
    precision) and ``f32``, with the inputs that verdict ran on."""
    from harness.models.openvino_ir import ir_adapters

    adapters = {a.name: a for a in ir_adapters(p.shipped.ir)}
    out = []
    for v in p.all_outputs:
        a = adapters[v.figures.adapter]
        out.append(("default" if a.hint is None else a.hint, a, v.figures.inputs))
    return out


def _where(s: Layer) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Per canonical block (``forward/W_f``): the elements of the op's W, R, B that hold it
    (flattened end to end, from 1; 0: none), and where that is in words (``W[0, 4:8]``). The
    harness's own reading of the op run on the elements' indices says which they are."""
    from dataclasses import replace

    from harness.layouts import get_layout
    from harness.memory import max_memory
    from harness.readers.openvino_ir import WEIGHT_PORTS, onnx_native, read_sequences

    [seq] = [q for q in read_sequences(Path(s.ir.xml), max_memory())
             if q.name == s.ir.name and q.op_type == s.ir.op_type]
    index, start, spans = {}, 1, []
    for name in WEIGHT_PORTS[seq.cell]:
        shape = seq.weights[name].shape
        index[name] = np.arange(start, start + int(np.prod(shape)), dtype=np.float64
                                ).reshape(shape)
        spans.append((name, start, shape))
        start += int(np.prod(shape))
    canonical = get_layout("onnx").from_native(onnx_native(replace(seq, weights=index)),
                                               s.case, file=s.source)
    where, words = {}, {}
    for k, v in canonical.tensors.items():
        block = k.split("/", 1)[1]
        where[block] = np.rint(v).astype(np.int64)
        assert np.array_equal(where[block], v) and (where[block].all() or not where[block].any())
        words[block] = _words(where[block], spans, block)
    return where, words


def _words(where: np.ndarray, spans: list[tuple[str, int, tuple[int, ...]]],
           block: str) -> str:
    """``W[0, 4:8]``: the tensor, direction and rows the block's elements lie in."""
    if not where.any():
        return f"none: summed into bW_{block.rsplit('_', 1)[1]}"
    lo, hi = int(where.min()), int(where.max())
    name, start, shape = next(sp for sp in spans if sp[1] <= lo < sp[1] + int(np.prod(sp[2])))
    first = np.unravel_index(lo - start, shape)
    last = np.unravel_index(hi - start, shape)
    return f"{name}[{first[0]}, {first[1]}:{last[1] + 1}]"


def _serialized(model: Any) -> dict[str, bytes]:
    """``model`` as IR files: ``openvino.serialize``, the constants as they are."""
    import openvino as ov

    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "model.xml"
        ov.serialize(model, str(xml), str(xml.with_suffix(".bin")))
        return {"model.xml": xml.read_bytes(), "model.bin": xml.with_suffix(".bin").read_bytes()}
