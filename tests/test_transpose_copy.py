"""The compiled transposed copy of the layouts against NumPy's ``dst[...] = src.T``, on its
own and inside every CPU layout's ``to_native`` on a large case."""

from __future__ import annotations

import numpy as np
import pytest

from harness.layouts import LAYOUTS, get_layout
from harness.layouts.transpose import transpose_into
from harness.params import generate
from harness.spec import Case


@pytest.fixture(params=["omatcopy", "tiled"])
def path(request, monkeypatch):
    """Both ways of the copy: OpenBLAS's omatcopy (where NumPy's OpenBLAS has it) and the
    compiled tiled copy; returns (which, the tiled copy's calls)."""
    from harness.layouts import transpose

    if request.param == "tiled":
        monkeypatch.setattr(transpose, "omatcopy", lambda: {})
    elif not transpose.omatcopy():
        pytest.skip("NumPy's BLAS is not scipy-openblas64: no omatcopy here")
    calls = []
    tiled = transpose._transpose
    monkeypatch.setattr(transpose, "_transpose", lambda *a: calls.append(1) or tiled(*a))
    return request.param, calls


@pytest.mark.parametrize("src_dtype, dtype", [(np.float64, np.float64), (np.float32, np.float32),
                                              (np.float64, np.float32)])
@pytest.mark.parametrize("shape", [(128, 256), (16, 16), (100, 37), (1, 5), (33, 1), (300, 257)])
def test_transposed_copy_into_a_slice_touches_only_the_slice(shape, src_dtype, dtype, path):
    """Bit for bit (-0.0, a subnormal, the extremes included); a float64 block into float32 is
    rounded as NumPy's cast rounds it, by the tiled copy whichever path is asked for."""
    rng = np.random.default_rng(0)
    src = rng.standard_normal(shape).astype(src_dtype)
    info = np.finfo(src_dtype)
    src.reshape(-1)[:4] = [-0.0, info.smallest_subnormal, info.max, -info.tiny][:src.size]
    base = np.zeros((2, 300, 400), dtype=dtype)
    dst = base[1, 7:7 + shape[1], 50:50 + shape[0]]
    assert transpose_into(dst, src)
    which, tiled = path
    assert len(tiled) == (0 if which == "omatcopy" and src_dtype == dtype else 1)
    with np.errstate(over="ignore"):  # float64's max is inf in float32, both ways
        want = src.T.astype(dtype)
    assert dst.tobytes() == np.ascontiguousarray(want).tobytes()
    dst[...] = 0.0
    assert not base.any()


def test_views_it_cannot_write_are_left_to_numpy():
    src = np.ones((4, 3))
    assert not transpose_into(np.zeros((6, 8))[:, ::2][:3], src)  # rows not contiguous
    assert not transpose_into(np.zeros((3, 4)), src)  # no base array
    assert not transpose_into(np.zeros((3, 5), dtype=np.float16)[:, :4], src)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("layout", ["keras", "tf-block", "tf-legacy", "onnx", "torch"])
def test_large_layouts_are_numpys_copies(layout, dtype, monkeypatch):
    """Blocks of 160 x 192 and up go through the compiled copy: every native tensor is the
    same as with NumPy's copies only, and in the case dtype the same as float64 natives cast
    (the adapters' ``native_in_case_dtype``)."""
    from harness.layouts import base

    case = Case(name="big", cell="lstm", input_size=192, hidden_size=160, num_layers=2,
                bidirectional=True, batch=1, seq_len=2, dtype="float64")
    canonical = generate(case)
    lay = get_layout(layout)
    got = lay.to_native(canonical, case, dtype)
    monkeypatch.setattr(base, "TRANSPOSE_MIN_SIZE", np.inf)
    want = {k: v.astype(dtype) for k, v in lay.to_native(canonical, case).items()}
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == dtype
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_casts_are_made_once_and_stay_out_of_pickles():
    """A case's adapters copy their natives from one read-only cast of the canonical tensors,
    laid end to end in one array; a worker process gets the tensors without it."""
    import pickle

    case = Case(name="c", cell="gru", input_size=3, hidden_size=4, num_layers=2, batch=1,
                seq_len=2, dtype="float32")
    canonical = generate(case)
    assert canonical.cast(np.float64) is canonical.tensors
    cast = canonical.cast(np.float32)
    assert canonical.cast(np.dtype("float32")) is cast
    assert all(cast[k].dtype == np.float32 and (cast[k] == v).all() and not cast[k].flags.writeable
               for k, v in canonical.tensors.items())
    keys = list(canonical.tensors)
    whole = canonical.span(np.float32, tuple(keys))
    np.testing.assert_array_equal(whole, np.concatenate([v.ravel() for v in cast.values()]))
    assert np.shares_memory(whole, cast[keys[0]]) and not whole.flags.writeable
    assert canonical.span(np.float32, tuple(keys[1:3])).size == cast[keys[1]].size * 2
    assert canonical.span(np.float32, (keys[0], keys[2])) is None  # not one after the other
    f64 = canonical.span(np.float64, (keys[0],))  # float64: a copy of the tensors for it
    assert not np.shares_memory(f64, canonical.tensors[keys[0]])
    np.testing.assert_array_equal(f64, canonical.tensors[keys[0]].ravel())
    assert pickle.loads(pickle.dumps(canonical))._cast == {}


def _kinds(i: int, h: int, p: int) -> list[dict]:
    """Four kinds of case at input size ~i, hidden size ~h: a folded forget bias, projection
    (p) with peepholes, GRU reset-after and reset-before."""
    return [
        dict(cell="lstm", input_size=i, hidden_size=h, num_layers=2, bidirectional=True,
             forget_bias=1.0),
        dict(cell="lstm", input_size=i + 2, hidden_size=h, num_layers=2, bidirectional=True,
             proj_size=p, peepholes=True),
        dict(cell="gru", input_size=i, hidden_size=h, num_layers=2, bidirectional=True),
        dict(cell="gru", input_size=i - 1, hidden_size=h - 1, reset_after=False),
    ]


def _placed(lay, canonical, case, dtype) -> dict[str, np.ndarray]:
    """What the placements put in the natives, one by one and plainly: each block (or the
    float64 sum of its blocks, plus a folded forget bias) rounded to ``dtype`` where it is
    stored."""
    native = {}
    for t in lay.tensors(case):
        arr = np.full(t.shape, np.nan, dtype=dtype)
        for pl in t.placements:
            value = sum(canonical[s] for s in pl.sources)
            value = value + case.forget_bias if pl.fold_forget_bias else value
            dst = arr[pl.index]
            arr[pl.index] = {"copy": value, "transpose": value.T,
                             "reshape": value.reshape(dst.shape)}[pl.transform]
        native[t.name] = arr
    return native


SIZES = [("small", f) for f in _kinds(3, 4, 3)] + [("large", f) for f in _kinds(150, 130, 129)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("size,fields", SIZES, ids=[f"{s}-{f['cell']}" for s, f in SIZES])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_natives_are_what_the_placements_place(layout, size, fields, dtype):
    """A small case's natives are placed block by block; a large case's come from one
    concatenation of the cast blocks per run of blocks that land in C order on a contiguous
    slice, the rest placed one by one. Either way: the same tensors, shapes, dtype and values as the
    placements put there one by one (summed biases and a folded forget bias added up in
    float64 and rounded once)."""
    from harness.layouts import base

    lay = get_layout(layout)
    case = Case(name=size, batch=1, seq_len=2, dtype="float64", **fields)
    if case.cell not in lay.cells:
        pytest.skip(f"{layout} holds no {case.cell}")
    try:
        lay.tensors(case)
    except Exception as exc:  # a layout that cannot hold the case (e.g. cuDNN peepholes)
        pytest.skip(f"{layout}: {exc}")
    canonical = generate(case)
    got = lay.to_native(canonical, case, dtype)
    plan, placements = base._plan(lay, case), sum(len(t.placements) for t in lay.tensors(case))
    assert len(plan.rest) + sum(len(keys) for *_, keys in plan.runs) == placements
    assert size == "large" or not plan.runs  # small: one by one
    shared = lay.to_native(canonical, case, dtype, shared=True)
    want = _placed(lay, canonical, case, dtype)
    assert list(got) == list(want) == list(shared)
    for k in want:
        for natives in (got, shared):
            assert natives[k].dtype == want[k].dtype and natives[k].shape == want[k].shape, k
            np.testing.assert_array_equal(natives[k], want[k], err_msg=k)
        assert got[k].flags.writeable, k  # made anew unless shared


def test_runs_cover_torch_onnx_and_cudnn_weights_whole():
    """torch's and ONNX's natives are canonical blocks laid end to end: a run a tensor and
    nothing placed one by one; torch's lie so in the cast too, so shared natives view it.
    Keras' transposed kernels are not runs."""
    from harness.layouts import base

    case = Case(name="large", cell="lstm", input_size=150, hidden_size=130, num_layers=2,
                bidirectional=True, batch=1, seq_len=2)
    for name in ("torch", "onnx"):
        plan = base._plan(get_layout(name), case)
        assert not plan.rest, name
        whole = [(k, 0, int(np.prod(shape))) for k, (_, shape) in enumerate(plan.tensors)]
        assert [run[:3] for run in plan.runs] == whole, name  # one run a tensor
    canonical = generate(case)
    shared = get_layout("torch").to_native(canonical, case, np.float32, shared=True)
    cast = canonical.span(np.float32, tuple(canonical.tensors))  # all of the cast
    assert all(np.shares_memory(v, cast) and not v.flags.writeable
               for v in shared.values())  # views of the cast, no copy
    onnx = get_layout("onnx").to_native(canonical, case, np.float32, shared=True)
    assert all(v.flags.writeable for v in onnx.values())  # gates i o f c: not as in the cast
    keras = base._plan(get_layout("keras"), case)
    assert sum(pl.transform == "transpose" for _, pl in keras.rest) == 32  # W, R: 4 gates x 4
    assert not any("/W_" in k or "/R_" in k for *_, keys in keras.runs for k in keys)
