"""The reference forward on threads (``harness.reference.parallel``) computes what the serial
forward computes: the same bits, or within 4e-15 where a matrix product over fewer rows sums
in another order in BLAS. Small cases stay serial, and so does everything with one BLAS
thread or CuPy arrays.

Threaded plans are forced here on small cases (the automatic plan keeps those serial)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from harness import params, reference
from harness.data import Inputs, generate
from harness.reference import functions, parallel
from harness.reference.parallel import SERIAL, Plan
from harness.spec import Case

ATOL = 4e-15

LSTM = dict(cell="lstm", input_size=5, hidden_size=24)
LSTM_PROJ = dict(cell="lstm", input_size=5, hidden_size=24, proj_size=10, peepholes=True,
                 cell_clip=0.9, proj_clip=0.4, forget_bias=1.0, gate_clip=3.0)
LSTM_CIFG = dict(cell="lstm", input_size=5, hidden_size=24, input_forget=True,
                 recurrent_activation="hard_sigmoid_keras3")
GRU = dict(cell="gru", input_size=5, hidden_size=24)
GRU_BEFORE = dict(cell="gru", input_size=5, hidden_size=24, reset_after=False, gate_clip=2.0)
CELLS = {"lstm": LSTM, "lstm-proj-peep-clips": LSTM_PROJ, "lstm-cifg-hard": LSTM_CIFG,
         "gru": GRU, "gru-reset-before": GRU_BEFORE}

PLANS = {
    "directions": Plan(threads=2),
    "batch-shards": Plan(threads=2, shards=3),
    "projection-ahead": Plan(threads=2, ahead=True),
    "shards-and-ahead": Plan(threads=4, shards=2, ahead=True),
}

LAYOUTS = {
    "bidirectional-lengths": dict(num_layers=2, bidirectional=True,
                                  seq_lengths=[13, 4, 13, 1, 9, 13, 7]),
    "reverse-lengths": dict(num_layers=2, direction="reverse",
                            seq_lengths=[2, 13, 13, 6, 13, 1, 11]),
    "forward-full": dict(num_layers=3),
    "bidirectional-full-zero-state": dict(num_layers=2, bidirectional=True,
                                          initial_state="zeros"),
}


def _case(cell: dict, layout: dict) -> Case:
    base = dict(name="parallel", dtype="float64", initial_state="random", batch=7, seq_len=13)
    return Case(**{**base, **cell, **layout})


def _run(monkeypatch: pytest.MonkeyPatch, plan: Plan, case: Case, dtype: str = "float64"):
    monkeypatch.setattr(parallel, "plan", lambda *args: plan)
    return reference.run(case, params.generate(case), generate(case), dtype=dtype)


def _assert_close(got, want, plan: str, atol: float) -> None:
    __tracebackhide__ = True
    for name, w in want.named().items():
        g = got.named()[name]
        assert g.shape == w.shape, f"{name}: got shape {g.shape}, but should be {w.shape} [{plan}]"
        err = float(np.abs(g - w).max()) if w.size else 0.0
        assert err <= atol, f"{name}: max |threaded - serial| = {err:.1e} > {atol:.0e} [{plan}]"


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
@pytest.mark.parametrize("plan", PLANS.values(), ids=PLANS.keys())
def test_threaded_forward_matches_serial(monkeypatch, plan: Plan, cell: dict,
                                         layout: dict) -> None:
    case = _case(cell, layout)
    serial = _run(monkeypatch, SERIAL, case)
    threaded = _run(monkeypatch, plan, case)
    _assert_close(threaded, serial, repr(plan), ATOL)


@pytest.mark.parametrize("plan", PLANS.values(), ids=PLANS.keys())
def test_threaded_noise_floor_matches_serial(monkeypatch, plan: Plan) -> None:
    # rounded to float32 after every operation: a GEMM's last-bit difference in float64
    # rarely survives the rounding, and may flip it by one float32 ulp where it does
    case = _case(LSTM_PROJ, LAYOUTS["bidirectional-lengths"])
    serial = _run(monkeypatch, SERIAL, case, dtype="float32")
    threaded = _run(monkeypatch, plan, case, dtype="float32")
    _assert_close(threaded, serial, repr(plan), atol=float(np.finfo(np.float32).eps))


def test_a_large_case_threaded_automatically_matches_serial(monkeypatch) -> None:
    case = Case(name="large", cell="gru", dtype="float64", initial_state="random",
                input_size=32, hidden_size=256, batch=8, seq_len=20, num_layers=1,
                bidirectional=True, seq_lengths=[20, 3, 20, 17, 20, 1, 20, 9])
    monkeypatch.setattr(parallel, "blas_threads", lambda: 2)
    assert parallel.plan(np.zeros(1), 8, 2, 256) == Plan(threads=2)
    canonical, inputs = params.generate(case), generate(case)
    threaded = reference.run(case, canonical, inputs)
    monkeypatch.setattr(parallel, "blas_threads", lambda: 1)
    serial = reference.run(case, canonical, inputs)
    _assert_close(threaded, serial, "automatic", ATOL)


@pytest.mark.parametrize("threads", [2, 4, 16])
@pytest.mark.parametrize("batch,hidden", [(4, 16), (64, 32), (512, 8), (16, 64), (128, 64),
                                          (2, 1024), (8, 128)])
@pytest.mark.parametrize("directions", [1, 2])
def test_small_cases_stay_serial(monkeypatch, threads: int, batch: int, hidden: int,
                                 directions: int) -> None:
    monkeypatch.setattr(parallel, "blas_threads", lambda: threads)
    assert parallel.plan(np.zeros(1), batch, directions, hidden) == SERIAL


@pytest.mark.parametrize("directions,plan", [(1, Plan(2, 1, True)), (2, Plan(2, 1, False)),
                                             (1, Plan(4, 2, True)), (2, Plan(4, 1, True)),
                                             (2, Plan(3, 1, False))])
def test_large_cases_use_the_blas_threads(monkeypatch, directions: int, plan: Plan) -> None:
    monkeypatch.setattr(parallel, "blas_threads", lambda: plan.threads)
    assert parallel.plan(np.zeros(1), 32, directions, 256) == plan


def test_one_blas_thread_or_a_non_numpy_array_is_serial(monkeypatch) -> None:
    monkeypatch.setattr(parallel, "blas_threads", lambda: 1)
    assert parallel.plan(np.zeros(1), 32, 2, 256) == SERIAL
    monkeypatch.setattr(parallel, "blas_threads", lambda: 8)

    class NotNumPy:  # stands for a CuPy array
        pass

    assert parallel.plan(NotNumPy(), 32, 2, 256) == SERIAL


def test_serial_plan_starts_no_thread_and_leaves_blas_alone(monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("the serial path must not start threads or limit BLAS")

    monkeypatch.setattr(parallel, "ThreadPoolExecutor", forbidden)
    monkeypatch.setattr(parallel, "_blas_limited_to", forbidden)
    monkeypatch.setattr(parallel, "blas_threads", lambda: 1)
    case = _case(LSTM, LAYOUTS["bidirectional-lengths"])
    reference.run(case, params.generate(case), generate(case))


@pytest.mark.parametrize("plan,workers,helpers", [(Plan(threads=2), 2, 0),
                                                  (Plan(threads=2, ahead=True), 0, 1),
                                                  (Plan(threads=4, shards=2, ahead=True), 2, 2)])
def test_pieces_and_projections_run_where_the_plan_says(monkeypatch, plan: Plan, workers: int,
                                                         helpers: int) -> None:
    """``workers`` threads run the pieces (0: the caller does), each with its own helper."""
    seen: list[tuple[int, object]] = []

    def spy(cell):
        def run_cell(*args, helper=None, **kwargs):
            seen.append((threading.get_ident(), helper))
            return cell(*args, helper=helper, **kwargs)
        return run_cell

    monkeypatch.setattr(reference, "CELLS", {k: spy(v) for k, v in reference.CELLS.items()})
    case = _case(LSTM, LAYOUTS["forward-full"] if helpers else LAYOUTS["bidirectional-lengths"])
    _run(monkeypatch, plan, case)
    idents = {ident for ident, _ in seen}
    if workers:
        assert threading.get_ident() not in idents and len(idents) <= workers
    else:
        assert idents == {threading.get_ident()}
    assert len({id(h) for _, h in seen if h is not None}) == helpers


def test_a_failing_piece_raises_in_the_caller(monkeypatch) -> None:
    case = _case(GRU, LAYOUTS["bidirectional-full-zero-state"])
    canonical, inputs = params.generate(case), generate(case)
    bad = Inputs(inputs.x, inputs.h0[:, :3], inputs.c0, inputs.seq_lengths)  # h0 rows short
    monkeypatch.setattr(parallel, "plan", lambda *args: Plan(threads=2, shards=2))
    with pytest.raises(ValueError):
        reference.run(case, canonical, bad)


@pytest.mark.parametrize("ahead", [1, 2, 5])
@pytest.mark.parametrize("batch,T,block_rows", [(3, 10, 7), (4, 9, 64), (5, 1, 64), (2, 6, 1)])
def test_input_projections_computed_ahead_are_the_same(monkeypatch, ahead: int, batch: int,
                                                       T: int, block_rows: int) -> None:
    monkeypatch.setattr(functions, "AHEAD", ahead)
    rng = np.random.default_rng(0)
    x, W, b = rng.normal(size=(batch, T, 6)), rng.normal(size=(4, 5, 6)), rng.normal(size=(4, 5))
    q_ = functions.in_place(functions.exact)
    WT = functions.transposed_side_by_side(W)  # [6, 4 x 5]
    want = [a.copy() for a in functions.input_projections(x, WT, b, q_, block_rows=block_rows)]
    with ThreadPoolExecutor(1) as helper:
        got = [a.copy() for a in functions.input_projections(x, WT, b, q_, block_rows=block_rows,
                                                             helper=helper)]
    assert len(got) == len(want) == T
    for t, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(g, w, err_msg=f"step {t}")
        # and each is W_k x_t + b_k, gate-major [4, B, 5]
        np.testing.assert_allclose(w, np.einsum("ghi,bi->gbh", W, x[:, t]) + b[:, None],
                                   rtol=1e-12, atol=1e-12, err_msg=f"step {t}")


def test_row_shards_cover_the_batch_in_order() -> None:
    for batch in (1, 7, 8, 33):
        for shards in range(1, min(batch, 5) + 1):
            rows = Plan(threads=shards, shards=shards).row_shards(batch)
            assert [r.start for r in rows] == [0] + [r.stop for r in rows[:-1]]
            assert rows[-1].stop == batch and all(r.stop > r.start for r in rows)
