"""The float64 reference backward pass (``harness/reference/backward.py``).

1. Central differences of the loss of ``harness.data`` (L = Σ dy ⊙ y + Σ dh_n ⊙ h_n +
   Σ dc_n ⊙ c_n), evaluated with the *forward* reference (``reference.run``, independent of the
   backward's own forward), for dx, dh0, dc0 and every canonical block, over cases that cover
   every feature. Per element rel = |a − n| / max(|a| + |n|, TINY); the max must be <= 1e-7
   (seed 002's cs231n checks ask for "around 1e-8 or less"). The derivative is the 5-point
   stencil (f(−2ε) − 8 f(−ε) + 8 f(ε) − f(2ε)) / 12ε, whose truncation error is O(ε⁴).
   Clips and hard sigmoids have kinks: a stencil whose outer points (±2ε) see another clip
   pattern than the unperturbed forward (the backward modules' ``kinks``) is retried with a
   smaller ε; an element whose stencil cannot avoid a kink is left out and counted (a handful
   at most).
2. PyTorch CPU autograd in float64 (``nn.LSTM`` with proj_size, bidirectional, 2 layers,
   packed variable lengths, random h0/c0; ``nn.GRU``, reset-after), its parameter gradients
   mapped to canonical through ``get_layout("torch").grads_from_native``.
3. Seed 002 prints no gradient values (its notebook cells have no outputs, and its inputs are
   random), so there is no independent set of gradient numbers to check against.
4. Planted mistakes (peepholes dropped from the backward; the tf_keras hard sigmoid's slope
   taken from Keras 3) must make check 1 fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import params, reference
from harness.data import Inputs, generate
from harness.dtypes import round_to
from harness.params import Canonical
from harness.reference import backward as backward_module
from harness.reference import lstm_backward
from harness.reference.backward import backward
from harness.reference.functions import FLOAT64, Precision
from harness.reference.tape import Tape
from harness.spec import Case

RTOL = 1e-7  # seed 002: "You should see errors around 1e-8 or less"
TINY = 1e-5  # below this |a| + |n| the check is an absolute one (the stencil's noise ~1e-12)
EPS = (1e-3, 1e-4, 1e-5)  # tried in turn when a stencil crosses a kink

BASE = dict(name="grad", dtype="float64", gradients=True, initial_state="random", input_size=2,
            hidden_size=3, batch=2, seq_len=4)
LOUD = dict(weights={"scale": 1.5}, inputs={"scale": 2.0})  # pre-activations past ±3

CASES = {
    "lstm": dict(cell="lstm"),
    "lstm-zero-state": dict(cell="lstm", initial_state="zeros"),
    "lstm-peepholes": dict(cell="lstm", peepholes=True),
    "lstm-proj-clip": dict(cell="lstm", proj_size=2, proj_clip=0.15),
    "lstm-cell-clip": dict(cell="lstm", cell_clip=0.4),
    "lstm-gate-clip": dict(cell="lstm", gate_clip=0.6, peepholes=True),
    "lstm-input-forget": dict(cell="lstm", input_forget=True, peepholes=True),
    "lstm-forget-bias": dict(cell="lstm", forget_bias=1.0),
    "lstm-hard-tf-keras": dict(cell="lstm", recurrent_activation="hard_sigmoid_tf_keras",
                               **LOUD),
    "lstm-hard-keras3": dict(cell="lstm", recurrent_activation="hard_sigmoid_keras3", **LOUD),
    "lstm-reverse-lengths": dict(cell="lstm", direction="reverse", batch=3, seq_len=5,
                                 seq_lengths=[5, 2, 4], peepholes=True),
    "lstm-bi-2layers-everything": dict(
        cell="lstm", num_layers=2, bidirectional=True, batch=3, seq_len=5,
        seq_lengths=[3, 5, 1], peepholes=True, proj_size=2, proj_clip=0.1, cell_clip=0.3,
        gate_clip=0.8, forget_bias=0.5),
    "gru": dict(cell="gru"),
    "gru-reset-before": dict(cell="gru", reset_after=False),
    "gru-gate-clip": dict(cell="gru", gate_clip=0.5),
    "gru-hard-tf-keras": dict(cell="gru", recurrent_activation="hard_sigmoid_tf_keras", **LOUD),
    "gru-hard-keras3-reset-before": dict(cell="gru", reset_after=False,
                                         recurrent_activation="hard_sigmoid_keras3", **LOUD),
    "gru-reverse-lengths": dict(cell="gru", direction="reverse", batch=3, seq_len=5,
                                seq_lengths=[2, 5, 3]),
    "gru-bi-2layers-lengths": dict(cell="gru", num_layers=2, bidirectional=True, batch=3,
                                   seq_len=5, seq_lengths=[4, 1, 5], gate_clip=0.6),
    "gru-bi-2layers-reset-before": dict(cell="gru", num_layers=2, bidirectional=True,
                                        reset_after=False, seq_lengths=[4, 2]),
}


def make_case(name: str) -> Case:
    return Case(**{**BASE, **CASES[name], "name": name})


# Variables of the loss: "x", "h0", "c0" and the canonical keys.
def variables(canonical: Canonical, inputs: Inputs) -> dict[str, np.ndarray]:
    out = {"x": inputs.x, "h0": inputs.h0}
    if inputs.c0 is not None:
        out["c0"] = inputs.c0
    return out | canonical.tensors


def rebuild(v: dict[str, np.ndarray], inputs: Inputs) -> tuple[Canonical, Inputs]:
    canonical = Canonical({k: a for k, a in v.items() if "/" in k})
    new = Inputs(v["x"], v["h0"], v.get("c0"), inputs.seq_lengths, inputs.dy, inputs.dh_n,
                 inputs.dc_n)
    return canonical, new


def loss(case: Case, canonical: Canonical, inputs: Inputs) -> float:
    out = reference.run(case, canonical, inputs)
    total = np.sum(inputs.dy * out.y) + np.sum(inputs.dh_n * out.h_n)
    if out.c_n is not None:
        total += np.sum(inputs.dc_n * out.c_n)
    return float(total)


def tapes_of(case: Case, canonical: Canonical, inputs: Inputs) -> list[Tape]:
    tapes: list[Tape] = []
    reference.forward(case, canonical, inputs, FLOAT64, tapes)
    return tapes


def kinks(case: Case, tape: Tape) -> dict[str, np.ndarray]:
    return backward_module.CELLS[case.cell].kinks(case, tape)


def clip_pattern(case: Case, canonical: Canonical, inputs: Inputs) -> list[np.ndarray]:
    return [m for tape in tapes_of(case, canonical, inputs) for m in kinks(case, tape).values()]


def has_kinks(case: Case) -> bool:
    return (case.gate_clip is not None or case.cell_clip is not None
            or case.proj_clip is not None or case.recurrent_activation != "sigmoid")


def numerical_gradients(case: Case, canonical: Canonical, inputs: Inputs
                        ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Central differences of the loss for every variable; and where a kink could not be
    avoided (bool, per variable)."""
    base = variables(canonical, inputs)
    kinks = has_kinks(case)
    pattern = clip_pattern(case, canonical, inputs) if kinks else None
    grads, skipped = {}, {}
    for name, value in base.items():
        g = np.zeros_like(value)
        skip = np.zeros(value.shape, dtype=bool)
        for idx in np.ndindex(value.shape):
            for eps in EPS:
                f, same = [], True
                for step in (-2, -1, 1, 2):
                    moved = value.copy()
                    moved[idx] += step * eps
                    c, i = rebuild(base | {name: moved}, inputs)
                    f.append(loss(case, c, i))
                    if kinks and abs(step) == 2:  # ±ε lie between: a small step is linear
                        same = same and all(np.array_equal(a, b) for a, b in
                                            zip(pattern, clip_pattern(case, c, i), strict=True))
                if same:
                    break
            g[idx] = (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * eps)
            skip[idx] = not same
        grads[name], skipped[name] = g, skip
    return grads, skipped


def analytic(case: Case, canonical: Canonical, inputs: Inputs) -> dict[str, np.ndarray]:
    g = backward(case, canonical, inputs)
    out = {"x": g.dx, "h0": g.dh0}
    if g.dc0 is not None:
        out["c0"] = g.dc0
    return out | g.params


def rel_errors(a: np.ndarray, n: np.ndarray) -> np.ndarray:
    return np.abs(a - n) / np.maximum(np.abs(a) + np.abs(n), TINY)


def check(case: Case) -> tuple[dict[str, float], int, int]:
    """(max rel error per variable, elements left out at a kink, elements checked)."""
    canonical, inputs = params.generate(case), generate(case)
    ana = analytic(case, canonical, inputs)
    num, skipped = numerical_gradients(case, canonical, inputs)
    assert ana.keys() == num.keys()
    errors = {}
    for k in num:
        assert ana[k].shape == num[k].shape, k
        e = rel_errors(ana[k], num[k])
        errors[k] = float(e[~skipped[k]].max(initial=0.0))
    n_skipped = sum(int(s.sum()) for s in skipped.values())
    return errors, n_skipped, sum(v.size for v in num.values())


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_check(name: str) -> None:
    case = make_case(name)
    errors, n_skipped, n = check(case)
    worst = max(errors, key=errors.get)
    print(f"{name}: max rel error {errors[worst]:.2e} ({worst}), {n} elements, "
          f"{n_skipped} at a kink")
    assert n_skipped <= max(2, n // 100), f"{n_skipped} of {n} elements sit on a kink"
    bad = {k: e for k, e in errors.items() if e > RTOL}
    assert not bad, f"{name}: rel error above {RTOL}: {bad}"


@pytest.mark.parametrize("name", [n for n in CASES if has_kinks(make_case(n))])
def test_clip_cases_really_clip(name: str) -> None:
    """Each kind of kink of a clip case is active somewhere, and not everywhere."""
    case = make_case(name)
    canonical, inputs = params.generate(case), generate(case)
    active: dict[str, list[float]] = {}
    for tape in tapes_of(case, canonical, inputs):
        for kind, mask in kinks(case, tape).items():
            valid = np.broadcast_to(tape.valid[..., None], mask.shape)
            active.setdefault(kind, []).append(mask[valid].mean())
    expected = {"gate_clip": case.gate_clip, "cell_clip": case.cell_clip,
                "proj_clip": case.proj_clip,
                "hard_sigmoid": case.recurrent_activation != "sigmoid" or None}
    assert set(active) == {k for k, v in expected.items() if v is not None}
    for kind, fractions in active.items():
        assert 0.0 < np.mean(fractions) < 1.0, f"{kind}: active fraction {fractions}"


def test_padded_steps_take_no_gradient() -> None:
    """dy at padded steps is ignored; dx there is 0 (y is a constant 0, the state is held)."""
    case = make_case("lstm-bi-2layers-everything")
    canonical, inputs = params.generate(case), generate(case)
    g = backward(case, canonical, inputs)
    pad = np.arange(case.seq_len)[None, :] >= inputs.lengths[:, None]
    assert pad.any()
    assert np.all(g.dx[pad] == 0.0)
    dy = inputs.dy.copy()
    dy[pad] = 1e3
    g2 = backward(case, canonical, Inputs(inputs.x, inputs.h0, inputs.c0, inputs.seq_lengths,
                                          dy, inputs.dh_n, inputs.dc_n))
    for a, b in zip(g.named().values(), g2.named().values(), strict=True):
        np.testing.assert_array_equal(a, b)


class Float64Rounding(Precision):
    """The noise floor's arithmetic for a float64 case: every result passes through the
    rounding to float64, products included."""

    def round(self, a: np.ndarray) -> np.ndarray:
        return round_to(a, "float64")

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return round_to(a @ b, "float64")


float64_rounding = Float64Rounding("float64")


def test_a_forward_keeping_tapes_is_the_reference_forward() -> None:
    """Keeping the tapes, or rounding every result as the noise floor does (to float64 here),
    gives the reference's bits: the noise floor is the reference's code with its rounding."""
    for name in ("lstm-bi-2layers-everything", "gru-bi-2layers-reset-before"):
        case = make_case(name)
        canonical, inputs = params.generate(case), generate(case)
        ref = reference.run(case, canonical, inputs).named()
        tapes: list[Tape] = []
        kept = reference.forward(case, canonical, inputs, float64_rounding, tapes).named()
        assert len(tapes) == case.num_layers * case.num_directions
        assert all(len(tape.steps) == case.seq_len for tape in tapes)
        for k, v in ref.items():
            np.testing.assert_array_equal(kept[k], v, err_msg=k)


@pytest.mark.parametrize("name", ["lstm-bi-2layers-everything", "gru-bi-2layers-reset-before"])
def test_noise_floor_gradients_in_float64_are_the_reference(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gradients with every result rounded (to float64) are the reference's, bit for bit."""
    case = make_case(name)
    canonical, inputs = params.generate(case), generate(case)
    exact_grads = reference.gradients(case, canonical, inputs).named()
    monkeypatch.setattr(backward_module, "Precision", lambda dtype: float64_rounding)
    rounded = reference.gradients(case, canonical, inputs).named()
    for k, v in exact_grads.items():
        np.testing.assert_array_equal(rounded[k], v, err_msg=k)


def test_lower_precision_rounds_every_result() -> None:
    """dtype float32 gives the float64 gradients to float32 accuracy, but not bit for bit."""
    case = make_case("lstm-bi-2layers-everything")
    canonical, inputs = params.generate(case), generate(case)
    g64 = backward(case, canonical, inputs).named()
    g32 = backward(case, canonical, inputs, dtype="float32").named()
    assert g64.keys() == g32.keys()
    differs = False
    for k, v in g64.items():
        np.testing.assert_allclose(g32[k], v, rtol=0, atol=1e-5 * max(1.0, np.abs(v).max()),
                                   err_msg=k)
        differs |= not np.array_equal(g32[k], v)
    assert differs


# 4. Planted mistakes -------------------------------------------------------------------------

def test_planted_peephole_drop_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backward without the peephole terms (dc_prev += da_i p_i + da_f p_f, dc += da_o p_o)
    while the forward keeps them: the gradient check must fail."""
    correct = lstm_backward.lstm_backward

    def no_peepholes(case, p, tape, dy, dh_n, dc_n, prec=FLOAT64):
        zeroed = {k: (0.0 * v if k.startswith("p_") else v) for k, v in p.items()}
        return correct(case, zeroed, tape, dy, dh_n, dc_n, prec)

    monkeypatch.setattr(lstm_backward, "lstm_backward", no_peepholes)
    assert backward_module.CELLS["lstm"] is lstm_backward
    errors, _, _ = check(make_case("lstm-peepholes"))
    assert max(errors.values()) > 1e-3, errors


def test_planted_hard_sigmoid_slope_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tf_keras hard sigmoid differentiated with Keras 3's slope (1/6 instead of 0.2)."""
    monkeypatch.setitem(lstm_backward.ACTIVATION_DERIVATIVES, "hard_sigmoid_tf_keras",
                        lstm_backward.ACTIVATION_DERIVATIVES["hard_sigmoid_keras3"])
    errors, _, _ = check(make_case("gru-hard-tf-keras"))
    assert max(errors.values()) > 1e-3, errors


# 2. PyTorch autograd -------------------------------------------------------------------------

TORCH_ATOL = 1e-12  # relative to the largest gradient of the tensor (or absolute below 1)

TORCH_CASES = {
    "torch-lstm-proj-bi-2layers-lengths": dict(
        cell="lstm", num_layers=2, bidirectional=True, proj_size=2, hidden_size=4,
        input_size=3, batch=3, seq_len=5, seq_lengths=[5, 2, 4]),
    "torch-lstm-lengths-shorter-than-t": dict(
        cell="lstm", hidden_size=4, input_size=3, batch=3, seq_len=5, seq_lengths=[3, 1, 4]),
    "torch-gru-bi-2layers-lengths": dict(
        cell="gru", num_layers=2, bidirectional=True, hidden_size=4, input_size=3, batch=3,
        seq_len=5, seq_lengths=[3, 5, 1]),
    "torch-gru": dict(cell="gru", hidden_size=4, input_size=3, batch=2, seq_len=5),
}


def torch_gradients(case: Case, seed: int):
    """Run torch's module in float64 on a random problem; return (canonical, inputs, native
    parameter gradients, dx, dh0, dc0)."""
    torch = pytest.importorskip("torch")
    from harness.layouts import get_layout

    torch.manual_seed(seed)
    common = dict(input_size=case.input_size, hidden_size=case.hidden_size,
                  num_layers=case.num_layers, bidirectional=case.num_directions == 2,
                  batch_first=True, dtype=torch.float64)
    if case.cell == "lstm":
        module = torch.nn.LSTM(proj_size=case.proj_size, **common)
    else:
        module = torch.nn.GRU(**common)
    B, T = case.batch, case.seq_len
    n = case.num_layers * case.num_directions
    x = torch.randn(B, T, case.input_size, dtype=torch.float64, requires_grad=True)
    h0 = (0.5 * torch.randn(n, B, case.out_size, dtype=torch.float64)).requires_grad_()
    c0 = torch.randn(n, B, case.hidden_size, dtype=torch.float64).requires_grad_()
    lengths = np.asarray(case.seq_lengths or [T] * B)
    valid = torch.as_tensor(np.arange(T)[None, :] < lengths[:, None])
    dy = torch.randn(B, T, case.num_directions * case.out_size, dtype=torch.float64)
    dy = dy * valid[..., None]
    dh_n = torch.randn(n, B, case.out_size, dtype=torch.float64)
    dc_n = torch.randn(n, B, case.hidden_size, dtype=torch.float64)

    state0 = (h0, c0) if case.cell == "lstm" else h0
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        x, torch.as_tensor(lengths), batch_first=True, enforce_sorted=False)
    y, state = module(packed, state0)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=T)
    if case.cell == "lstm":
        h_n, c_n = state
        total = (dy * y).sum() + (dh_n * h_n).sum() + (dc_n * c_n).sum()
    else:
        total = (dy * y).sum() + (dh_n * state).sum()
    total.backward()

    layout = get_layout("torch")
    state_dict = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    canonical = layout.from_native(state_dict, case)
    native_grads = {k: p.grad.numpy() for k, p in module.named_parameters()}
    grads = layout.grads_from_native(native_grads, case)
    inputs = Inputs(
        x.detach().numpy(), h0.detach().numpy(),
        c0.detach().numpy() if case.cell == "lstm" else None,
        np.asarray(case.seq_lengths) if case.seq_lengths else None,
        dy.numpy(), dh_n.numpy(), dc_n.numpy() if case.cell == "lstm" else None)
    dc0 = c0.grad.numpy() if case.cell == "lstm" else None
    return canonical, inputs, grads, x.grad.numpy(), h0.grad.numpy(), dc0


@pytest.mark.torch
@pytest.mark.parametrize("name", list(TORCH_CASES))
def test_against_torch_autograd(name: str) -> None:
    case = Case(**{**BASE, **TORCH_CASES[name], "name": name, "initial_state": "random"})
    canonical, inputs, torch_grads, dx, dh0, dc0 = torch_gradients(case, seed=7)
    ours = backward(case, canonical, inputs)
    expected = {"dx": dx, "dh0": dh0} | ({"dc0": dc0} if dc0 is not None else {})
    expected |= {f"grad/{k}": v for k, v in torch_grads.tensors.items()}
    got = ours.named()
    assert got.keys() == expected.keys()
    worst = 0.0
    for k, v in expected.items():
        err = float(np.abs(got[k] - v).max()) / max(1.0, float(np.abs(v).max()))
        worst = max(worst, err)
        assert err <= TORCH_ATOL, f"{name} {k}: error {err:.2e}"
    print(f"{name}: max error vs torch {worst:.2e}")
