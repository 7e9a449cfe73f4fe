"""``rnn-harness compare`` on OpenVINO IR (issue 58): an ONNX LSTM (and a torch GRU) against
the IR ``openvino.convert_model`` and ``save_model`` make of it, f32 and f16-compressed; one
gate block perturbed in the .bin; the precision each run used; hostile .xml files as one line.
Every fixture is built here with torch and openvino (the hostile files as text)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.compare import PASS
from harness.cpu_flags import cpu_flags

I, H = 3, 4


def _cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main(["compare", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _convert(folder: Path, name: str, module_of) -> Path:
    """A torch module (``module_of(torch)``) saved as ``name.pt``, exported as ``name.onnx``,
    converted by OpenVINO and saved as IR with f32 weights (``name.xml``) and compressed to
    f16 (``name16.xml``)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    pytest.importorskip("openvino")
    sys.modules.setdefault("openvino_telemetry", None)  # as the adapters do: no usage event
    import openvino as ov

    torch.manual_seed(0)
    module = module_of(torch)
    torch.save(module.state_dict(), folder / f"{name}.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(5, 2, I),), str(folder / f"{name}.onnx"),
                          dynamo=False, opset_version=17)
    model = ov.convert_model(str(folder / f"{name}.onnx"))
    ov.save_model(model, str(folder / f"{name}.xml"), compress_to_fp16=False)
    ov.save_model(model, str(folder / f"{name}16.xml"), compress_to_fp16=True)
    return folder


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    return _convert(tmp_path_factory.mktemp("compare-ir"), "lstm",
                    lambda torch: torch.nn.LSTM(I, H))


@pytest.fixture(scope="module")
def converted_gru(tmp_path_factory) -> Path:
    return _convert(tmp_path_factory.mktemp("compare-ir-gru"), "gru",
                    lambda torch: torch.nn.GRU(I, H))


def _expected_default() -> str:
    """OpenVINO's CPU default inference precision here: bf16 on an x86 CPU with AVX-512 BF16
    or AMX, f32 on one without."""
    flags = set(cpu_flags().get("flags", []))
    return "bf16" if flags & {"avx512_bf16", "amx_bf16"} else "f32"


def test_an_onnx_lstm_is_the_same_as_its_ir_at_both_precisions(converted, capsys) -> None:
    code, out, err = _cli(capsys, converted / "lstm.onnx", converted / "lstm.xml")
    assert code == 0, out + err
    assert "shipped 'LSTMSequence_" in out and "= original's 'main/LSTM'" in out
    default = _expected_default()
    assert (f"pass (openvino, INFERENCE_PRECISION_HINT (default) {default}); "
            "pass (openvino, INFERENCE_PRECISION_HINT f32)") in out
    result = harness.compare_models(converted / "lstm.onnx", converted / "lstm.xml")
    p = result.pairings[0]
    assert result and p.weights.status == PASS
    assert [o.figures.adapter for o in p.all_outputs] == [
        f"openvino, INFERENCE_PRECISION_HINT (default) {default}",
        "openvino, INFERENCE_PRECISION_HINT f32"]
    assert [o.status for o in p.all_outputs] == [PASS, PASS]
    assert (p.shipped.case.batch, p.shipped.case.seq_len) == (2, 5)  # fixed by the file


@pytest.mark.roads
def test_a_gru_is_the_same_as_its_f16_compressed_ir(converted_gru, capsys) -> None:
    converted = converted_gru
    code, out, err = _cli(capsys, converted / "gru.pt", converted / "gru16.xml")
    assert code == 0, out + err
    assert "| GRU I=3 H=4 forward | pass " in out
    result = harness.compare_models(converted / "gru.onnx", converted / "gru16.xml")
    assert result and result.pairings[0].shipped.dtype == "float16"
    assert [o.status for o in result.pairings[0].all_outputs] == [PASS, PASS]


@pytest.mark.roads
def test_one_gate_block_perturbed_in_the_bin_differs_naming_it(
        converted, capsys, tmp_path: Path) -> None:
    from harness.readers.openvino_ir import parse_xml

    xml, bin_ = tmp_path / "bad.xml", tmp_path / "bad.bin"
    xml.write_bytes((converted / "lstm.xml").read_bytes())
    data = bytearray((converted / "lstm.bin").read_bytes())
    graph = parse_xml(xml, None)
    seq = next(op for op in graph.ops.values() if op.type == "LSTMSequence")
    w = graph.source(seq, 4)
    assert w is not None and w.type == "Const" and w.data["element_type"] == "f32"
    offset = int(w.data["offset"])
    block = np.frombuffer(bytes(data[offset:offset + H * I * 4]), "<f4") + 0.5
    data[offset:offset + H * I * 4] = block.astype("<f4").tobytes()  # OpenVINO's first: f
    bin_.write_bytes(bytes(data))
    code, out, err = _cli(capsys, converted / "lstm.onnx", xml, "--budget", "0.5")
    assert code == 1, out + err
    assert "weights: 1 of 16 blocks differ (forward/W_f; max abs 0.5)" in out


# Hostile files: no framework needed ----------------------------------------------------------

LAYERS = """<net name="n" version="11"><layers>
<layer id="0" name="w" type="Const" version="opset1">
<data element_type="f32" shape="1, 16, 3" offset="{offset}" size="192"/>
<output><port id="0" precision="FP32"><dim>1</dim><dim>16</dim><dim>3</dim></port></output>
</layer>
<layer id="1" name="seq" type="LSTMSequence" version="opset5">
<data direction="forward" hidden_size="4" activations="sigmoid, tanh, tanh" clip="0"/>
<input><port id="0" precision="FP32"><dim>2</dim><dim>5</dim><dim>3</dim></port></input>
</layer></layers>
<edges><edge from-layer="0" from-port="0" to-layer="1" to-port="4"/></edges>{tail}</net>"""


def test_an_xml_with_a_doctype_or_entities_is_refused_in_one_line(capsys, tmp_path) -> None:
    bomb = ('<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY a "aaaaaaaaaa">'
            '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
            + LAYERS.format(offset=0, tail="<x>&b;</x>"))
    (tmp_path / "bomb.xml").write_text(bomb)
    (tmp_path / "bomb.bin").write_bytes(b"\0" * 192)
    code, out, err = _cli(capsys, tmp_path / "bomb.xml", tmp_path / "bomb.xml")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "declares a DOCTYPE or entities: refused" in err


def test_a_constant_past_the_end_of_the_bin_is_refused_in_one_line(capsys, tmp_path) -> None:
    (tmp_path / "short.xml").write_text(LAYERS.format(offset=64, tail=""))
    (tmp_path / "short.bin").write_bytes(b"\0" * 200)
    code, out, err = _cli(capsys, tmp_path / "short.xml", tmp_path / "short.xml")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "constant 'w': bytes 64..256 lie past the end of short.bin (200 bytes)" in err


def test_an_ir_with_cells_in_a_loop_names_them_as_not_read(capsys, tmp_path) -> None:
    ti = ('<net name="n" version="11"><layers><layer id="0" name="ti" type="TensorIterator" '
          'version="opset1"><body><layers><layer id="0" name="c" type="LSTMCell" '
          'version="opset4"/></layers></body></layer></layers><edges/></net>')
    (tmp_path / "ti.xml").write_text(ti)
    code, out, err = _cli(capsys, tmp_path / "ti.xml", tmp_path / "ti.xml")
    assert code == 2 and err.count("\n") == 1
    assert "recurrent cells inside a loop are not read: TensorIterator 'ti' (body: LSTMCell)" \
        in err
