"""The divergence rows of a real case against direct per-slice NumPy on the same arrays (every
output, adapter outputs in either memory order), ULPs against np.spacing, the noise floor's
ratio, and the float64 reference computed once per case."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from harness import compare, reference
from harness.compare import Tolerance, divergence
from harness.data import Gradients, Outputs
from harness.dtypes import FORMATS, ulp
from harness.prepare import prepare
from harness.spec import Case


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_ulp_is_the_spacing_of_the_format(dtype):
    """ulp(|x|) is the distance from |x| to the next larger number of the format, for every
    normal |x| of that format (np.spacing in the format itself)."""
    fmt = FORMATS[dtype]
    rng = np.random.default_rng(3)
    lo, hi = fmt.min_exponent, -fmt.min_exponent
    x = rng.uniform(1, 2, 4000) * 2.0 ** rng.integers(lo, hi, 4000)
    x = np.concatenate([x, 2.0 ** np.arange(lo, hi)])  # binade edges
    x = x.astype(fmt.numpy)  # representable numbers of the format
    x = x[np.isfinite(x.astype(np.float64))]
    spacing = (np.nextafter(x, np.asarray(np.inf, dtype=fmt.numpy)).astype(np.float64)
               - x.astype(np.float64)) if dtype == "bfloat16" else np.spacing(x).astype(np.float64)
    assert np.array_equal(ulp(x.astype(np.float64), dtype), spacing)
    assert np.array_equal(ulp(-x.astype(np.float64), dtype), spacing)
    # below the smallest normal: the normal spacing, and zero has one too
    assert ulp(np.array([0.0, fmt.tiny / 4]), dtype).tolist() == [fmt.tiny * fmt.eps] * 2
    assert ml_dtypes.finfo(ml_dtypes.bfloat16).nmant == FORMATS["bfloat16"].mantissa_bits


def direct_rows(a: np.ndarray, r: np.ndarray, floor: np.ndarray, tol: Tolerance, dtype: str):
    """max_abs, max_rel, mean_abs, max_ulp, tol_ratio, noise_floor of one [B, F] slice."""
    err = np.abs(a - r)
    fmt = FORMATS[dtype]
    ulps = np.array([ulp(np.array([v]), dtype)[0] for v in r.ravel()]).reshape(r.shape)
    return [err.max(), (err / np.maximum(np.abs(r), fmt.eps)).max(), err.mean(),
            (err / ulps).max(), (err / (tol.atol + tol.rtol * np.abs(r))).max(),
            np.abs(floor - r).max()]


def noisy(out: Outputs, scale: float, order: str = "C") -> Outputs:
    """The reference plus relative noise, every array in memory ``order`` (an adapter may
    return transposed views)."""
    rng = np.random.default_rng(7)

    def j(x):
        if x is None:
            return None
        return np.asarray(x * (1 + scale * rng.standard_normal(x.shape)), order=order)

    g = out.grads
    grads = None if g is None else Gradients(j(g.dx), j(g.dh0), j(g.dc0),
                                             {k: j(v) for k, v in g.params.items()})
    return Outputs(y=j(out.y), h_n=j(out.h_n), c_n=j(out.c_n),
                   y_layers=[j(y) for y in out.y_layers], grads=grads)


BIG = dict(cell="lstm", input_size=5, hidden_size=48, num_layers=2, bidirectional=True,
           batch=40, seq_len=40, seq_lengths=[40, 17] * 20, dtype="float32", gradients=True)


@pytest.mark.parametrize("order", ["C", "F"])
def test_rows_equal_direct_computation_per_slice(order):
    case = Case(name="big", **BIG)
    prep = prepare(case)
    ref, floor = prep.reference, prep.noise_floor
    out = noisy(ref, 1e-6, order)
    tol = Tolerance(1e-6, 1e-6)
    rows = divergence(case, "x", out, ref, tol, floor).rows
    metrics = ["max_abs", "max_rel", "mean_abs", "max_ulp", "tol_ratio", "noise_floor"]
    F = case.out_size
    checked = 0
    for layer in range(case.num_layers):
        for d in case.directions:
            for t in (0, 16, 17, case.seq_len - 1):
                row = rows[(rows.output == "y") & (rows.layer == layer) & (rows.direction == d)
                           & (rows.t == t)]
                sl = (slice(None), t, slice(d * F, (d + 1) * F))
                want = direct_rows(out.y_layers[layer][sl], ref.y_layers[layer][sl],
                                   floor.y_layers[layer][sl], tol, case.dtype)
                got = row[metrics].to_numpy()[0]
                np.testing.assert_allclose(got, want, rtol=1e-12)
                exact = [0, 1, 3, 4, 5]  # maxima: the same bits as the quotients here
                np.testing.assert_array_equal(got[exact], np.asarray(want)[exact])
                checked += 1
            s = layer * 2 + d
            row = rows[(rows.output == "c_n") & (rows.layer == layer) & (rows.direction == d)]
            want = direct_rows(out.c_n[s], ref.c_n[s], floor.c_n[s], tol, case.dtype)
            np.testing.assert_allclose(row[metrics].to_numpy()[0], want, rtol=1e-12)
            k = f"layer{layer}/{['forward', 'backward'][d]}/R_f"
            row = rows[(rows.output == "dR_f") & (rows.layer == layer) & (rows.direction == d)]
            want = direct_rows(out.grads.params[k], ref.grads.params[k],
                               floor.grads.params[k], tol, case.dtype)
            np.testing.assert_allclose(row[metrics].to_numpy()[0], want, rtol=1e-12)
    for t in (0, 39):
        row = rows[(rows.output == "dx") & (rows.t == t)]
        want = direct_rows(out.grads.dx[:, t], ref.grads.dx[:, t], floor.grads.dx[:, t], tol,
                           case.dtype)
        np.testing.assert_allclose(row[metrics].to_numpy()[0], want, rtol=1e-12)
    assert checked == 16
    # every metric is nonzero somewhere: the noise reached each kind of row
    assert (rows.groupby("output")["max_abs"].max() > 0).all()


def test_floor_ratio_is_max_abs_over_the_noise_floor():
    """floor_ratio = max_abs / noise_floor; where the floor is 0, inf if max_abs > 0 (1 if
    both are 0); NaN for an output without a floor (h_n here)."""
    case = Case(name="fr", cell="lstm", input_size=3, hidden_size=4, batch=2, seq_len=3,
                dtype="float32")
    ref = prepare(case).reference
    y = ref.y.copy()
    y[:, 0] += 1e-6  # t = 0 off, t = 1, 2 exact
    out = Outputs(y=y, h_n=ref.h_n + 1e-6, c_n=ref.c_n.copy())
    fy = ref.y.copy()
    fy[:, 0] += 4e-6  # floor 4e-6 at t = 0
    fy[:, 1] += 1e-7  # floor 1e-7 at t = 1, where max_abs is 0
    floor = Outputs(y=fy, h_n=None, c_n=ref.c_n + 2e-6)
    rows = divergence(case, "x", out, ref, Tolerance(1e-5, 0.0), floor).rows
    got = rows.set_index(["output", "t"])["floor_ratio"]
    want_y = [1e-6 / 4e-6, 0.0]
    np.testing.assert_allclose([got["y", 0], got["y", 1]], want_y, rtol=1e-6, atol=1e-12)
    assert np.isinf(rows.loc[rows["output"] == "y", "floor_ratio"]).sum() == 0
    assert np.isnan(rows.loc[rows["output"] == "h_n", "floor_ratio"]).all()
    assert (rows.loc[rows["output"] == "c_n", "floor_ratio"] == 0.0).all()
    # a floor of 0: inf where the adapter is off, 1 where it is exact too
    zero = Outputs(y=ref.y.copy(), h_n=ref.h_n.copy(), c_n=ref.c_n.copy())
    rows = divergence(case, "x", out, ref, Tolerance(1e-5, 0.0), zero).rows
    y_rows = rows[rows["output"] == "y"].set_index("t")["floor_ratio"]
    assert np.isinf(y_rows[0]) and y_rows[1] == 1.0 and y_rows[2] == 1.0
    assert np.isinf(rows.loc[rows["output"] == "h_n", "floor_ratio"]).all()
    assert (rows.loc[rows["output"] == "c_n", "floor_ratio"] == 1.0).all()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_reference_is_computed_once_per_case(monkeypatch, dtype):
    """prepare computes the float64 reference and, in another dtype, the noise floor (in
    float64 the noise floor is the reference); the reference and noise-floor pairs take
    those outputs, the very values their adapters would compute, instead of computing them
    again."""
    from harness.adapters.reference import NoiseFloor, Reference
    from harness.pairs import run_pair

    calls = []
    run, gradients = reference.run, reference.gradients

    def counted(fn, name):
        def call(*args, **kwargs):
            calls.append((name, kwargs.get("dtype", "float64")))
            return fn(*args, **kwargs)
        return call

    monkeypatch.setattr(reference, "run", counted(run, "run"))
    monkeypatch.setattr(reference, "gradients", counted(gradients, "gradients"))
    case = Case(name="once", cell="lstm", input_size=3, hidden_size=4, batch=2, seq_len=3,
                bidirectional=True, gradients=True, dtype=dtype)
    prep = prepare(case)
    want = [("run", "float64"), ("gradients", "float64")]
    if dtype != "float64":
        want += [("run", dtype), ("gradients", dtype)]
    assert calls == want
    assert (prep.noise_floor is prep.reference) == (dtype == "float64")

    base = run_pair(prep, Reference())
    floor = run_pair(prep, NoiseFloor())
    assert calls == want  # nothing computed again
    assert base.status == compare.BASELINE and base.outputs is prep.reference
    assert floor.status == compare.PASS and floor.outputs is prep.noise_floor
    rows = floor.rows
    if dtype == "float64":
        assert (rows["max_abs"] == 0).all() and (rows["floor_ratio"] == 1).all()
    else:
        assert (rows["max_abs"] == rows["noise_floor"]).all() and (rows["max_abs"] > 0).any()

    monkeypatch.setattr(reference, "run", run)
    monkeypatch.setattr(reference, "gradients", gradients)
    for adapter, prepared in ((Reference(), prep.reference), (NoiseFloor(), prep.noise_floor)):
        out, _ = adapter.run(case, prep.canonical, prep.inputs)
        for name, value in out.saved().items():
            np.testing.assert_array_equal(value, prepared.saved()[name], err_msg=name)
