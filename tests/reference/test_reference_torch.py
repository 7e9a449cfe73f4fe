"""The float64 reference against PyTorch's CPU ``nn.LSTM`` / ``nn.GRU`` in float64.

PyTorch is the independent oracle here: the modules are built directly in the test with
torch's own initialisation (``torch.manual_seed``), run in float64, and their ``state_dict`` is
converted to canonical blocks **by hand below**, not through ``harness.layouts``, so that these
tests do not depend on the layout code. Torch layout facts (docs/layouts.md, torch):

- ``weight_ih_l{k}[_reverse]`` ``[nH, in_k]``, ``weight_hh_l{k}[_reverse]`` ``[nH, P or H]``,
  ``bias_ih``/``bias_hh`` ``[nH]``: gate blocks along the rows, LSTM i, f, g, o and GRU r, z, n,
  math orientation (so a block is already ``W_g``, no transpose);
- ``weight_hr_l{k}[_reverse]`` ``[P, H]`` is ``Wp``;
- GRU is reset-after with ``h' = (1 - z) n + z h``;
- ``h_n``/``c_n`` are layer-major ``[L * D, B, .]`` even with ``batch_first=True``;
- packed sequences (``enforce_sorted=False``) give 0 at padded steps of ``y`` after
  ``pad_packed_sequence``, states at each sequence's last valid step, and a reverse direction
  that starts at each sequence's last valid step: the harness's own conventions.

Every check asserts max abs error <= 1e-10 on y, h_n and c_n.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import reference
from harness.data import Inputs, Outputs
from harness.params import Canonical
from harness.spec import Case

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

ATOL = 1e-10

# Gate blocks along the rows of torch's fused tensors (docs/layouts.md, torch).
TORCH_GATES = {"lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}


def torch_to_canonical(state: dict[str, np.ndarray], case: Case) -> Canonical:
    """A torch ``state_dict`` (as float64 NumPy) -> canonical blocks, by hand."""
    H, gates = case.hidden_size, TORCH_GATES[case.cell]
    tensors: dict[str, np.ndarray] = {}
    for layer in range(case.num_layers):
        for d in case.directions:
            sfx = f"l{layer}" + ("_reverse" if d == 1 else "")
            prefix = f"layer{layer}/{('forward', 'backward')[d]}/"
            for k, g in enumerate(gates):
                rows = slice(k * H, (k + 1) * H)
                tensors[prefix + f"W_{g}"] = state[f"weight_ih_{sfx}"][rows]
                tensors[prefix + f"R_{g}"] = state[f"weight_hh_{sfx}"][rows]
                tensors[prefix + f"bW_{g}"] = state[f"bias_ih_{sfx}"][rows]
                tensors[prefix + f"bR_{g}"] = state[f"bias_hh_{sfx}"][rows]
            if case.proj_size:
                tensors[prefix + "Wp"] = state[f"weight_hr_{sfx}"]
    return Canonical(tensors)


def run_torch(case: Case, seed: int) -> tuple[Canonical, Inputs, Outputs]:
    """Build the torch module for ``case`` (float64, torch init), run it, return everything."""
    torch.manual_seed(seed)
    B, T, I = case.batch, case.seq_len, case.input_size
    common = dict(input_size=I, hidden_size=case.hidden_size, num_layers=case.num_layers,
                  bidirectional=case.num_directions == 2, batch_first=True, dtype=torch.float64)
    if case.cell == "lstm":
        module = torch.nn.LSTM(proj_size=case.proj_size, **common)
    else:
        module = torch.nn.GRU(**common)
    module.eval()
    n = case.num_layers * case.num_directions
    x = torch.randn(B, T, I, dtype=torch.float64)
    h0 = 0.5 * torch.randn(n, B, case.out_size, dtype=torch.float64)
    c0 = torch.randn(n, B, case.hidden_size, dtype=torch.float64)
    state0 = (h0, c0) if case.cell == "lstm" else h0
    lengths = case.seq_lengths
    with torch.no_grad():
        if lengths is None:
            y, state = module(x, state0)
        else:
            packed = torch.nn.utils.rnn.pack_padded_sequence(
                x, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
            y_packed, state = module(packed, state0)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(
                y_packed, batch_first=True, padding_value=0.0, total_length=T)
    h_n, c_n = state if case.cell == "lstm" else (state, None)

    sd = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    canonical = torch_to_canonical(sd, case)
    inputs = Inputs(
        x=x.numpy(), h0=h0.numpy(), c0=c0.numpy() if case.cell == "lstm" else None,
        seq_lengths=np.asarray(lengths, dtype=np.int64) if lengths else None)
    out = Outputs(y=y.numpy(), h_n=h_n.numpy(), c_n=None if c_n is None else c_n.numpy())
    return canonical, inputs, out


def max_errors(got: Outputs, want: Outputs) -> dict[str, float]:
    errors = {}
    for name, w in want.named().items():
        g = got.named()[name]
        assert g.shape == w.shape, f"{name}: got shape {g.shape}, but should be {w.shape}"
        errors[name] = float(np.max(np.abs(g - w)))
    return errors


CASES = {
    "lstm-plain": dict(cell="lstm", input_size=3, hidden_size=5, batch=3, seq_len=6),
    "lstm-proj-2layer-bidir": dict(cell="lstm", input_size=3, hidden_size=5, proj_size=2,
                                   num_layers=2, bidirectional=True, batch=3, seq_len=6),
    "gru-2layer-bidir": dict(cell="gru", input_size=3, hidden_size=4, num_layers=2,
                             bidirectional=True, batch=3, seq_len=6),
    # lengths deliberately unsorted ([5, 3, 1]-style) to exercise enforce_sorted=False
    "lstm-packed-bidir": dict(cell="lstm", input_size=3, hidden_size=4, num_layers=2,
                              bidirectional=True, batch=4, seq_len=5, seq_lengths=[3, 5, 1, 4]),
    "lstm-proj-packed-bidir": dict(cell="lstm", input_size=2, hidden_size=5, proj_size=3,
                                   bidirectional=True, batch=3, seq_len=5, seq_lengths=[5, 3, 1]),
    "gru-packed-bidir": dict(cell="gru", input_size=3, hidden_size=4, num_layers=2,
                             bidirectional=True, batch=4, seq_len=6, seq_lengths=[6, 2, 4, 1]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reference_matches_torch(name: str) -> None:
    case = Case(name=name, dtype="float64", initial_state="random", **CASES[name])
    canonical, inputs, want = run_torch(case, seed=sorted(CASES).index(name))
    got = reference.run(case, canonical, inputs)
    errors = max_errors(got, want)
    assert max(errors.values()) <= ATOL, f"{name}: max abs errors {errors} exceed {ATOL}"
    if case.seq_lengths:  # the contract the comparison relies on, checked on torch's side too
        lengths = np.asarray(case.seq_lengths)
        padded = np.arange(case.seq_len)[None, :] >= lengths[:, None]
        assert np.all(want.y[padded] == 0.0) and np.all(got.y[padded] == 0.0)


def test_forget_bias_folded_into_torch_bias() -> None:
    """A runtime ``forget_bias`` equals a torch model whose stored f bias holds it.

    Torch has no runtime forget bias (docs/layouts.md, torch), so the canonical blocks are taken
    from
    torch with ``forget_bias`` subtracted from ``bW_f``, and the reference adds it back.
    """
    fb = 1.0
    spec = CASES["lstm-proj-2layer-bidir"]
    plain = Case(name="fb0", dtype="float64", initial_state="random", **spec)
    canonical, inputs, want = run_torch(plain, seed=7)
    case = Case(name="fb1", dtype="float64", initial_state="random", forget_bias=fb, **spec)
    tensors = dict(canonical.tensors)
    for k in tensors:
        if k.endswith("/bW_f"):
            tensors[k] = tensors[k] - fb
    got = reference.run(case, Canonical(tensors), inputs)
    errors = max_errors(got, want)
    assert max(errors.values()) <= ATOL, f"max abs errors {errors} exceed {ATOL}"
    # and the runtime forget bias really is applied: without it, the result moves
    unfolded = reference.run(plain, Canonical(tensors), inputs)
    assert np.max(np.abs(unfolded.y - want.y)) > 1e-3


def test_gru_reset_before_does_not_match_torch() -> None:
    """Sanity: the same torch GRU weights run reset-before must diverge (pitfall P6)."""
    spec = CASES["gru-2layer-bidir"]
    case = Case(name="gru", dtype="float64", initial_state="random", **spec)
    canonical, inputs, want = run_torch(case, seed=3)
    wrong = reference.run(case.model_copy(update={"reset_after": False}), canonical, inputs)
    assert np.max(np.abs(wrong.y - want.y)) > 1e-3
