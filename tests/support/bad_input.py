"""What the bad-input tests of ``tests/inputs/`` share: a small good case file to spoil, the
``run`` command called in-process, a torch-layout weights file, and a planted secret outside the
files given whose bytes must reach no output and no error line."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.cli import main
from support.cli import one_line

GOOD = "name: good\ncell: lstm\ninput_size: 2\nhidden_size: 3\nbatch: 2\nseq_len: 3\n"
SECRET = b"TOPSECRET-credentials-" * 8  # 176 bytes, a whole number of float64 values


def run_cli(args: list[str], capsys) -> tuple[int, list[str], str]:
    code = main(["run", *args])
    captured = capsys.readouterr()
    return code, captured.err.splitlines(), captured.out


def torch_lstm_npz(path: Path, I: int, H: int, value: float) -> None:
    rng = np.random.default_rng(0)
    np.savez(path, weight_ih_l0=rng.uniform(-1, 1, (4 * H, I)) * value,
             weight_hh_l0=rng.uniform(-1, 1, (4 * H, H)), bias_ih_l0=np.zeros(4 * H),
             bias_hh_l0=np.zeros(4 * H))


def plant_secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    path = outside / "credentials"
    path.write_bytes(SECRET)
    return path


def one_line_without_secret(code: int, err: list[str], *words: str) -> str:
    __tracebackhide__ = True
    return one_line(code, err, *words, absent=("TOPSECRET",))
