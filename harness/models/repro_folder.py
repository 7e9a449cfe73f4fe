"""What the reproducers of a differing shipped-file pairing share (``compare --out DIR``: a
``.tflite``'s, :mod:`harness.models.tflite_repro`; an OpenVINO IR's,
:mod:`harness.models.ir_repro`): the folder ``DIR/repro-<k>`` with the model file(s),
``data.npz`` and ``repro.py`` written without following links (:func:`write_folder`); the
float64 reference (and the noise floor) on the ORIGINAL's weights as the outputs judge
computes them (:func:`references`); the original's weights as data (:func:`original_arrays`);
and the script's head (:func:`script_text`): its docstring, which says what the folder is and
how to run it, and its figures, every one a Python literal (:mod:`harness.repro.quote`), and
the harness's own pure functions pasted in (:func:`paste`) rather than retyped.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness import safe_files
from harness.npz import save_npz, write_text
from harness.repro.quote import doc_text, py_literal

if TYPE_CHECKING:
    from harness.data import Inputs, Outputs
    from harness.models.comparison import Pairing

HEAD = '''#!/usr/bin/env python3
"""{title}

{about}

    python repro.py

Exit 1: the shipped layer differs (weights or outputs); 0: it agrees.
"""

from __future__ import annotations

import os
import sys
{imports}
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
{figures}
with np.load(os.path.join(HERE, "data.npz"), allow_pickle=False) as _npz:
    DATA = {{k: _npz[k] for k in _npz.files}}


'''


def script_text(title: str, about: str, figures: list[tuple[str, Any, str]],
                pasted: list[str], main: str, imports: tuple[str, ...] = ()) -> str:
    """``repro.py``: the docstring (``title``, a line from a file, made inert here; ``about``,
    text whose strings from files the caller made inert with :func:`doc_text`), the
    standard library ``imports`` the pasted code needs (``from dataclasses import
    dataclass``), the ``figures`` (name, value, comment) as literals, the ``pasted`` sources,
    then ``main``."""
    lines = [f"{name} = {py_literal(value)}" + (f"  # {comment}" if comment else "")
             for name, value, comment in figures]
    head = HEAD.format(title=doc_text(title), about=about, figures="\n".join(lines),
                       imports="".join(f"{line}\n" for line in imports))
    return head + "\n\n".join(pasted) + main + ENDING


# every reproducer's last words and exit code: 1 where it found the layer differs
ENDING = '''

def verdict(said):
    if said:
        print("\\nthe shipped layer differs: " + "; ".join(said))
        return 1
    print("\\nthe shipped layer agrees with the original")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def paste(*objects: Any) -> str:
    """The source of each function or class, as the harness runs it, for a script."""
    return "\n\n".join(inspect.getsource(o) for o in objects)


def not_computed(p: Pairing) -> str | None:
    """Why the pairing gets no reproducer (its outputs were not run), or None."""
    if all(getattr(v.figures, "inputs", None) is not None for v in p.all_outputs):
        return None
    return (f"no reproducer for {p.shipped.path!r}: its outputs were not computed "
            f"({p.outputs.status})")


def references(p: Pairing, inputs: Inputs, dtype: str | None = None
               ) -> tuple[Outputs, Outputs]:
    """The float64 reference on the original's weights and the noise floor in ``dtype``
    (default: the original's case dtype), on ``inputs``, as :func:`harness.models.
    shipped_run.run_shipped` computes them for the outputs verdict."""
    from harness.prepare import reference_and_floor

    o = p.original
    B, T = inputs.x.shape[:2]
    update: dict[str, Any] = {"batch": B, "seq_len": T}
    if dtype is not None:
        update["dtype"] = dtype
    return reference_and_floor(o.case.model_copy(update=update), o.canonical, inputs)


def original_arrays(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The original's blocks as ``original/<direction>/<block>`` (float64)."""
    return {f"original/{k.split('/', 1)[1]}": np.asarray(v, np.float64)
            for k, v in tensors.items()}


def write_folder(folder: Path, top: Path, files: dict[str, bytes],
                 arrays: dict[str, np.ndarray], script: str) -> str:
    """``folder`` with ``files`` (the model), ``data.npz`` and ``repro.py``; the line that
    says so."""
    safe_files.folder(folder, top, field="--out")
    for name, data in files.items():
        safe_files.write_bytes(folder / name, data, top, field="--out")
    save_npz(folder / "data.npz", arrays, top)
    write_text(folder / "repro.py", script, top)
    return f"reproducer: {folder}/repro.py"
