"""The mistake families of what the blocks mean once read: ``bias`` (a bias dropped, counted
twice or half, GRU ``bR_n`` summed into ``bW_n``, a bias half missing from the file),
``forget`` (a forget-gate offset added at run time by one side) and ``swap`` (input and
recurrent kernels, forward and backward directions)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.mistakes.mistake import STAGE_OTHER, Mistake, Trial, kind_of
from harness.params import key, layer_dirs
from harness.spec import Case


def _scale_biases(factor_w: float, factor_r: float) -> Callable[[Trial], None]:
    def apply(trial: Trial) -> None:
        c = dict(trial.canonical)
        for k, v in trial.canonical.items():
            kind = kind_of(k)
            if kind == "bW":
                c[k] = v * factor_w
            elif kind == "bR":
                c[k] = v * factor_r
        trial.canonical = c
    return apply


def biases(case: Case) -> list[Mistake]:
    out = [
        Mistake("bias:drop-bR", "bias", "the outputs were computed without the recurrent bias "
                "bR: your reading adds a second bias the framework does not have",
                "bias", STAGE_OTHER, _scale_biases(1.0, 0.0)),
        Mistake("bias:drop-bW", "bias", "the outputs were computed without the input bias bW",
                "bias", STAGE_OTHER, _scale_biases(0.0, 1.0)),
        Mistake("bias:none", "bias", "the outputs were computed with no bias at all",
                "bias", STAGE_OTHER, _scale_biases(0.0, 0.0)),
        Mistake("bias:twice", "bias", "the framework adds the biases twice (one bias vector "
                "counted as both bW and bR)", "bias", STAGE_OTHER, _scale_biases(2.0, 2.0)),
        Mistake("bias:half", "bias", "your reading counts the biases twice (the framework adds "
                "them once)", "bias", STAGE_OTHER, _scale_biases(0.5, 0.5)),
    ]
    if case.cell_kind.separate_biases(case.reset_after):
        def fold(trial: Trial) -> None:
            c = dict(trial.canonical)
            for layer, d in layer_dirs(trial.case):
                bw, br = key(layer, d, "bW_n"), key(layer, d, "bR_n")
                c[bw] = trial.canonical[bw] + trial.canonical[br]
                c[br] = np.zeros_like(trial.canonical[br])
            trial.canonical = c
        out.append(Mistake("bias:sum-n", "bias", "bR_n is applied outside r * (...): the n-gate "
                           "biases were summed into one (split vs summed bias)", "bias",
                           STAGE_OTHER, fold))
    if "f" in case.gates and not case.input_forget:  # with f = 1 - i no offset can act
        offsets = {1.0, -1.0}
        if case.forget_bias not in (0.0, 1.0, -1.0):
            offsets |= {case.forget_bias, -case.forget_bias}
        for delta in sorted(offsets, reverse=True):
            def shift(trial: Trial, delta=delta) -> None:
                c = dict(trial.canonical)
                for layer, d in layer_dirs(trial.case):
                    k = key(layer, d, "bW_f")
                    c[k] = trial.canonical[k] + delta
                trial.canonical = c
            text = (f"the framework adds {delta:+g} to the forget gate at run time (TF1 LSTMCell, "
                    "BlockLSTM, Haiku) that your reading does not" if delta > 0 else
                    f"your reading adds {-delta:g} to the forget gate that the framework does not "
                    "(the offset is already in the stored bias, or it has none)")
            out.append(Mistake(f"forget:{delta:+g}", "forget", text, "forget", STAGE_OTHER, shift))
    return out


def swaps(case: Case, impossible) -> list[Mistake]:
    out = []
    if case.num_directions == 2:
        def swap_dirs(trial: Trial) -> None:
            c = {}
            for k, v in trial.canonical.items():
                layer, direction, name = k.split("/")
                other = "backward" if direction == "forward" else "forward"
                c[f"{layer}/{other}/{name}"] = v
            trial.canonical = c
        out.append(Mistake("swap:directions", "swap", "forward and backward weights are swapped",
                           "swap:directions", STAGE_OTHER, swap_dirs))
    layers = [la for la in range(case.num_layers) if case.layer_input_size(la) == case.out_size
              and case.out_size == case.hidden_size]
    text = "input and recurrent kernels are swapped (W <-> R)"
    if len(layers) == case.num_layers:
        def swap_wr(trial: Trial) -> None:
            c = dict(trial.canonical)
            for layer, d in layer_dirs(trial.case):
                for g in trial.case.gates:
                    w, r = key(layer, d, f"W_{g}"), key(layer, d, f"R_{g}")
                    c[w], c[r] = trial.canonical[r], trial.canonical[w]
            trial.canonical = c
        out.append(Mistake("swap:W-R", "swap", text, "swap:W-R", STAGE_OTHER, swap_wr))
    else:
        impossible.append((text, "W and R have different shapes"))
    return out


def missing_bias_half(case: Case, delta: dict[str, np.ndarray]) -> Mistake:
    """The file holds one half of a split bias pair and the framework ran with both: a Keras
    (or BlockLSTM, cuDNN ...) bias set from PyTorch's ``bias_ih`` without ``bias_hh``, or the
    other half. ``delta``: the missing half per canonical key (``bR_g``; GRU reset-after also
    ``bW_n``, which acts outside ``r * (...)``), fitted to the outputs by
    :func:`harness.doctor.fit.fit_missing_bias`, since no transformation of the file can give it."""
    def add(trial: Trial) -> None:
        c = dict(trial.canonical)
        for k, v in delta.items():
            c[k] = trial.canonical[k] + v
        trial.canonical = c

    return Mistake("bias:missing-half", "bias",
                   "the file holds one half of a split bias pair and the framework ran with "
                   "both (e.g. a Keras bias set from PyTorch's bias_ih without bias_hh): the "
                   "missing half, fitted to the expected outputs, is added in the corrected "
                   "weights", "bias", STAGE_OTHER, add,
                   short="one half of a split bias pair missing from the file")

