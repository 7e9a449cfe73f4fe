"""A reproducer for every pairing of a comparison that differs (``compare --out DIR``): the
folder ``DIR/repro-<k>`` (k: the pairing's place in the table) holds

- ``model.onnx``: for an ONNX layer, what the outputs verdict ran (the node cut out of the model
  with its own attributes and folded weights, or the user's file where it is that one node);
  for a port, ``weights.npz``: the layer's tensors as its framework stores them;
- ``data.npz``: the inputs, the ORIGINAL's canonical weights, and the outputs the shipped layer
  gave (a port's, recorded: the script does not import its framework);
- ``repro.py``: runs ``model.onnx`` in ONNX Runtime (an ONNX layer) or reads the recorded
  outputs (a port), computes the float64 equations (harness/repro/equations.py, pasted) on the
  original's weights, prints the worst error per output, step and direction, and exits 1 where
  they differ beyond tolerance, 0 where they agree.

A ``.tflite`` layer's folder is :mod:`harness.models.tflite_repro`'s (the op cut out as a
one-op ``model.tflite``, its data, a script that runs it in LiteRT); an OpenVINO IR's,
:mod:`harness.models.ir_repro`'s (the op cut out as a one-op IR, its data, a script that runs
it in OpenVINO at the default precision and at f32).

Every string that comes from a file (a path, a node name) goes in as data
(:mod:`harness.repro.quote`); every file is written without following links
(:mod:`harness.safe_files`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness import safe_files
from harness.models.comparison import ModelComparison, Pairing
from harness.npz import save_npz, write_text
from harness.repro import equations
from harness.repro.quote import doc_text, py_literal
from harness.repro.record import script_spec, unsupported

SCRIPT = '''#!/usr/bin/env python3
"""{title}

The shipped layer's outputs against the float64 {cell} equations below on the ORIGINAL's
weights, per output, step and direction. Needs NumPy{needs}:

    python repro.py

Exit 1: the shipped layer differs beyond tolerance; 0: it agrees.
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = {spec}
ATOL, RTOL = {atol}, {rtol}
FEEDS = {feeds}  # model.onnx's input names, in the order of data.npz's feed<k>
OUTPUTS = {outputs}  # model.onnx's output names -> Y, Y_h, Y_c
with np.load(os.path.join(HERE, "data.npz"), allow_pickle=False) as _npz:
    DATA = {{k: _npz[k] for k in _npz.files}}

'''

MAIN = '''

def shipped_outputs():
    """The shipped layer's y [B, T, D*H], h_n, c_n [D, B, H]: model.onnx run in ONNX Runtime,
    or the outputs recorded when the port ran in its framework."""
    if not FEEDS:
        return {k[len("got/"):]: v for k, v in DATA.items() if k.startswith("got/")}
    import onnxruntime as ort

    sess = ort.InferenceSession(os.path.join(HERE, "model.onnx"),
                                providers=["CPUExecutionProvider"])
    feed = {name: DATA[f"feed{k}"] for k, name in enumerate(FEEDS)}
    got = dict(zip(OUTPUTS, sess.run(list(OUTPUTS), feed)))
    out = {}
    for name, what in OUTPUTS.items():
        a = np.asarray(got[name], dtype=np.float64)
        if what == "Y":  # [T, D, B, H] -> [B, T, D*H]
            T, D, B, H = a.shape
            out["y"] = a.transpose(2, 0, 1, 3).reshape(B, T, D * H)
        else:
            out["h_n" if what == "Y_h" else "c_n"] = a
    return out


def main():
    weights = {k[len("original/"):]: v for k, v in DATA.items() if k.startswith("original/")}
    ys, h_n, c_n = stack(SPEC, weights, DATA["x"], DATA["lengths"], DATA["h0"],
                         DATA.get("c0"))
    want = {"y": ys[-1], "h_n": h_n, "c_n": c_n}
    got = shipped_outputs()
    H, dirs = SPEC["hidden_size"], SPEC["directions"]
    worst, first = 0.0, None
    for name in ("y", "h_n", "c_n"):
        if name not in got or want[name] is None:
            continue
        a, r = got[name], want[name]
        parts = ([(f"y direction {d} t={t}", a[:, t, j * H:(j + 1) * H], r[:, t, j * H:(j + 1) * H])
                  for t in range(r.shape[1]) for j, d in enumerate(dirs)] if name == "y" else
                 [(f"{name} [{s}]", a[s], r[s]) for s in range(r.shape[0])])
        for label, x, y in parts:
            err = np.abs(x - y)
            ratio = float((err / (ATOL + RTOL * np.abs(y))).max())
            print(f"{label:24} max |error| {float(err.max()):12.3e}  / tol {ratio:10.3g}")
            worst = max(worst, ratio)
            if first is None and not ratio <= 1.0:
                first = label
    if first is None:
        print(f"\\nthe shipped layer agrees with the equations (worst {worst:.3g}x tolerance)")
        return 0
    print(f"\\nthe shipped layer differs: first at {first} (worst {worst:.3g}x tolerance)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


def write_repros(result: ModelComparison, out: str | Path) -> list[str]:
    """A reproducer folder per differing pairing in ``out``; returns a line for each (what was
    written, or why not)."""
    out = Path(out)
    lines = []
    for k, p in enumerate(result.pairings):
        if p.same:
            continue
        lines.append(write_repro(p, out / f"repro-{k}", out))
    return lines


def write_repro(p: Pairing, folder: Path, top: Path) -> str:
    from harness.compare import tolerance_for
    from harness.models.judges.shipped import ShippedFigures
    from harness.models.onnx_run import ShippedNode

    o, s = p.original, p.shipped
    if s.tflite is not None:
        from harness.models.tflite_repro import write_tflite_repro

        return write_tflite_repro(p, folder, top)
    if s.ir is not None:
        from harness.models.ir_repro import write_ir_repro

        return write_ir_repro(p, folder, top)
    ran = p.outputs.figures
    why = unsupported(o.case)
    if why or not isinstance(ran, ShippedFigures) or ran.inputs is None or ran.got is None:
        return (f"no reproducer for {s.path!r}: "
                + (why or f"its outputs were not computed ({p.outputs.status})"))
    inputs = ran.inputs
    B, T = inputs.x.shape[:2]
    case = o.case.model_copy(update={"batch": B, "seq_len": T})
    tol = tolerance_for(s.case, ran.adapter)
    arrays = {"x": np.asarray(inputs.x, np.float64), "h0": np.asarray(inputs.h0, np.float64),
              "lengths": np.asarray(inputs.lengths, np.int64)}
    if inputs.c0 is not None:
        arrays["c0"] = np.asarray(inputs.c0, np.float64)
    arrays |= {f"original/{k}": np.asarray(a, np.float64)
               for k, a in o.canonical.tensors.items()}
    feeds, outputs, needs = [], {}, ""
    safe_files.folder(folder, top, field="--out")
    if s.onnx is not None:
        run_case = s.case.model_copy(update={"batch": B, "seq_len": T})
        model, feed, names = ShippedNode(s.onnx, "onnxruntime").model_and_feeds(run_case,
                                                                                inputs)
        feeds = list(feed)
        arrays |= {f"feed{k}": np.asarray(a) for k, a in enumerate(feed.values())}
        outputs = {theirs: ours[:-1] for theirs, ours in names.items()}  # Y0 -> Y
        safe_files.write_bytes(folder / "model.onnx", model, top, field="--out")
        needs = " and ONNX Runtime"
    else:
        arrays |= {f"got/{k}": np.asarray(a, np.float64) for k, a in ran.got.items()}
        save_npz(folder / "weights.npz", {k: np.asarray(a) for k, a in s.native.items()}, top)
    save_npz(folder / "data.npz", arrays, top)
    title = f"{p.title()}: {s.where or s.path}"
    head = SCRIPT.format(title=doc_text(title), cell=doc_text(case.cell.upper()),
                         needs=needs, spec=py_literal(script_spec(case)),
                         atol=py_literal(float(tol.atol)), rtol=py_literal(float(tol.rtol)),
                         feeds=py_literal(feeds), outputs=py_literal(outputs))
    write_text(folder / "repro.py", head + equations.source() + MAIN, top)
    return f"reproducer: {folder}/repro.py"
