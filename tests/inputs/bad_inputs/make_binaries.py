"""Write the binary members of the bad-input corpus: malformed .npz files and non-text YAML.

The files are committed (a few hundred bytes each) so that ``rnn-harness run
tests/inputs/bad_inputs/X.yaml`` reproduces each error by hand; ``test_bad_case_files.py`` checks
that this script still makes exactly those bytes. Run
``python tests/inputs/bad_inputs/make_binaries.py`` after changing it. Every case file using
these is an LSTM with input_size 2, hidden_size 3, batch 2, seq_len 3 (torch layout:
weight_ih_l0 [12, 2], weight_hh_l0 [12, 3], biases [12]).
"""

from __future__ import annotations

import io
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
_DATE = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: the same script makes the same bytes


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(array), allow_pickle=True)
    return buf.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name, date_time=_DATE), data)
    return buf.getvalue()


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """What np.savez writes, with fixed timestamps."""
    return zip_bytes({f"{k}.npy": npy_bytes(v) for k, v in arrays.items()})


def torch_weights(**changes: np.ndarray | None) -> dict[str, np.ndarray]:
    """A valid torch-layout LSTM (I=2, H=3); ``name=None`` drops a tensor."""
    rng = np.random.default_rng(0)
    w = {
        "weight_ih_l0": rng.uniform(-0.5, 0.5, (12, 2)),
        "weight_hh_l0": rng.uniform(-0.5, 0.5, (12, 3)),
        "bias_ih_l0": rng.uniform(-0.5, 0.5, 12),
        "bias_hh_l0": rng.uniform(-0.5, 0.5, 12),
    }
    for k, v in changes.items():
        if v is None:
            w.pop(k)
        else:
            w[k] = v
    return w


def inputs(**changes: np.ndarray | None) -> dict[str, np.ndarray]:
    """Valid inputs of the corpus cases (B=2, T=3, I=2, one layer of H=3)."""
    rng = np.random.default_rng(1)
    d = {"x": rng.normal(size=(2, 3, 2)), "h0": np.zeros((1, 2, 3)), "c0": np.zeros((1, 2, 3)),
         "seq_lengths": np.array([3, 2])}
    for k, v in changes.items():
        if v is None:
            d.pop(k)
        else:
            d[k] = v
    return d


def _nan() -> bytes:
    w = torch_weights()
    w["weight_hh_l0"][1, 2] = np.nan
    return npz_bytes(w)


def _inf() -> bytes:
    w = torch_weights()
    w["bias_ih_l0"][4] = np.inf
    return npz_bytes(w)


def _lying_header() -> bytes:
    """An .npy header claiming 10**12 float64 values (8 TB) over 8 bytes of data: a loader that
    trusts the header allocates first and reads later."""
    header = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    members = {f"{k}.npy": npy_bytes(v) for k, v in torch_weights().items()}
    members["weight_ih_l0.npy"] = buf.getvalue() + b"\0" * 8
    return zip_bytes(members)


def _non_utf8() -> bytes:
    return ("# Bad input: Latin-1 bytes in a case file.\n"
            "# expect: non-utf8.yaml: \n# expect: not UTF-8\n"
            "name: caf\xe9\ncell: lstm\ninput_size: 2\nhidden_size: 3\n").encode("latin-1")


def _deep_nesting() -> bytes:
    head = ("# Bad input: lists nested 5000 deep (PyYAML composes recursively).\n"
            "# expect: deep-nesting.yaml\n# expect: nested too deeply\n"
            "name: deep-nesting\ncell: lstm\ninput_size: 2\nhidden_size: 3\ndescription: ")
    return (head + "[" * 5000 + "]" * 5000 + "\n").encode()


OK = npz_bytes(torch_weights())

FILES: dict[str, Callable[[], bytes]] = {
    "weights-ok.npz": lambda: OK,
    "weights-nan.npz": _nan,
    "weights-inf.npz": _inf,
    "weights-transposed.npz": lambda: npz_bytes(torch_weights(weight_ih_l0=np.zeros((2, 12)))),
    "weights-missing.npz": lambda: npz_bytes(torch_weights(bias_hh_l0=None)),
    "weights-extra.npz": lambda: npz_bytes(torch_weights(weight_hr_l0=np.zeros((2, 3)))),
    "weights-int.npz": lambda: npz_bytes({k: np.ones(v.shape, dtype=np.int32)
                                          for k, v in torch_weights().items()}),
    "weights-complex.npz": lambda: npz_bytes({k: v.astype(np.complex128)
                                              for k, v in torch_weights().items()}),
    # an object array: np.save pickles it; loading it would run pickle (a plain list here)
    "weights-object.npz": lambda: npz_bytes(torch_weights(
        weight_ih_l0=np.array([[1.0, 2.0], "not a number"], dtype=object))),
    "weights-truncated.npz": lambda: OK[: len(OK) * 6 // 10],
    "weights-text.npz": lambda: b"weight_ih_l0 = [[0.1, 0.2], ...]\n",
    "weights-npy.npz": lambda: npy_bytes(np.zeros((12, 2))),
    "weights-lying-header.npz": _lying_header,
    "weights-foreign-member.npz": lambda: zip_bytes({
        **{f"{k}.npy": npy_bytes(v) for k, v in torch_weights().items()},
        "notes.txt": b"exported by hand\n"}),
    # what torch.save writes, named .npz: a zip holding a pickle (a harmless one here)
    "weights-torch.npz": lambda: zip_bytes({"weights/data.pkl": b"\x80\x02}q\x00.",
                                           "weights/version": b"3\n"}),
    "inputs-capital-x.npz": lambda: npz_bytes(inputs(x=None, X=np.zeros((2, 3, 2)))),
    "inputs-x-shape.npz": lambda: npz_bytes(inputs(x=np.zeros((3, 2, 2)))),
    "inputs-nan.npz": lambda: npz_bytes(inputs(x=np.full((2, 3, 2), np.nan))),
    "inputs-h0-shape.npz": lambda: npz_bytes(inputs(h0=np.zeros((2, 3)))),
    "inputs-lengths-zero.npz": lambda: npz_bytes(inputs(seq_lengths=np.array([0, 3]))),
    "inputs-lengths-long.npz": lambda: npz_bytes(inputs(seq_lengths=np.array([3, 7]))),
    "inputs-lengths-float.npz": lambda: npz_bytes(inputs(seq_lengths=np.array([3.0, 2.0]))),
    "inputs-object.npz": lambda: npz_bytes(inputs(x=np.array([None, 1], dtype=object))),
    "non-utf8.yaml": _non_utf8,
    "deep-nesting.yaml": _deep_nesting,
}


def main(folder: Path = HERE) -> None:
    for name, make in FILES.items():
        (folder / name).write_bytes(make())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
