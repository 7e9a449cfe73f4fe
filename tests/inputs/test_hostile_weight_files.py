"""Weight files crafted against the readers (issue 46): the .msgpack reader bounds what msgpack
builds, not only the file's size; the ONNX reader reads only what the recurrent nodes use, and
refuses what it cannot read faithfully; legacy torch.save files are refused; ambiguities are
errors naming the file, never a silent choice.

Peak memory is measured in a fresh process (``ru_maxrss``: the peak of the process, so the
imports are done before the baseline is taken).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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
    env = {"RNN_HARNESS_MAX_MEMORY": str(limit), "PATH": "/usr/bin:/bin",
           "OPENBLAS_NUM_THREADS": "1"}
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
