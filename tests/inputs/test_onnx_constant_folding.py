"""The ONNX reader folds the constant chains that compute a layer's weights with ONNX's semantics
(issue 56, item 2): each constant operator, at each opset spelling, and random chains of them,
folded as ``onnx.reference`` computes. Fixtures are built in the test with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.readers.onnx_fold import Folder, Scope
from harness.readers.onnx_proto import OnnxFile

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_graphs import constant as _const  # noqa: E402
from support.onnx_graphs import initializer as _init  # noqa: E402
from support.onnx_graphs import save_model as _save  # noqa: E402


def _fold(path: Path, name: str, max_bytes: int | None = None) -> np.ndarray:
    """``name`` of the model's main graph, folded by the reader's folder."""
    model = OnnxFile(path, max_bytes)
    return Folder(model.opset, max_bytes).value(Scope(model.graph, None, "main", "main"), name)


def _reference(path: Path, name: str) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(str(path))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None))
    return ReferenceEvaluator(model).run(None, {})[0]


# each constant operator against onnx.reference, by opset ---------------------------------------

def _x(shape=(2, 12, 3), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _ops(opset: int) -> dict[str, list]:
    """Name -> nodes computing ``w`` from the initializer ``x`` (2, 12, 3), in ``opset``'s
    spelling of each operator's parameters."""
    new = opset >= 13

    def ints(name, v):
        return [_const(name, v)]

    def slice_(starts, ends, axes=None, steps=None):
        if opset < 10:
            return [helper.make_node("Slice", ["x"], ["w"], name="s", starts=starts, ends=ends,
                                     **({"axes": axes} if axes is not None else {}))]
        names = ["x", "st", "en"] + (["ax"] if axes is not None else []) + (
            ["sp"] if steps is not None else [])
        nodes = ints("st", starts) + ints("en", ends)
        nodes += ints("ax", axes) if axes is not None else []
        nodes += ints("sp", steps) if steps is not None else []
        return nodes + [helper.make_node("Slice", names, ["w"], name="s")]

    def axes_op(op, axes, src="x"):
        if new:
            return ints("a", axes) + [helper.make_node(op, [src, "a"], ["w"], name="n")]
        return [helper.make_node(op, [src], ["w"], name="n", axes=axes)]

    def split(split, axis, output):
        outs = [f"p{k}" for k in range(len(split))]
        if new:
            nodes = ints("sp", split) + [helper.make_node("Split", ["x", "sp"], outs, name="n",
                                                          axis=axis)]
        else:
            nodes = [helper.make_node("Split", ["x"], outs, name="n", axis=axis, split=split)]
        return nodes + [helper.make_node("Identity", [outs[output]], ["w"], name="i")]

    cases = {
        "constant": [helper.make_node("Constant", [], ["w"], name="k",
                                      value=numpy_helper.from_array(_x((2, 2), 5)))],
        "identity": [helper.make_node("Identity", ["x"], ["w"], name="n")],
        "cast-f16": [helper.make_node("Cast", ["x"], ["w"], name="n", to=TensorProto.FLOAT16)],
        "cast-double": [helper.make_node("Cast", ["x"], ["w"], name="n", to=TensorProto.DOUBLE)],
        "slice": slice_([0, 4], [1, 8], [0, 1]),
        "slice-clamped": slice_([-100, 2], [10**12, -1], [1, 2]),
        "slice-default-axes": slice_([1, 3], [2, 100]),
        "concat": [helper.make_node("Concat", ["x", "x", "x"], ["w"], name="n", axis=-2)],
        "unsqueeze": axes_op("Unsqueeze", [0, -1]),
        "squeeze": (slice_([0], [1], [2])[:-1]  # x[:, :, 0:1], then squeezed
                    + [helper.make_node("Slice", ["x", "st", "en", "ax"] if opset >= 10
                                        else ["x"], ["y"], name="s",
                                        **({} if opset >= 10 else
                                           {"starts": [0], "ends": [1], "axes": [2]}))]
                    + axes_op("Squeeze", [-1], src="y")),
        "split": split([2, 7, 3], 1, 1),
        "split-last": split([1, 2], -1, 1),
        "reshape": ints("sh", [0, -1]) + [helper.make_node("Reshape", ["x", "sh"], ["w"],
                                                           name="n")],
        "transpose": [helper.make_node("Transpose", ["x"], ["w"], name="n", perm=[2, 0, 1])],
        "transpose-default": [helper.make_node("Transpose", ["x"], ["w"], name="n")],
        "gather": ints("ix", [[2, -1], [0, 1]]) + [helper.make_node("Gather", ["x", "ix"], ["w"],
                                                                   name="n", axis=1)],
    }
    if opset >= 10:
        cases["slice-reversed"] = slice_([-1, 10], [-10**12, 1], [2, 1], [-1, -3])
    if opset >= 12:
        cases["constant-floats"] = [helper.make_node("Constant", [], ["w"], name="k",
                                                     value_floats=[1.5, -2.0])]
    if opset >= 13:
        cases["cast-bf16"] = [helper.make_node("Cast", ["x"], ["w"], name="n",
                                               to=TensorProto.BFLOAT16)]
    if opset >= 18:
        cases["split-num-outputs"] = [
            helper.make_node("Split", ["x"], ["p0", "p1", "p2"], name="n", axis=1,
                             num_outputs=3),
            helper.make_node("Identity", ["p2"], ["w"], name="i")]
        cases["split-uneven"] = [
            helper.make_node("Split", ["x"], ["p0", "p1"], name="n", axis=2, num_outputs=2),
            helper.make_node("Identity", ["p1"], ["w"], name="i")]
    return cases


OPSETS = (9, 11, 17, 18)
OP_CASES = [(opset, op) for opset in OPSETS for op in _ops(opset)]


@pytest.mark.parametrize("opset, op", OP_CASES, ids=[f"{op}@{o}" for o, op in OP_CASES])
def test_each_constant_operator_folds_as_onnx_reference_computes(opset, op, tmp_path):
    path = _save(tmp_path / "m.onnx", _ops(opset)[op], [_init("x", _x())], opset=opset,
                 outputs=("w",))
    got, want = _fold(path, "w"), _reference(path, "w")
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float64), np.asarray(want).astype(np.float64))


def test_every_operator_and_opset_spelling_was_checked():
    assert len(OP_CASES) == 16 + 17 + 19 + 21  # opsets 9, 11, 17, 18


def _random_chain(rng: np.random.Generator, steps: int) -> tuple[list, tuple]:
    """A chain of ``steps`` random constant operators (opset 17) from ``x`` (2, 6, 4) to
    ``w``, each valid for the shape it gets."""
    shape, src, nodes = [2, 6, 4], "x", []
    for k in range(steps):
        out = "w" if k == steps - 1 else f"t{k}"
        rank = len(shape)
        kind = rng.choice(["slice", "concat", "unsqueeze", "squeeze", "transpose", "reshape",
                           "gather", "split", "cast"])
        if kind == "squeeze" and 1 not in shape:
            kind = "unsqueeze"
        if kind in ("unsqueeze",) and rank >= 5:
            kind = "transpose"
        c = f"k{k}"
        if kind == "slice":
            axis = int(rng.integers(rank))
            dim = shape[axis]
            start, end = int(rng.integers(-dim - 2, dim + 2)), int(rng.integers(-dim - 2, dim + 2))
            step = int(rng.choice([1, 2, -1, -2]))
            nodes += [_const(c + "s", [start]), _const(c + "e", [end]), _const(c + "a", [axis]),
                      _const(c + "p", [step]),
                      helper.make_node("Slice", [src, c + "s", c + "e", c + "a", c + "p"],
                                       [out], name=f"n{k}")]
            s, e = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
            s, e = (min(max(s, 0), dim), min(max(e, 0), dim)) if step > 0 else (
                min(max(s, 0), dim - 1), min(max(e, -1), dim - 1))
            shape[axis] = max(0, -(-(e - s) // step))
        elif kind == "concat":
            axis = int(rng.integers(-rank, rank))
            nodes.append(helper.make_node("Concat", [src, src], [out], name=f"n{k}", axis=axis))
            shape[axis] *= 2
        elif kind == "unsqueeze":
            axis = int(rng.integers(-rank - 1, rank + 1))
            nodes += [_const(c, [axis]), helper.make_node("Unsqueeze", [src, c], [out],
                                                          name=f"n{k}")]
            shape.insert(axis % (rank + 1), 1)
        elif kind == "squeeze":
            axis = shape.index(1)
            nodes += [_const(c, [axis - rank]), helper.make_node("Squeeze", [src, c], [out],
                                                                 name=f"n{k}")]
            shape.pop(axis)
        elif kind == "transpose":
            perm = [int(p) for p in rng.permutation(rank)]
            nodes.append(helper.make_node("Transpose", [src], [out], name=f"n{k}", perm=perm))
            shape = [shape[p] for p in perm]
        elif kind == "reshape":
            nodes += [_const(c, [-1]), helper.make_node("Reshape", [src, c], [out],
                                                        name=f"n{k}")]
            shape = [int(np.prod(shape))]
        elif kind == "gather":
            axis = int(rng.integers(rank))
            if shape[axis] == 0:
                nodes.append(helper.make_node("Identity", [src], [out], name=f"n{k}"))
                continue
            idx = rng.integers(-shape[axis], shape[axis], size=3)
            nodes += [_const(c, idx), helper.make_node("Gather", [src, c], [out], name=f"n{k}",
                                                       axis=axis)]
            shape[axis] = 3
        elif kind == "split":
            axis = int(rng.integers(rank))
            first = int(rng.integers(0, shape[axis] + 1))
            nodes += [_const(c, [first, shape[axis] - first]),
                      helper.make_node("Split", [src, c], [c + "a", c + "b"], name=f"n{k}",
                                       axis=axis),
                      helper.make_node("Identity", [c + "b"], [out], name=f"i{k}")]
            shape[axis] -= first
        else:
            to = int(rng.choice([TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.FLOAT]))
            nodes.append(helper.make_node("Cast", [src], [out], name=f"n{k}", to=to))
        src = out
    return nodes, tuple(shape)


def test_random_constant_chains_fold_as_onnx_reference_computes(tmp_path):
    rng = np.random.default_rng(56)
    checked = 0
    for trial in range(40):
        nodes, shape = _random_chain(rng, int(rng.integers(2, 7)))
        path = _save(tmp_path / f"r{trial}.onnx", nodes, [_init("x", _x((2, 6, 4), trial))],
                     outputs=("w",))
        got, want = _fold(path, "w"), np.asarray(_reference(path, "w"))
        assert got.shape == want.shape == shape, (trial, nodes)
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
        checked += 1
    assert checked == 40
