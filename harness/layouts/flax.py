"""Flax ``LSTMCell`` / ``OptimizedLSTMCell`` / ``GRUCell``: the parameter trees, flattened.

Layout ``flax`` (flax.linen; the same tree for ``LSTMCell`` and ``OptimizedLSTMCell``, which
concatenates these kernels at call time but stores them apart). One ``Dense`` per gate and
source, named ``layer{k}/{forward|backward}/GATE/kernel`` (``/bias``):

    LSTM  ii if ig io   kernel [in_k, H]   input Dense, no bias
          hi hf hg ho   kernel [H, H]      hidden Dense, bias [H]: bW_g + bR_g summed
    GRU   ir iz         kernel [in_k, H], bias [H]: bW_g + bR_g summed
          in            kernel [in_k, H], bias [H]: bW_n
          hr hz         kernel [H, H]      no bias
          hn            kernel [H, H], bias [H]: bR_n (inside r * (...): it acts apart)

Kernels are in ``x @ kernel`` orientation, so each is its canonical block transposed. Flax keeps
one bias per LSTM gate (google/flax#3746: PyTorch's ``bias_ih`` and ``bias_hh`` must be summed;
only the sum acts), and the GRU's n gate two (``reset_after``; flax's GRUCell has no other
form). Flax has no runtime forget bias: a case's ``forget_bias`` is stored in ``hf/bias``.

Layout ``flax-nnx`` (flax.nnx ``OptimizedLSTMCell`` and ``GRUCell``, whose trees differ: the
gates are fused into one ``Linear`` per source, columns in gate order):

    LSTM  dense_i/kernel [in_k, 4H] (i f g o)   dense_h/kernel [H, 4H], dense_h/bias [4H]
    GRU   dense_i/kernel [in_k, 3H] (r z n), dense_i/bias [3H]   dense_h/kernel [H, 3H]

nnx's ``GRUCell`` has no ``b_hn`` at all (google/flax#5594, open): ``bR_n`` has nowhere to go,
and a GRU whose ``bR_n`` is not zero does not convert to it (``harness.convert.lost_in``).
(nnx's ``LSTMCell`` stores per-gate ``ii``, ``if_``, ... like linen and computes like it.)

The carry of a flax LSTM cell is ``(c, h)``, PyTorch's state is ``(h, c)`` (google/flax#5469):
run-time, in the runtime notes.
"""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, fused, grid
from harness.params import DIRECTION_NAMES
from harness.spec import Case

# gate -> the canonical bias blocks flax's one bias there holds (None: that Dense has no bias)
LINEN_INPUT_BIAS = {"lstm": dict.fromkeys("ifgo"), "gru": {"r": ("bW_r", "bR_r"),
                                                            "z": ("bW_z", "bR_z"),
                                                            "n": ("bW_n",)}}
LINEN_HIDDEN_BIAS = {"lstm": {g: (f"bW_{g}", f"bR_{g}") for g in "ifgo"},
                     "gru": {"r": None, "z": None, "n": ("bR_n",)}}
ORDER = {"lstm": "ifgo", "gru": "rzn"}


def prefix(layer: int, d: int) -> str:
    return f"layer{layer}/{DIRECTION_NAMES[d]}/"


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    p = prefix(layer, d)
    tensors = []
    for source, kind, biases in (("i", "W", LINEN_INPUT_BIAS), ("h", "R", LINEN_HIDDEN_BIAS)):
        for g in ORDER[case.cell]:
            name = f"{p}{source}{g}/"
            tensors.append(grid(case, layer, d, name + "kernel", [[f"{kind}_{g}"]],
                                transform="transpose"))
            bias = biases[case.cell][g]
            if bias is not None:
                tensors.append(grid(case, layer, d, name + "bias", [[bias]],
                                    fold_forget_bias=True))
    return tensors


def describe_nnx(case: Case, layer: int, d: int) -> list[NativeTensor]:
    p = prefix(layer, d)
    order = ORDER[case.cell]
    tensors = [
        fused(case, layer, d, p + "dense_i/kernel", "W", order, transform="transpose"),
        fused(case, layer, d, p + "dense_h/kernel", "R", order, transform="transpose"),
    ]
    if case.cell_kind.has_cell_state:
        tensors.append(fused(case, layer, d, p + "dense_h/bias", ("bW", "bR"), order,
                             fold_forget_bias=True))
    else:  # bR_n: nowhere (google/flax#5594)
        tensors.append(grid(case, layer, d, p + "dense_i/bias",
                            [[("bW_r", "bR_r"), ("bW_z", "bR_z"), "bW_n"]]))
    return tensors


def runtime(case: Case) -> list[str]:
    notes = []
    if case.cell_kind.has_cell_state:
        notes.append("carry (c, h): the LSTM cell's state is (c, h), PyTorch's (h, c) "
                     "(google/flax#5469)")
    else:
        notes.append("GRU (reset after): n = tanh(x @ in/kernel + in/bias + r * (h @ hn/kernel "
                     "+ hn/bias)); h' = (1 - z) * n + z * h")
    if case.seq_lengths is not None:
        notes.append("seq_lengths: nn.RNN returns the carry at each sequence's last valid step "
                     "and flips only the valid steps for the reverse direction (flip_sequences), "
                     "but leaves padded outputs unmasked: the adapters write 0 there")
    if case.num_directions == 2 or case.dir_mode == "reverse":
        notes.append("backward direction: nn.RNN(reverse=True, keep_order=True) (nn.Bidirectional "
                     "does the same), outputs in input time order")
    return notes


def runtime_nnx(case: Case) -> list[str]:
    notes = runtime(case)
    if case.cell_kind.reads("reset_after"):
        notes[0] = ("nnx GRU: n = tanh(x @ K_i[n] + b_i[n] + r * (h @ K_h[n])): no b_hn "
                    "(google/flax#5594), bR_n is dropped")
    return notes


FLAX = Layout(
    name="flax",
    title="Flax linen LSTMCell / OptimizedLSTMCell / GRUCell parameters (one Dense per gate)",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime,
)

FLAX_NNX = Layout(
    name="flax-nnx",
    title="Flax nnx OptimizedLSTMCell / GRUCell parameters (fused dense_i, dense_h)",
    cells=("lstm", "gru"),
    describe=describe_nnx,
    runtime=runtime_nnx,
)
