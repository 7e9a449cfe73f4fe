"""Weight files crafted against the readers (issue 46): the .msgpack reader bounds what msgpack
builds, not only the file's size; the ONNX reader reads only what the recurrent nodes use, and
refuses what it cannot read faithfully; legacy torch.save files are refused; ambiguities are
errors naming the file, never a silent choice.

Peak memory is measured in a fresh process (``ru_maxrss``: the peak of the process, so the
imports are done before the baseline is taken).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.protobuf import varint as _varint

from harness.cli import main
from harness.errors import WeightsError
from harness.readers import read_native
from harness.spec import Case

ROOT = Path(__file__).parents[2]
I, H = 2, 3
MiB = 2**20
LSTM = Case(name="c", cell="lstm", input_size=I, hidden_size=H)


def cli(argv: list[str], capsys) -> list[str]:
    code = main(argv)
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], (code, err)
    return err


_PEAK = """
import json, resource, sys
from harness.errors import WeightsError
from harness.readers import infer_case, read_native
from harness.spec import Case

path, layout, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
case = Case(name="c", cell="lstm", input_size=2, hidden_size=3)
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
before, errors = peak(), []
for read in (lambda: read_native(path, layout, case, max_bytes=limit), lambda: infer_case(path)):
    try:
        read()
        errors.append(None)
    except WeightsError as exc:
        errors.append(str(exc))
print(json.dumps([peak() - before, errors]))
"""


def peak_of_reading(path: Path, layout: str, limit: int) -> tuple[int, list[str | None]]:
    """Bytes the peak grew by while ``read_native`` and ``infer_case`` (under the limit set by
    RNN_HARNESS_MAX_MEMORY) read ``path``, in a fresh process, and their errors."""
    env = {**os.environ, "RNN_HARNESS_MAX_MEMORY": str(limit), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path), layout, str(limit)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    grown, errors = json.loads(done.stdout)
    return grown, errors


# .msgpack ----------------------------------------------------------------------------------

def _flax_bytes(tree: object) -> bytes:
    """``flax.serialization.to_bytes`` of a tree of float arrays, without flax: an array is
    msgpack extension 1 holding (shape, dtype name, C-order bytes)."""
    import msgpack

    def ext(a: object) -> object:
        if isinstance(a, np.ndarray):
            return msgpack.ExtType(1, msgpack.packb((a.shape, a.dtype.name, a.tobytes())))
        raise TypeError(type(a))

    return msgpack.packb(tree, default=ext)


def _lstm_tree() -> dict:
    rng = np.random.default_rng(0)
    return {f"{k}{g}": {"kernel": rng.uniform(-1, 1, (I if k == "i" else H, H)).astype("f4"),
                        **({"bias": np.zeros(H, "f4")} if k == "h" else {})}
            for k in "ih" for g in "ifgo"}


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB")
def test_a_msgpack_of_empty_maps_is_refused_before_it_is_unpacked(tmp_path, capsys, monkeypatch):
    """8 MB of one-byte empty maps (80 arrays of 100000) became 8 million dicts, hundreds of
    MB, under a 50 MiB limit: now counted in the bytes and refused, the peak the file's size."""
    pytest.importorskip("msgpack")
    many = b"\xdd" + (100_000).to_bytes(4, "big") + b"\x80" * 100_000
    path = tmp_path / "maps.msgpack"
    path.write_bytes(b"\x81\xa1a\xdc\x00\x50" + many * 80)
    assert 8 * 10**6 < path.stat().st_size < 50 * MiB
    grown, errors = peak_of_reading(path, "flax", 50 * MiB)
    for error in errors:
        assert error and error.startswith(f"{path}: holds more than ") and "msgpack objects" \
            in error and "refused before unpacking" in error, errors
    assert grown < 2 * path.stat().st_size + 8 * MiB, grown  # the file read, nothing built
    monkeypatch.setenv("RNN_HARNESS_MAX_MEMORY", "50MiB")
    err = cli(["convert", str(path), str(tmp_path / "o.npz"), "--to", "torch"], capsys)
    assert str(path) in err[0] and "msgpack objects" in err[0], err


def test_a_small_limit_still_reads_a_small_tree(tmp_path):
    path = tmp_path / "w.msgpack"
    path.write_bytes(_flax_bytes({"params": {"cell": _lstm_tree()}}))
    native, _ = read_native(path, "flax", LSTM, max_bytes=MiB)
    assert sorted(native) == sorted(f"layer0/forward/{k}/{n}" for k, v in _lstm_tree().items()
                                    for n in v)


@pytest.mark.parametrize("bad, words", [
    (b"\x81\xa1a\xc1", "starts no msgpack object"),
    (b"\x81\xa1a\xdd\xff\xff\xff\xff", "ends inside an object"),
    (b"\x81\xa1a\xdb\x00\x01\x00\x00", "a string of 65536 bytes"),
    (b"\x81\xa1a\xc6\x7f\xff\xff\xff", "a length past the end"),
    (b"\x80\x80", "1 bytes after the top map"),
    (b"\x81\xa1a" * 20 + b"\x80", "deeper than 16 levels"),
])
def test_a_malformed_msgpack_is_one_line_before_unpacking(bad, words, tmp_path):
    path = tmp_path / "bad.msgpack"
    path.write_bytes(bad)
    with pytest.raises(WeightsError, match=words) as err:
        read_native(path, "flax", LSTM, max_bytes=MiB)
    assert err.value.file == str(path)


def test_a_msgpack_map_with_a_key_twice_is_refused(tmp_path):
    """msgpack keeps the last of two equal keys: which kernel is read is the file's secret."""
    msgpack = pytest.importorskip("msgpack")
    tree = _lstm_tree()
    packer = msgpack.Packer()
    body = b"".join(packer.pack(k) + _flax_bytes(v) for k, v in tree.items())
    twice = b"".join(packer.pack(k) + _flax_bytes(v) for k, v in list(tree.items())[:1])
    path = tmp_path / "twice.msgpack"
    path.write_bytes(packer.pack_map_header(len(tree) + 1) + body + twice)
    with pytest.raises(WeightsError, match="a map holds the key 'ii' twice") as err:
        read_native(path, "flax", LSTM, max_bytes=MiB)
    assert err.value.file == str(path)


def test_two_names_that_read_as_one_are_refused(tmp_path):
    """``cell`` levels are dropped (nn.RNN's): ``layer0/forward/cell/ii`` and
    ``layer0/forward/ii`` would be one name, the second quietly replacing the first."""
    tree = _lstm_tree()
    path = tmp_path / "both.msgpack"
    path.write_bytes(_flax_bytes({"layer0": {"forward": {**tree, "cell": {"ii": tree["ii"]}}}}))
    with pytest.raises(WeightsError, match="both read as 'layer0/forward/ii/kernel'") as err:
        read_native(path, "flax", LSTM, max_bytes=MiB)
    assert err.value.file == str(path)


# .onnx -------------------------------------------------------------------------------------

def _onnx_model(path: Path, *, op: str = "LSTM", domain: str = "", attrs: dict | None = None,
                W: object = None, extra: tuple = ()) -> Path:
    """A one-node LSTM/GRU model: ``W`` an array or a TensorProto (default float32 zeros),
    ``extra`` more initializers the node does not use."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    G = 4 if op == "LSTM" else 3
    attrs = {"hidden_size": H} if attrs is None else attrs
    node = helper.make_node(op, ["X", "W", "R"], ["Y"], name="rnn", domain=domain, **attrs)
    W = np.zeros((1, G * H, I), np.float32) if W is None else W
    inits = [W if isinstance(W, TensorProto) else numpy_helper.from_array(W, "W"),
             numpy_helper.from_array(np.zeros((1, G * H, H), np.float32), "R"), *extra]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [1, 1, I])], [helper.make_tensor_value_info(
            "Y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    path.write_bytes(helper.make_model(graph, opset_imports=opsets).SerializeToString())
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB")
def test_an_unused_initializer_is_never_parsed(tmp_path):
    """A 9 MB model with an unused STRING initializer of three million one-byte strings: parsed
    whole (onnx.load, then every initializer converted) it reached ~300 MB under a 32 MiB
    limit; now its data stays bytes, and the model reads within the limit."""
    path = _onnx_model(tmp_path / "junk.onnx")
    # a second occurrence of ModelProto.graph (7), merged into the first by protobuf, holding
    # one initializer (5): dims (1) [3000000], data_type (2) STRING (8), name (8) "junk", and
    # string_data (6) b"x" three million times; written as bytes, as protobuf would encode it
    junk = b"\x08" + _varint(3_000_000) + b"\x10\x08" + b"\x42\x04junk" + b"\x32\x01x" * 3_000_000
    graph = b"\x2a" + _varint(len(junk)) + junk
    with path.open("ab") as f:
        f.write(b"\x3a" + _varint(len(graph)) + graph)
    assert path.stat().st_size > 9 * 10**6
    grown, errors = peak_of_reading(path, "onnx", 32 * MiB)
    assert errors == [None, None], errors
    assert grown < 32 * MiB, grown


def _typed(data_type: str, values: list) -> object:
    from onnx import TensorProto, helper

    return helper.make_tensor("W", getattr(TensorProto, data_type), [1, 4 * H, I], values)


@pytest.mark.parametrize("make, words", [
    (lambda p: _onnx_model(p, domain="com.example"), "an LSTM of the domain 'com.example', not "
                                                     "the ONNX operator"),
    (lambda p: _onnx_model(p, W=_typed("INT8", [7] * (4 * H * I))), "holds INT8 values; "
                                                                     "expected float"),
    (lambda p: _onnx_model(p, W=_typed("STRING", [b"1e3"] * (4 * H * I))), "holds STRING values"),
    (lambda p: _onnx_model(p, W=_typed("COMPLEX64", [1 + 2j] * (4 * H * I))),
     "holds COMPLEX64 values"),
    (lambda p: _onnx_model(p, attrs={"hidden_size": H, "activations": ["Sigmoid"]}),
     "has 1 activations ['Sigmoid']; expected 3 (3 per direction"),
    (lambda p: _onnx_model(p, attrs={"hidden_size": H, "activations": ["Relu", "Tanh", "Tanh"]}),
     "the harness reads Sigmoid or HardSigmoid gates with Tanh"),
    (lambda p: _onnx_model(p, attrs={"hidden_size": H, "direction": "sideways"}),
     "has direction='sideways'; expected forward, reverse or bidirectional"),
    (lambda p: _onnx_model(p, extra=(_typed("FLOAT", [1.0] * (4 * H * I)),)),
     "the model defines 'W' 2 times"),
    (lambda p: _onnx_model(p, attrs={"hidden_size": H, "activations": ["HardSigmoid", "Tanh",
                                                                       "Tanh"],
                                     "activation_alpha": [0.3]}), "HardSigmoid alpha [0.3"),
])
@pytest.mark.parametrize("with_case", [False, True])
def test_onnx_oddities_are_refused_naming_the_file(make, words, with_case, tmp_path, capsys):
    """What the reader cannot read faithfully is refused, with and without a case file (an
    LSTM of another domain computes what that domain says; INT8 or STRING weights were read as
    numbers, b'1e3' as 1000; COMPLEX64 lost its imaginary part with a warning)."""
    path = make(tmp_path / "odd.onnx")
    case = tmp_path / "c.yaml"
    case.write_text(f"name: c\ncell: lstm\ninput_size: {I}\nhidden_size: {H}\n")
    argv = (["convert", "--case", str(case), "--from", "onnx"] if with_case else ["convert"])
    err = cli([*argv, "--to", "torch", str(path), str(tmp_path / "o.npz")], capsys)
    assert err[0].startswith(f"rnn-harness: error: {path}: ") and words in err[0], err


def test_an_activation_the_case_does_not_say_is_refused(tmp_path):
    """HardSigmoid gates read into a sigmoid case would be compared against the wrong cell."""
    path = _onnx_model(tmp_path / "hard.onnx", attrs={
        "hidden_size": H, "activations": ["HardSigmoid", "Tanh", "Tanh"]})
    with pytest.raises(WeightsError, match="activations=.* the case says 'sigmoid'"):
        read_native(path, "onnx", LSTM, max_bytes=MiB)
    hard = LSTM.model_copy(update={"recurrent_activation": "hard_sigmoid_tf_keras"})
    native, _ = read_native(path, "onnx", hard, max_bytes=MiB)
    assert set(native) == {"W", "R"}


def test_a_used_tensor_declaring_more_than_the_limit_is_refused_unparsed(tmp_path):
    from onnx import TensorProto

    W = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1, 4 * H, 10**9])
    path = _onnx_model(tmp_path / "huge.onnx", W=W)
    with pytest.raises(WeightsError, match=r"initializer 'W', which declares dims "
                                           r"\[1, 12, 1000000000\] of FLOAT: 48000000000 bytes, "
                                           r"more than the memory"):
        read_native(path, "onnx", LSTM, max_bytes=MiB)


@pytest.mark.parametrize("name", ["w.onnx", "w.msgpack"])
def test_a_memory_refusal_of_sizes_read_from_a_file_names_it(name, tmp_path, capsys,
                                                             monkeypatch):
    path = tmp_path / name
    if name.endswith(".onnx"):
        _onnx_model(path)
    else:
        path.write_bytes(_flax_bytes(_lstm_tree()))
    monkeypatch.setenv("RNN_HARNESS_MAX_MEMORY", "1MiB")  # the file fits, the case's work not
    err = cli(["convert", str(path), str(tmp_path / "o.npz"), "--to", "torch"], capsys)
    assert err[0].startswith(f"rnn-harness: error: {path}: "), err
    assert "more than the memory limit of" in err[0], err


# .pt ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("tail", [b"", b"PK\x05\x06" + bytes(18)])  # a zip's end, appended
def test_a_legacy_torch_save_file_is_refused_before_torch_loads_it(tail, tmp_path, capsys):
    """Before torch 1.6 (and with _use_new_zipfile_serialization=False) a file's storage sizes
    are declared in its pickle, and torch allocates them before reading: they cannot be
    checked, so the file is refused (a zip's end appended does not make it one to torch)."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "old.pt"
    state = {"weight_ih_l0": torch.zeros(4 * H, I), "weight_hh_l0": torch.zeros(4 * H, H)}
    torch.save(state, path, _use_new_zipfile_serialization=False)
    path.write_bytes(path.read_bytes() + tail)
    with pytest.raises(WeightsError, match=r"legacy format .* cannot be checked against the "
                                           r"memory limit") as err:
        read_native(path, "torch", LSTM, max_bytes=MiB)
    assert err.value.file == str(path)
    err = cli(["convert", str(path), str(tmp_path / "o.npz"), "--to", "onnx"], capsys)
    assert str(path) in err[0] and "legacy format" in err[0], err
