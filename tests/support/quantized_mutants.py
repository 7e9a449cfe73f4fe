"""Planted quantization bugs in the int8 LiteRT kernel's run, for the quantized mutation test
(``tests/adapters/test_adapter_litert_quantized.py``) and for measuring the kill rate.

Each mutant is ``litert-int8-ref`` with one bug of a kernel that reads its model wrongly, judged
to the bit against the integer reference (:mod:`harness.judges.bit_exact`): the interpreter
runs a changed model, or is fed as the broken kernel would read its input, while the yardstick
reads the converted file as it is. The recurrent ``h`` fed back unquantized cannot be planted
in LiteRT's kernel from outside, so that mutant is a kernel simulated by the float64 reference
with the model's quantization everywhere but there; the one-step mutant moves one output value
of one step by one step of its grid. The conversion is the clean adapter's (one per case, kept
in the process).

    PYTHONPATH=. python tests/support/quantized_mutants.py      # on cases-quantized's LSTMs
    PYTHONPATH=. python tests/support/quantized_mutants.py --weights normal:0.5 --seeds 40-47
        # on quantized-lstm-forward's shapes with other weights, one case (one conversion) a
        # seed (docs/quantization.md)

Both modes exit 1 when a planted bug survives or a clean kernel does not pass.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from harness import compare
from harness.adapters.litert_quantized import LiteRTInt8Ref
from harness.data import Inputs, Outputs
from harness.frameworks import litert_flatbuffer
from harness.grids import QuantizedModel
from harness.params import Canonical
from harness.quantization import Quantized, integer_reference
from harness.reference.layers import forward
from harness.reference.tape import Tape
from harness.spec import Case

CATALOGUE = {
    "input-zero-point": "the input read with its zero point 3 steps off",
    "gate-weight-scale": "the forget gate's input weights read at 1.5 x their scale",
    "weights-as-uint8": "the int8 weights read as uint8 with zero point 128 (their sign bit "
                        "flipped)",
    "h-unquantized": "the recurrent h fed back unquantized (a simulated kernel)",
    "one-step": "one output value at one step one step of its grid off",
}
CASES = Path(__file__).resolve().parents[2] / "cases-quantized"


def _repacked(model: bytes, change) -> bytes:
    """``model`` with ``change(model_t, lstm_ops)`` applied to its object tree, packed again."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(model, 0)
    flat = litert_flatbuffer.read(model)
    lstms = [k for k, op in enumerate(flat.ops) if op.name == litert_flatbuffer.FUSED_LSTM]
    change(m, [m.subgraphs[0].operators[k] for k in lstms])
    builder = flatbuffers.Builder(len(model) + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _forget_scale(m, ops) -> None:
    for op in ops:
        t = m.subgraphs[0].tensors[op.inputs[2]]  # input_to_forget_weights
        t.quantization.scale = [float(s) * 1.5 for s in t.quantization.scale]


def _as_uint8(m, ops) -> None:
    for op in ops:
        for i in range(1, 9):  # the input and recurrent weights of every gate
            buffer = m.buffers[m.subgraphs[0].tensors[op.inputs[i]].buffer]
            buffer.data = np.bitwise_xor(np.asarray(buffer.data, dtype=np.uint8), 0x80)


def one_step_off(y: np.ndarray, step: float) -> np.ndarray:
    """``y`` [B, T, H] with its first value at the middle step one ``step`` off (down where
    that stays on the grid's side of zero, else up): the smallest error a kernel can make."""
    out = np.array(y, copy=True)
    t = out.shape[1] // 2
    out[0, t, 0] += -step if out[0, t, 0] > 0 else step
    return out


class PlantedInt8(LiteRTInt8Ref):
    """``litert-int8-ref`` with one planted bug (:data:`CATALOGUE`)."""

    def __init__(self, bug: str) -> None:
        self.bug = bug
        self.name = f"litert-int8-ref+{bug}"

    def kernel_model(self, model: bytes) -> bytes:
        if self.bug == "gate-weight-scale":
            return _repacked(model, _forget_scale)
        if self.bug == "weights-as-uint8":
            return _repacked(model, _as_uint8)
        return model

    def kernel_feeds(self, feeds: dict[str, np.ndarray], quantized: QuantizedModel
                     ) -> dict[str, np.ndarray]:
        if self.bug == "input-zero-point":
            step = quantized.grids["0/0"].x.scale
            return feeds | {"x": (feeds["x"] - 3 * step).astype(np.float32)}
        return feeds

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        out = super()._run(case, native, inputs)
        if self.bug == "h-unquantized":
            out.y = _h_unquantized(case, out.quantized, inputs)
            out.h_n = None if out.h_n is None else _h_from(case, out.y)
            out.note = f"simulated kernel ({CATALOGUE[self.bug]})"
            out.handed = None  # no model ran this: a reproducer of the clean model would lie
        elif self.bug == "one-step":
            out.y = one_step_off(out.y, out.quantized.output.scale)
            out.h_n = None if out.h_n is None else _h_from(case, out.y)
            out.handed = None
        return out


class _HFedBackRaw(Quantized):
    """The model's quantization, but ``h`` kept as computed (rounded at the output only)."""

    def at(self, layer: int, direction: int) -> _HFedBackRaw:
        return _HFedBackRaw("float64", self.grids, f"{layer}/{direction}")

    def stored(self, what: str, a):
        return a if what == "h" else super().stored(what, a)


def _h_unquantized(case: Case, model: QuantizedModel, inputs: Inputs) -> np.ndarray:
    out = forward(case, Canonical(model.weights), inputs, _HFedBackRaw("float64", model.grids))
    return model.output.round(out.y) if model.output is not None else out.y


def _h_from(case: Case, y: np.ndarray) -> np.ndarray:
    """``h_n`` read from ``y`` as the adapter reads it (one layer, no lengths: where it outputs
    ``h_n`` at all)."""
    from harness.families.readout import h_n_from_y

    return h_n_from_y(y, case.directions, case.out_size)


def _bit_exact(r) -> bool:
    """Whether the pair was judged bit-exact against the integer reference (its figures)."""
    return bool(getattr(r.figures, "exact", False))


def trials(prep, lines: list[str]) -> tuple[int, int, bool]:
    """The clean ``litert-int8-ref`` and every planted bug on one prepared case: (killed,
    planted, whether the clean kernel is right), one line each added to ``lines``. The clean
    kernel is right where it is bit-exact and passes, or is a declared finding (known bug: the
    converter's, not the kernel's). A mutant is killed where it is DIVERGED and not bit-exact,
    so that a case whose clean pair is DIVERGED or a finding for another reason still counts
    it. A clean kernel that is not bit-exact counts no mutant."""
    from harness.pairs import run_pair

    name = prep.case.name
    clean = run_pair(prep, LiteRTInt8Ref())
    lines.append(f"{name} clean: {clean.status}: {clean.reason[:200]}{_off_grid(prep, clean)}"
                 f"{_fed_back(prep, clean)}")
    right = _bit_exact(clean) and clean.status in (compare.PASS, compare.KNOWN_BUG)
    if not _bit_exact(clean):
        lines.append(f"{name}: no mutant counted, its clean pair is not bit-exact")
        return 0, 0, False
    killed = 0
    for bug in CATALOGUE:
        r = run_pair(prep, PlantedInt8(bug))
        killed += r.status in (compare.DIVERGED, compare.KNOWN_BUG) and not _bit_exact(r)
        probe = _fed_back(prep, r, bug) if bug == "h-unquantized" else ""
        lines.append(f"{name} {bug}: {r.status}: {r.reason[:200]}{_off_grid(prep, r)}{probe}")
    return killed, len(CATALOGUE), right


NAMED = ["litert-int8-ref", *(PlantedInt8(bug).name for bug in CATALOGUE)]


def kill_rate(cases: list[Case] | None = None) -> tuple[int, int, int, list[str]]:
    """(killed, planted, clean pairs that did not pass, one line per trial) over ``cases``
    (default: the LSTM cases of cases-quantized)."""
    from harness.cases import discover
    from harness.prepare import prepare

    cases = cases or [c for c in discover([CASES]) if c.cell_kind.has_cell_state]
    lines: list[str] = []
    killed = planted = failed = 0
    for case in cases:
        k, p, ok = trials(prepare(case.model_copy(update={"adapters": NAMED})), lines)
        killed, planted, failed = killed + k, planted + p, failed + (not ok)
    return killed, planted, failed, lines


def _off_grid(prep, r) -> str:
    """The share of ``y``'s elements half a step or more from the integer-aware reference:
    a probe of what tells the h-unquantized mutant from the clean kernel (it overlaps on every
    weights measured: docs/quantization.md, "Planted quantization bugs")."""
    out = r.outputs
    if out is None or out.quantized is None or out.quantized.output is None:
        return ""
    ref = integer_reference(prep.case, out.quantized, prep.inputs).y
    off = np.abs(out.y - ref) / out.quantized.output.scale >= 0.5
    return f" [y elements one step or more off the integer-aware reference: {off.mean():.1%}]"


def _fed_back(prep, r, bug: str | None = None) -> str:
    """What the kernel feeds back that the integer-aware reference does not: the RMS over
    elements and steps of (its ``h`` fed back − the reference's), in steps of the ``h`` grid.
    The clean kernel feeds back the ``h`` it outputs (one layer, one direction: ``y`` is ``h``
    on the same grid); the h-unquantized mutant its ``h`` before rounding. Empty where ``y`` is
    not the fed-back ``h``."""
    out, case = r.outputs, prep.case
    if (out is None or out.quantized is None or case.num_layers != 1 or case.bidirectional
            or out.quantized.output != out.quantized.grids["0/0"].h):
        return ""
    ref = integer_reference(case, out.quantized, prep.inputs).y
    if bug == "h-unquantized":
        tapes: list[Tape] = []
        forward(case, Canonical(out.quantized.weights), prep.inputs,
                _HFedBackRaw("float64", out.quantized.grids), tapes=tapes)
        fed = np.asarray(tapes[0].over_time("h_raw"))
    else:
        fed = out.y
    rms = float(np.sqrt(np.mean(((fed - ref) / out.quantized.output.scale) ** 2)))
    return f" [h fed back vs the reference's: RMS {rms:.3f} steps]"


def seed_cases(weights: dict, seeds: list[int], seq_len: int | None = None) -> list[Case]:
    """quantized-lstm-forward's shapes with ``weights`` (a case's ``weights:`` mapping), one
    case per seed."""
    from harness.cases import discover

    base = next(c for c in discover([CASES]) if c.name == "quantized-lstm-forward")
    made = []
    for seed in seeds:
        update = {"name": f"{base.name}-seed{seed}", "seed": seed, "weights": weights}
        if seq_len is not None:
            update["seq_len"] = seq_len
        made.append(Case(**(base.model_dump(exclude_unset=True) | update)))
    return made


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="INIT[:SCALE], e.g. normal:0.5 (no scale: the "
                        "default 1/sqrt(hidden_size)): the clean kernel and every planted bug "
                        "on quantized-lstm-forward's shapes with such weights, one case a seed")
    parser.add_argument("--seeds", type=_seeds, default=[43], help="A-B (default 43)")
    parser.add_argument("--seq-len", type=int, help="default: the case's")
    args = parser.parse_args(argv)
    cases = None
    if args.weights:
        init, _, scale = args.weights.partition(":")
        weights = {"init": init} | ({"scale": float(scale)} if scale else {})
        cases = seed_cases(weights, args.seeds, args.seq_len)
    killed, planted, failed, lines = kill_rate(cases)
    print("\n".join(lines))
    print(f"killed {killed} of {planted} planted quantization bugs; "
          f"{failed} clean kernel(s) did not pass")
    return 0 if killed == planted and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
