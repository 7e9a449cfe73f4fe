"""Planted quantization bugs in the int8 LiteRT kernel's run, for the quantized mutation test
(``tests/adapters/test_adapter_litert_quantized.py``) and for measuring the kill rate.

Each mutant is ``litert-int8`` with one bug of a kernel that reads its model wrongly: the
interpreter runs a changed model, or is fed as the broken kernel would read its input, while the
yardstick reads the converted file as it is (:mod:`harness.quantization`). The recurrent ``h``
fed back unquantized cannot be planted in LiteRT's kernel from outside, so that mutant is a
kernel simulated by the float64 reference with the model's quantization everywhere but there.
The conversion is the clean adapter's (one per case, kept in the process).

    PYTHONPATH=. python tests/support/quantized_mutants.py      # kill rate on cases-quantized
    PYTHONPATH=. python tests/support/quantized_mutants.py --weights normal:1.0 --seeds 40-47
        # the clean kernel and the h-unquantized mutant on quantized-lstm-forward's shapes with
        # other weights, one case (one conversion) per seed (docs/quantization.md)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from harness import compare
from harness.adapters import _litert_flatbuffer
from harness.adapters.litert_quantized import LiteRTInt8
from harness.data import Inputs, Outputs
from harness.params import Canonical
from harness.quantization import Quantized, QuantizedModel, integer_reference
from harness.reference.layers import forward
from harness.reference.tape import Tape
from harness.spec import Case

CATALOGUE = {
    "input-zero-point": "the input read with its zero point 3 steps off",
    "gate-weight-scale": "the forget gate's input weights read at 1.5 x their scale",
    "weights-as-uint8": "the int8 weights read as uint8 with zero point 128 (their sign bit "
                        "flipped)",
    "h-unquantized": "the recurrent h fed back unquantized (a simulated kernel)",
}
CASES = Path(__file__).resolve().parents[2] / "cases-quantized"


def _repacked(model: bytes, change) -> bytes:
    """``model`` with ``change(model_t, lstm_ops)`` applied to its object tree, packed again."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(model, 0)
    flat = _litert_flatbuffer.read(model)
    lstms = [k for k, op in enumerate(flat.ops) if op.name == _litert_flatbuffer.FUSED_LSTM]
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


class PlantedInt8(LiteRTInt8):
    """``litert-int8`` with one planted bug (:data:`CATALOGUE`)."""

    def __init__(self, bug: str) -> None:
        self.bug = bug
        self.name = f"litert-int8+{bug}"

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
    from harness.adapters._litert_deployed import final_states

    return final_states(case, y)[0]


def kill_rate(cases: list[Case] | None = None) -> tuple[int, int, list[str]]:
    """(killed, planted, one line per trial) over ``cases`` (default: the LSTM cases of
    cases-quantized): a mutant is killed when its pair is DIVERGED, on a case whose clean pair
    passes (quantized-lstm-bidirectional's does not: docs/quantization.md)."""
    from harness.cases import discover
    from harness.prepare import prepare
    from harness.runner import run_pair

    cases = cases or [c for c in discover([CASES]) if c.cell_kind.has_cell_state]
    lines, killed, planted = [], 0, 0
    named = ["litert-int8", *(PlantedInt8(bug).name for bug in CATALOGUE)]
    for case in cases:
        prep = prepare(case.model_copy(update={"adapters": named}))
        clean = run_pair(prep, LiteRTInt8())
        lines.append(f"{case.name} clean: {clean.status}: {clean.reason[:160]}"
                     f"{_off_grid(prep, clean)}{_fed_back(prep, clean)}")
        if clean.status != compare.PASS:  # a mutant DIVERGED there proves nothing
            lines.append(f"{case.name}: not counted, its clean pair does not pass")
            continue
        for bug in CATALOGUE:
            r = run_pair(prep, PlantedInt8(bug))
            planted += 1
            killed += r.status == compare.DIVERGED
            probe = _fed_back(prep, r, bug) if bug == "h-unquantized" else ""
            lines.append(f"{case.name} {bug}: {r.status}: {r.reason[:160]}{_off_grid(prep, r)}"
                         f"{probe}")
    return killed, planted, lines


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


def seed_trials(weights: dict, seeds: list[int], seq_len: int | None = None) -> list[str]:
    """The clean kernel and the h-unquantized mutant on quantized-lstm-forward's shapes with
    ``weights`` (a case's ``weights:`` mapping), one case per seed: one line each, with the
    largest difference from the integer-aware reference in output steps, per timestep."""
    from harness.cases import discover
    from harness.prepare import prepare
    from harness.runner import run_pair

    base = next(c for c in discover([CASES]) if c.name == "quantized-lstm-forward")
    lines = []
    for seed in seeds:
        update = {"name": f"{base.name}-seed{seed}", "seed": seed, "weights": weights,
                  "adapters": ["litert-int8", PlantedInt8("h-unquantized").name]}
        if seq_len is not None:
            update["seq_len"] = seq_len
        prep = prepare(Case(**(base.model_dump(exclude_unset=True) | update)))
        parts = []
        for adapter, bug in ((LiteRTInt8(), None), (PlantedInt8("h-unquantized"), "h-unquantized")):
            r = run_pair(prep, adapter)
            ref = integer_reference(prep.case, r.outputs.quantized, prep.inputs).y
            steps = np.abs(r.outputs.y - ref) / r.outputs.quantized.output.scale
            per_t = np.rint(steps.max(axis=(0, 2))).astype(int).tolist()
            parts.append(f"{bug or 'clean'} {r.status} {steps.max():.0f} steps, per t {per_t}"
                         f"{_off_grid(prep, r)}{_fed_back(prep, r, bug)}")
        lines.append(f"seed {seed}: " + " | ".join(parts))
    return lines


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="INIT[:SCALE], e.g. normal:1.0 (no scale: the "
                        "default 1/sqrt(hidden_size)): compare the clean kernel and the "
                        "h-unquantized mutant on such weights, one case a seed")
    parser.add_argument("--seeds", type=_seeds, default=[43], help="A-B (default 43)")
    parser.add_argument("--seq-len", type=int, help="default: the case's")
    args = parser.parse_args(argv)
    if args.weights:
        init, _, scale = args.weights.partition(":")
        weights = {"init": init} | ({"scale": float(scale)} if scale else {})
        print("\n".join(seed_trials(weights, args.seeds, args.seq_len)))
        return 0
    killed, planted, lines = kill_rate()
    print("\n".join(lines))
    print(f"killed {killed} of {planted} planted quantization bugs")
    return 0 if killed == planted else 1


if __name__ == "__main__":
    sys.exit(main())
