"""The text of ``repro.py``: parts every script shares (its header, its data, the float64
equations of harness/repro/equations.py, the comparison and the exit status) around its
framework family's part (:data:`harness.families.FAMILIES`, keyed by ``Handed.family``).

A script imports NumPy and the adapter's framework only. It rebuilds what the adapter handed
its framework from the record (constructor arguments, the call, the weights in the
framework's own names and form, or the model file beside it), computes the expected outputs
from the canonical float64 weights with the equations written into it, prints the error per
step and the first step beyond ``ATOL + RTOL * |expected|`` (the pair's tolerance; the harness
also passes a row within a multiple of its noise floor, which the script does not know), and
exits 1 when the divergence reproduces, 0 when it does not.

This module only assembles: the framework part, and the adapter's own code it runs (pasted from
the family's module, harness/families/), are the family's. The script's header and main part
are its question's (:mod:`harness.repro.questions`, the key the pair's judge's figures give:
``ReproRecord.question``), a quantized pair's the cost question.
"""

from __future__ import annotations

import numpy as np

from harness.families import FAMILIES
from harness.repro import equations, questions
from harness.repro.quote import py_literal
from harness.repro.record import ReproRecord

INLINE_MAX = 400  # numbers: at most this many in all, the data are written into the script


def data_arrays(record: ReproRecord) -> dict[str, np.ndarray]:
    """Every array the script loads, by the name it loads it: ``canonical/...`` (float64, for
    the equations), ``x``, ``h0``, ``c0``, ``lengths`` (float64 / int64, for the equations) and
    ``handed/...`` (as the framework got them)."""
    arrays = {f"canonical/{k}": v for k, v in record.canonical.items()}
    arrays |= dict(record.inputs)
    if record.handed is not None:
        arrays |= {f"handed/{k}": np.asarray(v) for k, v in record.handed.arrays.items()}
    return arrays


def inline(arrays: dict[str, np.ndarray]) -> bool:
    return sum(a.size for a in arrays.values()) <= INLINE_MAX


def _number(v: object) -> str:
    """A Python literal of one element; NaN and the infinities as NumPy's names."""
    if isinstance(v, float) and not np.isfinite(v):
        return "np.nan" if np.isnan(v) else ("np.inf" if v > 0 else "-np.inf")
    return repr(v)


def _literal(a: np.ndarray) -> str:
    values = ", ".join(_number(v.item()) for v in a.reshape(-1))
    return (f"np.array([{values}], dtype={py_literal(a.dtype.name)})"
            f".reshape({tuple(int(n) for n in a.shape)!r})")


def _data_block(arrays: dict[str, np.ndarray]) -> str:
    if inline(arrays):
        body = "\n".join(f"    {py_literal(k)}: {_literal(v)}," for k, v in arrays.items())
        return f"DATA = {{\n{body}\n}}\n"
    return ('with np.load(os.path.join(HERE, "data.npz"), allow_pickle=False) as _npz:\n'
            "    DATA = {k: _npz[k] for k in _npz.files}\n")


INPUTS = '''
CANONICAL = {k[len("canonical/"):]: v for k, v in DATA.items() if k.startswith("canonical/")}
HANDED = {k[len("handed/"):]: v for k, v in DATA.items() if k.startswith("handed/")}
X, H0, LENGTHS = DATA["x"], DATA["h0"], DATA["lengths"]
C0 = DATA.get("c0")
ABSENT = {}  # outputs the framework's model does not have, with why: not compared
'''

SHARED = '''

def fitted(what, got, exp):
    """``got`` (float64) in ``exp``'s shape; where the framework returned fewer steps (or
    another shape) than the equations, the elements it lacks are NaN, which count as beyond."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape == exp.shape:
        return got
    print(f"{what}: the framework returned shape {list(got.shape)}, the equations "
          f"{list(exp.shape)}; what it lacks counts as beyond")
    out = np.full(exp.shape, np.nan)
    if got.ndim == exp.ndim:
        common = tuple(slice(0, min(a, b)) for a, b in zip(got.shape, exp.shape))
        out[common] = got[common]
    return out


def where(row):
    t = "" if row[3] is None else f" t={row[3]}"
    return f"{row[0]} layer {row[1]} direction {row[2]}{t}"


def header():
    print(f"Python {platform.python_version()}, NumPy {np.__version__}, "
          + ", ".join(f"{k} {v}" for k, v in framework_versions().items()))
    print(f"{platform.platform()}; CPU: {platform.processor() or platform.machine()}; "
          f"device: {device()}")
    for name, why in ABSENT.items():
        print(f"{name} not compared: {why}")
'''


RENDERERS = FAMILIES
"""Handed.family -> its :class:`~harness.families.paste.Family` (the framework part of the
script, what it needs installed, the adapter's code pasted into it)."""

CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    name: family.choices for name, family in FAMILIES.items() if family.choices}
"""Handed.family -> the keys of ``Handed.call`` that choose the text of its script, with the
values that do: each script a family renders is one value of each (every other value of the
call is data written into the script as a literal)."""

RUNTIMES = CHOICES["onnx"]["runtime"]
"""The ONNX runtimes a script can run a graph in."""


def framework(record: ReproRecord) -> str:
    """The family's part of ``record``'s script: the adapter's own code it runs (pasted), then
    ``CALL`` (the handed call, as data) and the framework part that calls that code."""
    family = FAMILIES[record.handed.family]
    pasted = "".join(source() + "\n" for source in family.pasted)
    return (pasted + "\nCALL = " + py_literal(record.handed.call) + "\n"
            + family.framework(record.handed.call))


def script(record: ReproRecord) -> str:
    """The whole ``repro.py`` of ``record`` (which has a handed record of a known family and a
    question this harness knows: :func:`harness.repro.questions.of`)."""
    assert record.handed is not None
    question = questions.of(record)
    assert question is not None
    head, tail = question.script(record, needs(record))
    return (head + _data_block(data_arrays(record)) + INPUTS + "\n\n" + equations.source()
            + "\n" + framework(record) + SHARED + tail)


def needs(record: ReproRecord) -> str:
    """What ``record``'s script needs installed beside NumPy."""
    assert record.handed is not None
    return FAMILIES[record.handed.family].needs(record.handed.call)
