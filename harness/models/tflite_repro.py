"""The reproducer of a differing ``.tflite`` pairing (``compare --out DIR``, beside
:mod:`harness.models.repro`'s for ONNX nodes and ports): the folder ``DIR/repro-<k>`` holds

- ``model.tflite``: the fused LSTM op cut out of the file as a one-op ``.tflite``
  (:func:`harness.frameworks.litert_run.cut`: the file's own op, tensors, buffers, grids and state
  variables, tensor indices unchanged), even where the whole file is the layer; a ``WHILE``
  loop cannot be cut to one op, so its whole file;
- ``data.npz``: ``x``, what the outputs verdict fed the op (on the op's input grid where the
  op was cut out of an integer file); ``expected_y``, the float64 reference on the ORIGINAL's
  weights, computed by the harness; for a quantized file ``integer_y`` (the integer-aware
  reference on the file's own grids) and ``ideal_y`` (an ideal quantization of the original's
  weights through the same reference); and ``original/<block>``, the original's canonical
  weights;
- ``repro.py``: reads each weight tensor of ``model.tflite`` in the LiteRT interpreter and
  judges it against the original's block as the weights judge does (float within the stored
  format's rounding, quantized within half a step of its own grid, naming the factor a scale
  differs by), runs the file on ``x`` and judges y as the outputs verdict does (float: per
  step within tolerance; quantized: within 2 output steps of ``integer_y`` and an SQNR no more
  than 6 dB below ``ideal_y``'s), prints the figures and exits 1 where anything differs, 0
  where nothing does. It imports NumPy and LiteRT only: the tensor reading is pasted
  (:mod:`harness.frameworks.tflite_tensors`), every string from the file goes in as data
  (:mod:`harness.repro.quote`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.models.repro_folder import (
    not_computed,
    original_arrays,
    references,
    script_text,
    write_folder,
)
from harness.repro.quote import doc_text

if TYPE_CHECKING:
    from harness.models.comparison import Pairing

ABOUT = """The shipped .tflite's {what} ({file}) judged against the ORIGINAL: its weight tensors,
read in the LiteRT interpreter, against the original's weights; its outputs on x against
the float64 reference on the original's weights (data.npz). Needs NumPy and ai-edge-litert
(or TensorFlow's tf.lite):"""
# the script's figures: name, what the writer's figures call it, comment
FIGURES = (
    ("SCHEME", "scheme", "float, int8, 16x8 or dynamic: how the outputs are judged"),
    ("EPS", "eps", "a float weight's rounding: machine epsilon of the coarser stored format"),
    ("ATOL", "atol", "a float file's outputs"), ("RTOL", "rtol", ""),
    ("STEP", "step", "a quantized file's output step"),
    ("K_STEPS", "k_steps", "pass within k steps"),
    ("MARGIN_DB", "margin", "below an ideal quantization's SQNR"),
    ("MIN_SQNR_DB", "min_sqnr", "a floor"), ("HIDDEN", "hidden", ""),
    ("WEIGHTS", "weights", "[canonical block, its tensor in model.tflite (-1: the op holds "
     "none, so zero), the words]"))

MAIN = '''

def interpreter():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    it = Interpreter(model_path=os.path.join(HERE, "model.tflite"))
    it.allocate_tensors()
    return it


def weights_differ(it):
    """Each weight tensor against the original's block; the blocks that differ."""
    details = {d["index"]: d for d in it.get_tensor_details()}
    differ = []
    for block, index, words in WEIGHTS:
        want = DATA["original/" + block]
        if index < 0:
            got, scale = np.zeros_like(want), None
        else:
            got, scale, zero, qmax = weight_grid(details[index], it.get_tensor(index))
        err = np.abs(got - want)
        mag = max(float(np.abs(want).max(initial=0.0)), float(np.abs(got).max(initial=0.0)))
        if scale is not None:
            ratio = float(np.max(err / (scale / 2 * (1 + 1e-6) + EPS * mag), initial=0.0))
            said = f"{float(np.max(err / scale, initial=0.0)):.3g} steps of its grid"
            need = float(np.abs(want).max(initial=0.0)) / qmax
            if (block.rsplit("/", 1)[-1][0] in "WR" and not np.any(zero) and need > 0
                    and np.ptp(scale) == 0 and abs(float(scale.flat[0]) / need - 1) > 0.01):
                said += f"; scale {float(scale.flat[0]) / need:.3g}x what its values need"
        else:
            diff = float(err.max(initial=0.0))
            ratio = (0.0 if diff == 0 else diff / (EPS * mag) if EPS * mag > 0
                     else float("inf"))
            said = f"max |difference| {diff:.3g}"
        bad = not ratio <= 1.0
        print(f"weights {block:22} {words:40} {ratio:10.3g}x allowed  {said}"
              + ("  DIFFERS" if bad else ""))
        if bad:
            differ.append(block)
    return differ


def run_file(it):
    """The file's y on x: an integer input quantized on its grid, the output dequantized."""
    [given] = it.get_input_details()
    it.set_tensor(given["index"], to_file(given, DATA["x"]))
    it.invoke()
    [out] = it.get_output_details()
    return from_file(out, it.get_tensor(out["index"]))


def outputs_differ(got):
    """Per step and direction: a float file within tolerance of the float64 reference, a
    quantized one within K_STEPS of the integer-aware reference; then a quantized file's
    SQNR over y against an ideal quantization's. What differs, in words."""
    want = DATA["integer_y"] if SCHEME != "float" else DATA["expected_y"]
    unit = "steps" if SCHEME != "float" else "x tolerance"
    first, worst = None, 0.0
    for t in range(want.shape[1]):
        for d in range(want.shape[2] // HIDDEN):
            cols = slice(d * HIDDEN, (d + 1) * HIDDEN)
            err = np.abs(got[:, t, cols] - want[:, t, cols])
            if SCHEME != "float":
                ratio = float(err.max()) / STEP / K_STEPS
                shown = float(err.max()) / STEP
            else:
                ratio = shown = float((err / (ATOL + RTOL * np.abs(want[:, t, cols]))).max())
            print(f"y direction {d} t={t:<4} max |error| {float(err.max()):12.3e}  "
                  f"{shown:10.3g} {unit}")
            worst = max(worst, shown)
            if first is None and not ratio <= 1.0:
                first = f"y direction {d} t={t}"
    said = []
    if first is not None:
        said.append(f"first at {first} (worst {worst:.3g} {unit})")
    if SCHEME != "float":
        total = float(sqnr_db(got, DATA["expected_y"]))
        ideal = float(sqnr_db(DATA["ideal_y"], DATA["expected_y"]))
        print(f"SQNR over y {total:.1f} dB; an ideal {SCHEME} quantization {ideal:.1f} dB")
        said += cost_said(total, ideal, MARGIN_DB, MIN_SQNR_DB)
    return said


def main():
    it = interpreter()
    differ = weights_differ(it)
    said = outputs_differ(run_file(it))
    if differ:
        said.insert(0, "weights differ in " + ", ".join(differ))
    return verdict(said)
'''


def write_tflite_repro(p: Pairing, folder: Path, top: Path) -> str:
    """The reproducer folder of the ``.tflite`` pairing ``p`` (module text); a line saying
    what was written, or why not."""
    from harness import cost_rule
    from harness.frameworks.litert_run import cut

    s = p.shipped
    op = s.tflite
    why = not_computed(p)
    if why:
        return why
    if op.reversed_in:  # the script runs the cut op on x as it is, in its own time order
        return (f"no reproducer for {s.path!r}: a go_backwards layer (behind the REVERSE_V2 "
                f"op {op.reversed_in[0]}) is not written as one yet")
    # a loop cannot be cut to one op; the outputs verdict ran it only where it is the file
    model = op.model if op.op == "WHILE" else cut(op.model, op.index, op.ops)
    arrays, figures = _arrays(p, p.outputs.figures.inputs)
    what = "WHILE loop (the whole file: a loop cannot be cut to one op)" if op.op == "WHILE" \
        else f"{op.op} op {op.index} (cut out as a one-op .tflite)" if not op.ops \
        else f"bidirectional layer's ops {list(op.ops)} (cut out together as a .tflite)"
    script = script_text(f"{p.title()}: {s.where or s.path}",
                         ABOUT.format(what=doc_text(what), file=doc_text(s.source)),
                         [(name, figures[k], said) for name, k, said in FIGURES],
                         [_tensors_source(), cost_rule.source()], MAIN)
    return write_folder(folder, top, {"model.tflite": model}, arrays, script)


def _arrays(p: Pairing, inputs: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """data.npz's arrays and the script's figures: the float64 reference on the original's
    weights as the outputs judge computes it (:func:`harness.prepare.reference_and_floor`),
    a quantized file's references as its judgement kept them (``repro_data``), the weights'
    rounding as the weights judge takes it (:mod:`harness.models.weights_measure`)."""
    from harness import quantization as qz
    from harness.compare import tolerance_for
    from harness.models.weights_measure import rounding

    o, s = p.original, p.shipped
    op = s.tflite
    ref, _ = references(p, inputs)
    arrays = {"x": np.asarray(inputs.x, np.float64),
              "expected_y": np.asarray(ref.y, np.float64)}
    arrays |= original_arrays(o.canonical.tensors)
    tol = tolerance_for(s.case, p.outputs.figures.adapter or "litert")
    figures: dict[str, Any] = {
        "scheme": op.scheme, "eps": rounding(o, s), "atol": float(tol.atol),
        "rtol": float(tol.rtol), "k_steps": qz.K_STEPS + qz.READ_BACK_STEPS,
        "margin": qz.IDEAL_MARGIN_DB, "hidden": s.case.hidden_size,
        # a loop's weights are in its body subgraph: there the outputs alone are judged
        "weights": [[k.split("/", 1)[1], op.indices.get(k, -1),
                     s.file_names.get(k, "no tensor: one bias per gate")]
                    for k in o.canonical.tensors] if op.indices else []}
    extra = p.outputs.figures.repro_data()  # a quantized file's references, else none
    arrays |= {k: np.asarray(v, np.float64) for k, v in extra.items() if k.endswith("_y")}
    figures["step"], figures["min_sqnr"] = extra.get("step"), extra.get("min_sqnr_db")
    return arrays, figures


def _tensors_source() -> str:
    from harness.frameworks import tflite_tensors

    return tflite_tensors.source()
