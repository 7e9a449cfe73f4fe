"""The reproducer folder as files (harness/repro/write.py): names bounded and kept inside the
folder, README-only where no script can be written, ONNX test data onnx reads, and no
framework imported to write any of it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import harness.repro
from harness.repro.record import ReproRecord
from harness.repro.write import safe_name, tensor_proto, write_all

FRAMEWORKS = {"torch", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "flax", "onnx",
              "onnxruntime", "openvino", "ai_edge_litert"}


def test_writing_a_reproducer_imports_no_framework():
    for path in Path(harness.repro.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not {n.split(".")[0] for n in names} & FRAMEWORKS, (path.name, names)


def _record(case: str, adapter: str = "keras") -> ReproRecord:
    spec = dict(cell="gru", input_size=1, hidden_size=1, num_layers=1, batch=1, seq_len=1,
                dtype="float32", dir_mode="forward", directions=[0], reset_after=True,
                gate_clip=None, forget_bias=0.0, has_cell_state=False)
    return ReproRecord(case=case, adapter=adapter, title="Keras GRU", status="DIVERGED",
                       reason="", spec=spec, atol=1e-5, rtol=1e-5, canonical={}, inputs={},
                       reference={}, handed=None, first={"output": "y", "layer": 0,
                                                         "direction": 0, "t": 2})


def test_names_are_bounded_distinct_and_inside(tmp_path):
    long = "a" * 300
    folders = write_all(tmp_path, [(_record(long), []), (_record(long), []),
                                   (_record("..", "../x"), [])])
    assert len({f.resolve() for f in folders}) == 3
    for f in folders:
        assert tmp_path.resolve() in f.resolve().parents
        assert all(len(part) <= 80 and not part.startswith(".")
                   for part in f.relative_to(tmp_path).parts)
    assert safe_name("../..") == "x" and safe_name("a/b c") == "a_b_c"


def test_an_adapter_that_records_nothing_gets_a_readme_saying_why(tmp_path):
    [folder] = write_all(tmp_path, [(_record("c"), ["torch-cpu"])])
    assert sorted(p.name for p in folder.iterdir()) == ["README.md"]
    text = (folder / "README.md").read_text()
    assert "not available" in text and "does not record" in text
    assert "`y` layer 0, direction 0, step t=2" in text and "`torch-cpu`" in text


@pytest.mark.onnx
def test_tensor_proto_is_what_onnx_reads():
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    for a in (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5,
              np.array([3, 1], dtype=np.int32), np.float16([0.5, -2.0]), np.zeros((0, 2))):
        t = onnx.TensorProto()
        t.ParseFromString(tensor_proto(a, "X"))
        assert t.name == "X"
        back = numpy_helper.to_array(t)
        assert back.dtype == a.dtype and back.shape == a.shape
        np.testing.assert_array_equal(back, a)
