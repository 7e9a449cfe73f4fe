"""litert-int8-ref judged to the bit against the integer reference (harness/judges/bit_exact.py,
docs/quantization.md "The integer reference"), and the quantized mutants' command
(tests/support/quantized_mutants.py). Cheap: the committed tiny model, no conversion; the
conversions are the roads tests of tests/adapters/test_adapter_litert_quantized.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import quantized_mutants
from support.quantized_mutants import one_step_off

from harness import compare
from harness.judges import judge_for
from harness.judges.bit_exact import BitExactFigures, BitExactJudge, output_difference
from harness.judges.quantized import CostFigures, QuantizedJudge
from harness.reference.litert_int8_lstm import run_model
from harness.spec import Case

TINY_MODEL = Path(__file__).parent / "data" / "litert-int8-lstm-tiny.tflite"
TINY = dict(cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5,
            dtype="float32", quantization={"calibration_batches": 4})
OUTPUT = "StatefulPartitionedCall:0"


def _tiny() -> tuple[bytes, np.ndarray, np.ndarray]:
    model = TINY_MODEL.read_bytes()
    x = np.random.default_rng(3).standard_normal((2, 4, 2)).astype(np.float32)
    return model, x, run_model(model, x).output


def _scale(model: bytes) -> float:
    from harness.frameworks import litert_flatbuffer

    flat = litert_flatbuffer.read(model)
    [dequantize] = [op for op in flat.ops if op.name == "DEQUANTIZE"]
    return flat.grid(dequantize.inputs[0]).scale


def test_the_integer_references_own_output_is_bit_exact():
    model, x, y = _tiny()
    figures = BitExactFigures(CostFigures(), "litert-int8", (output_difference(model, x, y),))
    assert figures.exact
    assert figures.words().startswith("bit-exact: every output value equals the integer reference")


def test_one_output_value_one_step_off_is_diverged_and_named():
    model, x, y = _tiny()
    d = output_difference(model, x, one_step_off(y, _scale(model)))
    assert d.differing == (0, 0, 1, 0) and d.max_steps == 1 and d.per_step == 6
    figures = BitExactFigures(CostFigures(), "litert-int8", (d,))
    status, _ = BitExactJudge().plain(None, Case(name="q", **TINY), "litert-int8-ref", figures)
    assert status == compare.DIVERGED
    assert (f"not bit-exact against the integer reference (litert-int8, LiteRT's 8x8->16 LSTM "
            f"kernel): {OUTPUT}: 1 of 24 values differ (t=2: 1), up to 1 steps "
            f"off") == figures.words()


def test_the_figures_come_back_from_their_record():
    model, x, y = _tiny()
    d = output_difference(model, x, one_step_off(y, _scale(model)))
    figures = BitExactFigures(CostFigures(31.5, 33.0, 0.01), "litert-int8", (d,))
    assert BitExactFigures.from_record(figures.record()) == figures
    # run.json's pair record takes it (a field of its own, not the cost's float mapping)
    from harness.report.record import PairRecord

    kept = PairRecord.model_validate({"case": "q", "adapter": "litert-int8-ref", "status": "pass",
                                      figures.key: figures.record()})
    assert BitExactFigures.from_record(kept.model_dump()[figures.key]) == figures
    refused = BitExactFigures(CostFigures(31.5, 33.0), refused="op 1 has projection")
    assert BitExactFigures.from_record(refused.record()) == refused
    assert not refused.exact


def test_the_adapter_that_declares_the_reference_is_claimed_and_others_are_not():
    from harness.adapters.litert_quantized import LiteRTInt8, LiteRTInt8Ref

    lstm, gru = Case(name="q", **TINY), Case(name="g", **TINY | {"cell": "gru"})
    assert isinstance(judge_for(lstm, LiteRTInt8Ref()), BitExactJudge)
    assert type(judge_for(lstm, LiteRTInt8())) is QuantizedJudge
    assert type(judge_for(gru, LiteRTInt8Ref())) is QuantizedJudge
    assert type(judge_for(lstm, None)) is QuantizedJudge


@pytest.mark.parametrize("found, code", [((5, 5, 0), 0), ((4, 5, 0), 1), ((5, 5, 1), 1)])
def test_the_seed_mode_exits_1_when_a_bug_survives_or_a_clean_kernel_fails(
        monkeypatch, capsys, found, code):
    asked = []

    def kill_rate(cases):
        asked.append([c.name for c in cases])
        return (*found, ["a line"])

    monkeypatch.setattr(quantized_mutants, "kill_rate", kill_rate)
    assert quantized_mutants.main(["--weights", "normal:0.5", "--seeds", "40-41"]) == code
    assert asked == [["quantized-lstm-forward-seed40", "quantized-lstm-forward-seed41"]]
    assert f"killed {found[0]} of {found[1]}" in capsys.readouterr().out
