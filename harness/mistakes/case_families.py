"""The mistake families that are not in the weights: ``variant`` (the case differs: GRU
reset_after flipped, the update gate inverted, another recurrent activation) and ``data``
(batch-major input read as time-major, (h0, c0) swapped). A corrected weights file cannot
absorb them (``fixable=False``)."""

from __future__ import annotations

from harness.mistakes.mistake import STAGE_OTHER, Mistake, Trial
from harness.params import key, layer_dirs
from harness.spec import Case

ACTIVATIONS = ("sigmoid", "hard_sigmoid_tf_keras", "hard_sigmoid_keras3")


def variants(case: Case) -> list[Mistake]:
    out = []
    if case.cell_kind.reads("reset_after"):
        flip = not case.reset_after

        def reset(trial: Trial) -> None:
            trial.case = trial.case.model_copy(update={"reset_after": flip})
        out.append(Mistake(
            "variant:reset_after", "variant",
            f"the outputs were computed reset-{'after' if flip else 'before'} (reset_after="
            f"{str(flip).lower()}), the case says reset_after={str(case.reset_after).lower()}",
            "variant:reset", STAGE_OTHER, reset, fixable=False))

        def invert(trial: Trial) -> None:
            # h' = z n + (1 - z) h is h' = (1 - z') n + z' h with z' = 1 - z = sigmoid(-a_z)
            c = dict(trial.canonical)
            for layer, d in layer_dirs(trial.case):
                for x in ("W", "R", "bW", "bR"):
                    k = key(layer, d, f"{x}_z")
                    c[k] = -trial.canonical[k]
            trial.canonical = c
        if case.recurrent_activation == "sigmoid":
            out.append(Mistake("variant:update", "variant", "the update gate is used the other way "
                               "round: h' = z * n + (1 - z) * h", "variant:update", STAGE_OTHER,
                               invert))
    for act in ACTIVATIONS:
        if act == case.recurrent_activation:
            continue

        def activation(trial: Trial, act=act) -> None:
            trial.case = trial.case.model_copy(update={"recurrent_activation": act})
        out.append(Mistake(f"variant:{act}", "variant", f"the outputs were computed with "
                           f"recurrent_activation {act}, the case says {case.recurrent_activation}",
                           "variant:activation", STAGE_OTHER, activation, fixable=False))
    return out


ZERO_STATES = ("the initial states (h0, c0) swapped", "they are zero")


def data_mistakes(case: Case, noops) -> list[Mistake]:
    out = []
    zero_state = case.initial_state != "random"
    if case.seq_lengths is None and (zero_state or case.batch == case.seq_len):
        def time_major(trial: Trial) -> None:
            trial.time_major = True
        out.append(Mistake("data:time-major", "data", "the batch-major input [B, T, I] was fed to "
                           "a time-major API (or the reverse): batch and time axes are swapped",
                           "data:major", STAGE_OTHER, time_major, fixable=False))
    if case.cell_kind.has_cell_state and not case.proj_size and not zero_state:
        def swap_states(trial: Trial) -> None:
            trial.swap_states = True
        out.append(Mistake("data:h0-c0", "data", "the initial states (h0, c0) were passed as "
                           "(c0, h0) (TF1 LSTMStateTuple and Flax carry are (c, h))",
                           "data:states", STAGE_OTHER, swap_states, fixable=False))
    elif case.cell_kind.has_cell_state and zero_state:
        noops.append(ZERO_STATES)
    return out

