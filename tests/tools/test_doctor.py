"""The layout doctor (``harness.doctor``): planted mistakes are found, signatures explained.

Each planted mistake is a real misreading: a weights file in the claimed layout is read the
mistaken way (a :mod:`harness.mistakes` transformation), the outputs that reading gives are the
"expected" outputs (rounded to float32, as a float32 framework would give them), and the doctor,
knowing only the file, the claim and those outputs, must name a transformation that gives the
same weights as the planted one, and write corrected weights that reproduce the outputs."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from support.case_factory import case_file as _case_file
from support.case_factory import case_maker

from harness import data, params, reference
from harness.adapters import ADAPTERS
from harness.cli import main
from harness.convert import effective
from harness.doctor import Doctor, diagnose, render
from harness.dtypes import round_to
from harness.layouts import get_layout
from harness.mistakes import catalogue
from harness.npz import load_npz, save_npz
from harness.params import Canonical
from harness.spec import Case

make = case_maker(name="planted", batch=2)


def plant(case: Case, layout: str, ids: list[str]):
    """(native file, inputs, expected outputs, planted trial) for mistakes ``ids``."""
    lay = get_layout(layout)
    native = lay.to_native(params.generate(case), case)
    inputs = data.generate(case)
    by_id = {m.id: m for m in catalogue(case, lay).mistakes}
    missing = [i for i in ids if i not in by_id]
    assert not missing, f"no mistake {missing}; have {sorted(by_id)}"
    probe = Doctor(case, lay, native, inputs, {"y": np.zeros(1)}, tol=None)
    trial = probe.trial(tuple(by_id[i] for i in ids))
    expected = {k: round_to(v, "float32") for k, v in probe.outputs(trial).items()}
    return native, inputs, expected, trial


def same_truth(case: Case, a, b) -> bool:
    """Two trials describe the same framework computation (effective weights, case, data)."""
    if (a.case, a.time_major, a.swap_states) != (b.case, b.time_major, b.swap_states):
        return False
    ea, eb = effective(a.case, Canonical(a.canonical)), effective(b.case, Canonical(b.canonical))
    return ea.keys() == eb.keys() and all(np.allclose(ea[k], eb[k], atol=1e-12) for k in ea)


PLANTED = [
    # (case kwargs, claimed layout, planted mistakes, docs/layouts.md, Reading a divergence
    # signature trap)
    ({}, "keras", ["reading:R:C"], "P1 recurrent blocks transposed"),
    ({"initial_state": "random"}, "keras", ["reading:R:C"], "P1b, nonzero state"),
    ({}, "keras", ["reshape:kernel:reshape-C"], "P2 kernel reshaped, not transposed"),
    ({}, "keras", ["reading:W:C"], "P2b CuDNNLSTM kernel read as x @ K"),
    ({}, "torch", ["order:all:ifog"], "P3 cs231n/Caffe i f o g"),
    ({}, "onnx", ["order:all:iogf"], "P3b torch blocks fed to ONNX unpermuted"),
    ({}, "tf-block-v2", ["order:all:igfo"], "P3c TF1 i j f o read as Keras"),
    ({}, "keras", ["order:W:gifo", "order:b:ofgi"], "W and bias blocks in two orders"),
    ({}, "torch", ["forget:+1"], "P4 run-time forget bias"),
    ({"initial_state": "random"}, "tf-block", ["forget:-1"], "P4b, nonzero c0"),
    ({}, "torch", ["bias:drop-bR"], "P5 bias_hh dropped"),
    ({}, "onnx", ["bias:twice"], "P5b bias counted twice"),
    ({"cell": "gru", "initial_state": "random"}, "torch", ["variant:reset_after"],
     "P6 reset-after weights run reset-before"),
    ({"cell": "gru", "reset_after": False}, "keras", ["variant:reset_after"], "P6, the reverse"),
    ({"cell": "gru"}, "keras", ["order:all:zrn"], "P7 z/r swapped"),
    ({"cell": "gru"}, "torch", ["variant:update"], "P8 update gate inverted"),
    ({"cell": "gru"}, "torch", ["reading:R:TC"], "P9 GRU recurrent blocks transposed"),
    ({"cell": "gru"}, "torch", ["bias:sum-n"], "GRU n biases summed (split vs summed)"),
    ({"peepholes": True}, "onnx", ["order:p:ofi"], "P10b ONNX P read as i f o"),
    ({"initial_state": "random", "input_size": 4}, "torch", ["data:h0-c0"], "P11 (c, h) order"),
    ({"recurrent_activation": "hard_sigmoid_tf_keras"}, "keras",
     ["variant:hard_sigmoid_keras3"], "P12 hard_sigmoid definitions"),
    ({"bidirectional": True}, "torch", ["swap:directions"], "directions swapped"),
    ({"batch": 3, "seq_len": 5}, "torch", ["data:time-major"], "batch- vs time-major input"),
    ({"input_size": 4, "initial_state": "random"}, "torch", ["swap:W-R"], "W and R swapped"),
    ({"bidirectional": True, "num_layers": 2}, "keras", ["order:all:ifog", "reading:R:C"],
     "gate order plus transposed R, 2-layer bidirectional"),
    ({"initial_state": "random"}, "keras", ["order:W:fiog", "order:b:ifog"],
     "two orders with a nonzero state"),
    ({"input_size": 3}, "keras-cudnn", ["reading:W:TC", "forget:+1"],
     "CuDNN kernel read as Keras plus a forget offset"),
]


@pytest.mark.parametrize("kw, layout, ids, trap", PLANTED, ids=[p[3] for p in PLANTED])
def test_doctor_finds_the_planted_mistake(kw: dict, layout: str, ids: list[str], trap: str) -> None:
    case = make(**kw)
    native, inputs, expected, planted = plant(case, layout, ids)
    lay = get_layout(layout)
    dx = diagnose(case, lay, native, inputs, expected)
    assert not dx.claim.ok, "the planted mistake must show"
    assert dx.best is not None, render(dx)
    found = Doctor(case, lay, native, inputs, expected, tol=None).trial(dx.best.hypothesis)
    assert same_truth(case, found, planted), (
        f"{trap}: planted {ids}, found {[m.id for m in dx.best.hypothesis]}")
    if dx.fixed is not None:  # the corrected file, read as the claim, gives the outputs
        assert dx.fixed_error < 1e-5
        assert set(dx.fixed) == set(lay.shapes(dx.fixed_case))


def test_at_least_twenty_planted_mistakes() -> None:
    assert len(PLANTED) >= 20
    assert len({p[3].split()[0] for p in PLANTED if p[3].startswith("P")}) >= 12


def test_signature_of_a_transposed_recurrent_kernel() -> None:
    case = make()
    native, inputs, expected, _ = plant(case, "keras", ["reading:R:C"])
    dx = diagnose(case, get_layout("keras"), native, inputs, expected)
    assert dx.claim.y_ratio[0, 0] <= 1 and (dx.claim.y_ratio[0, 1:] > 1).all()
    text = " ".join(dx.signature)
    assert "exact at t=0, wrong from t=1" in text and "recurrent kernel is wrong" in text
    report = render(dx)
    assert "the framework reads each block as stored (not transposed)" in report
    assert "| recurrent_kernel | [:, H:2H]  | R_f transposed | R_f (as stored, not transposed) |" \
        in report


def test_signature_of_a_gate_order_and_of_a_forward_only_fault() -> None:
    case = make()
    native, inputs, expected, _ = plant(case, "torch", ["order:all:ifog"])
    text = " ".join(diagnose(case, get_layout("torch"), native, inputs, expected).signature)
    assert "wrong from t=0" in text and "gate order" in text
    case = make(bidirectional=True)
    native, inputs, expected, _ = plant(case, "torch", ["swap:directions"])
    expected["y"][:, :, :4] = reference.run(case, get_layout("torch").from_native(native, case),
                                            inputs).y[:, :, :4]
    # nothing reproduces these outputs: the search would run to its budget; only the
    # signature (made before the search) is asked here
    text = " ".join(diagnose(case, get_layout("torch"), native, inputs, expected,
                             budget_s=2).signature)
    assert "the forward direction is exact and the backward one is wrong" in text


def test_claim_that_is_right_needs_nothing() -> None:
    case = make()
    lay = get_layout("torch")
    C = params.generate(case)
    inputs = data.generate(case)
    expected = reference.run(case, C, inputs).named()
    dx = diagnose(case, lay, lay.to_native(C, case), inputs, expected)
    assert dx.claim.ok and dx.best is not None and dx.best.hypothesis == ()
    assert "nothing to fix" in render(dx)


def test_one_layer_h64_diagnosis_takes_seconds() -> None:
    case = make(input_size=16, hidden_size=64, seq_len=20)
    native, inputs, expected, planted = plant(
        case, "keras", ["order:W:gifo", "order:b:ofgi", "reading:R:C"])
    start = time.perf_counter()
    dx = diagnose(case, get_layout("keras"), native, inputs, expected)
    assert time.perf_counter() - start < 15
    found = Doctor(case, get_layout("keras"), native, inputs, expected, tol=None).trial(
        dx.best.hypothesis)
    assert same_truth(case, found, planted)


# Seed 001 ---------------------------------------------------------------------------------------

def test_seed001_cudnnlstm_weights_read_with_the_textbook_formula() -> None:
    """CuDNNLSTM weights (layout keras-cudnn) read as ``x @ kernel + h @ recurrent_kernel +
    b[:4H] + b[4H:]``: right at one unit, wrong from t=1 at two (I=1). The doctor names the
    recurrent kernel and writes weights a Keras LSTM reproduces."""
    for H, fine in ((1, True), (2, False)):
        case = Case(name=f"seed001-h{H}", cell="lstm", input_size=1, hidden_size=H, batch=1,
                    seq_len=10, seed=1)
        cudnn = get_layout("keras-cudnn").to_native(params.generate(case), case)
        truth = get_layout("keras-cudnn").from_native(cudnn, case)
        inputs = data.generate(case)
        expected = {k: round_to(v, "float32") for k, v in
                    reference.run(case, truth, inputs).named().items()}
        textbook = {"kernel": cudnn["kernel"], "recurrent_kernel": cudnn["recurrent_kernel"],
                    "bias": cudnn["bias"][:4 * H] + cudnn["bias"][4 * H:]}
        dx = diagnose(case, get_layout("keras"), textbook, inputs, expected)
        assert dx.claim.ok == fine
        if fine:
            continue
        assert dx.claim.y_ratio[0, 0] <= 1 and (dx.claim.y_ratio[0, 1:] > 1).any()
        assert [m.id for m in dx.best.hypothesis] == ["reading:R:C"]
        assert any("C-order" in text and why == "each W slice is 1x2" for text, why in dx.noops)
        fixed = dx.fixed
        assert np.allclose(fixed["recurrent_kernel"][:, :H], cudnn["recurrent_kernel"][:, :H].T)
        keras = ADAPTERS["keras"]
        if keras.unavailable_reason() is None:  # a real tf_keras LSTM on the corrected weights
            out = keras._run(case, fixed, inputs)
            assert np.abs(out.y - expected["y"]).max() < 1e-5


# Command line -----------------------------------------------------------------------------------

def test_cli_doctor_with_expected_outputs_writes_fixed_weights(tmp_path: Path, capsys) -> None:
    case = make(cell="gru")
    native, _, expected, _ = plant(case, "keras", ["order:all:zrn"])
    save_npz(tmp_path / "w.npz", native)
    save_npz(tmp_path / "out.npz", expected)
    cf = _case_file(tmp_path / "case.yaml", case)
    code = main(["doctor", "--case", str(cf), "--weights", str(tmp_path / "w.npz"), "--layout",
                 "keras", "--expected", str(tmp_path / "out.npz"), "--write-fixed",
                 str(tmp_path / "fixed.npz")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "gate blocks of every tensor are in the order r, z, n, not z, r, n" in out
    fixed = load_npz(tmp_path / "fixed.npz")
    lay = get_layout("keras")
    got = reference.run(case, lay.from_native(fixed, case), data.generate(case)).named()
    assert max(np.abs(got[k] - expected[k]).max() for k in expected) < 1e-5


def test_cli_doctor_exit_1_when_nothing_fits(tmp_path: Path, capsys) -> None:
    case = make()
    lay = get_layout("torch")
    save_npz(tmp_path / "w.npz", lay.to_native(params.generate(case), case))
    rng = np.random.default_rng(0)
    save_npz(tmp_path / "out.npz", {"y": rng.uniform(-1, 1, (2, 6, 4))})
    code = main(["doctor", "--case", str(_case_file(tmp_path / "c.yaml", case)), "--weights",
                 str(tmp_path / "w.npz"), "--layout", "torch", "--expected",
                 str(tmp_path / "out.npz")])
    assert code == 1
    assert "No transformation among the plausible mistakes" in capsys.readouterr().out


def test_cli_doctor_adapter_is_the_source_of_truth(tmp_path: Path, capsys) -> None:
    """BlockLSTMV2 weights claimed to be BlockLSTM (v1, i j f o): the v2 op runs the file as
    its own layout; the doctor finds f and g swapped, and BlockLSTM (v1) really reproduces the
    v2 op's outputs on the corrected file."""
    v1, v2 = ADAPTERS.get("tf-block"), ADAPTERS.get("tf-block-v2")
    if v1 is None or v2 is None or v1.unavailable_reason() or v2.unavailable_reason():
        pytest.skip("TensorFlow block ops unavailable")
    case = make(initial_state="random")
    save_npz(tmp_path / "w.npz", get_layout("tf-block-v2").to_native(params.generate(case), case))
    cf = _case_file(tmp_path / "case.yaml", case)
    code = main(["doctor", "--case", str(cf), "--weights", str(tmp_path / "w.npz"), "--layout",
                 "tf-block", "--adapter", "tf-block-v2", "--write-fixed",
                 str(tmp_path / "fixed.npz")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "gate blocks of every tensor are in the order i, f, g, o, not i, g, f, o" in out
    inputs = data.generate(case)
    want = v2._run(case, load_npz(tmp_path / "w.npz"), inputs)
    got = v1._run(case, load_npz(tmp_path / "fixed.npz"), inputs)
    assert np.abs(got.y - want.y).max() < 1e-5


def test_cli_doctor_says_which_layout_the_file_fits(tmp_path: Path, capsys) -> None:
    case = make()
    save_npz(tmp_path / "w.npz", get_layout("keras-cudnn").to_native(params.generate(case), case))
    save_npz(tmp_path / "out.npz", {"y": np.zeros((2, 6, 4))})
    code = main(["doctor", "--case", str(_case_file(tmp_path / "c.yaml", case)), "--weights",
                 str(tmp_path / "w.npz"), "--layout", "keras", "--expected",
                 str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert code == 2 and "bias" in err and "keras-cudnn" in err


def test_a_bias_half_missing_from_the_file_is_found_and_fixed(tmp_path: Path, capsys) -> None:
    """A Keras bias set from torch's bias_ih alone, the outputs from the torch module (both
    halves): no transformation of the file gives them; the doctor says a bias half is missing
    and writes weights, with the half fitted to the outputs, that reproduce them."""
    case = make(initial_state="random")
    truth = params.generate(case)
    dropped = Canonical({k: (np.zeros_like(v) if "/bR_" in k else v)
                         for k, v in truth.tensors.items()})
    lay = get_layout("keras")
    save_npz(tmp_path / "w.npz", lay.to_native(dropped, case))
    inputs = data.generate(case)
    expected = {k: round_to(v, "float32")
                for k, v in reference.run(case, truth, inputs).named().items()}
    save_npz(tmp_path / "out.npz", expected)
    code = main(["doctor", "--case", str(_case_file(tmp_path / "c.yaml", case)), "--weights",
                 str(tmp_path / "w.npz"), "--layout", "keras", "--expected",
                 str(tmp_path / "out.npz"), "--write-fixed", str(tmp_path / "fixed.npz")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "one half of a split bias pair" in out
    got = reference.run(case, lay.from_native(load_npz(tmp_path / "fixed.npz"), case),
                        inputs).named()
    assert max(np.abs(got[k] - expected[k]).max() for k in expected) < 1e-5
    # the fitted half is the one dropped: the summed bias is torch's bias_ih + bias_hh
    want = effective(case, truth)
    fixed = effective(case, lay.from_native(load_npz(tmp_path / "fixed.npz"), case))
    assert max(np.abs(fixed[k] - want[k]).max() for k in want) < 1e-3


def test_far_misses_are_not_shown_as_near_misses(tmp_path: Path) -> None:
    case = make()
    lay = get_layout("torch")
    native = lay.to_native(params.generate(case), case)
    y = np.random.default_rng(0).uniform(-1, 1, (2, 6, 4))
    dx = diagnose(case, lay, native, data.generate(case), {"y": y}, budget_s=20)
    text = render(dx)
    assert dx.best is None and "Nothing reproduces the outputs" in text
    assert all(f.score.worst <= 10 for f in dx.closest)
    assert "Closest hypotheses" not in text


def test_a_correct_float32_framework_on_trained_like_weights_is_reproduced(tmp_path):
    """onnxruntime on the bundled trained-like weights is 2e-5 from float64, beyond atol but a
    few noise floors: the doctor reads it as the claimed layout reproducing the outputs, by the
    same rule as the run's verdict, not as a mismatch to explain."""
    pytest.importorskip("onnxruntime")
    import shutil

    from harness.cli import main as cli_main
    from harness.doctor import doctor_file

    root = Path(__file__).resolve().parents[2] / "cases" / "trained-like"
    for name in ("trained-like.yaml", "weights.npz"):
        shutil.copy(root / name, tmp_path / name)
    onnx_weights = tmp_path / "onnx.npz"
    assert cli_main(["convert", "--case", str(tmp_path / "trained-like.yaml"), "--from",
                     "torch", "--to", "onnx", str(tmp_path / "weights.npz"),
                     str(onnx_weights)]) == 0
    text, code = doctor_file(str(tmp_path / "trained-like.yaml"), str(onnx_weights), "onnx",
                             adapter="onnxruntime", budget_s=20)
    assert code == 0, text
    assert "reproduces the expected outputs at every step" in text


def test_an_own_process_adapter_is_a_doctors_source(tmp_path):
    """keras3-jax runs in a process of its own (Keras 3 fixes its backend at import): the
    doctor asks and runs it there, as the run does, and reads a planted gate swap in its file."""
    from support.runnable import runnable

    from harness.cli import main as cli_main
    from harness.doctor import doctor_file

    adapter = runnable("keras3-jax")
    root = Path(__file__).resolve().parents[2] / "cases" / "trained-like"
    for name in ("trained-like.yaml", "weights.npz"):
        shutil.copy(root / name, tmp_path / name)
    theirs = tmp_path / "keras.npz"
    assert cli_main(["convert", "--case", str(tmp_path / "trained-like.yaml"), "--from",
                     "torch", "--to", adapter.layout.name, str(tmp_path / "weights.npz"),
                     str(theirs)]) == 0
    text, code = doctor_file(str(tmp_path / "trained-like.yaml"), str(theirs),
                             adapter.layout.name, adapter="keras3-jax", budget_s=20)
    assert code == 0, text
    assert "reproduces the expected outputs at every step" in text


def test_cli_doctor_repro_shows_both_readings_without_the_harness(tmp_path: Path,
                                                                  capsys) -> None:
    """doctor --repro: a planted gate-order mistake, shown by a NumPy-only script where
    rnn-harness cannot be imported: the claimed reading diverges, the corrected one agrees."""
    from support.repro_run import run_repro

    case = make(cell="gru")
    native, _, expected, _ = plant(case, "keras", ["order:all:zrn"])
    save_npz(tmp_path / "w.npz", native)
    save_npz(tmp_path / "out.npz", expected)
    cf = _case_file(tmp_path / "case.yaml", case)
    code = main(["doctor", "--case", str(cf), "--weights", str(tmp_path / "w.npz"), "--layout",
                 "keras", "--expected", str(tmp_path / "out.npz"), "--repro",
                 str(tmp_path / "repro")])
    assert code == 0
    assert "Wrote a reproducer of the mistake" in capsys.readouterr().out
    done = run_repro(tmp_path / "repro")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "order r, z, n, not z, r, n" in done.stdout
    assert "the claimed reading first diverges at y direction 0 t=0" in done.stdout
    assert "corrected reading agrees" in done.stdout
