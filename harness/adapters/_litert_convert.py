"""A quantizing conversion in a process of its own: ``python -m harness.adapters._litert_convert
DIR`` reads ``DIR/saved_model`` (the deployed tf_keras model, saved by the parent),
``DIR/calibration.npz`` (the representative batches, ``x`` [N, B, T, I]) and ``DIR/scheme``
(one of :data:`SCHEMES`), and writes ``DIR/model.tflite``, or ``DIR/refused`` with the
converter's message where the converter refuses the model.

The converter is not run in the harness's process because it can die there: converting a GRU
to full integer ends the process with SIGSEGV (tensorflow#87468, TensorFlow 2.21). A dead child
is a finding the parent reports (:func:`convert_in_child`), not a dead run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

SCHEMES = ("dynamic", "int8", "16x8")
CHILD_TIMEOUT_S = 600.0


class ConversionDied(Exception):
    """The converter's process ended by a signal or a non-zero exit without a refusal."""

    def __init__(self, message: str, signal_name: str | None) -> None:
        super().__init__(message)
        self.signal_name = signal_name


class ConversionRefused(Exception):
    """The converter refused the model (``ConverterError``); the message is the converter's."""


def configure(tf, converter, scheme: str, calibration) -> None:
    """The converter options of a quantization ``scheme``; float input and output kept (the
    converter's default: ``QUANTIZE`` / ``DEQUANTIZE`` inside the model)."""
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if scheme == "dynamic":  # weights int8, activations float
        return

    def representative():
        for x in calibration:
            yield {"x": x}

    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if scheme == "int8" else
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]


def main(folder: Path) -> int:
    import numpy as np

    from harness.frameworks.tf import import_tf

    tf = import_tf()
    # the saved model's loading and the converter's passes log at INFO and WARNING ("Compiled
    # the loaded model, but ..."); the parent reads the last stderr line of a failed child as
    # its reason, which must be the error
    tf.get_logger().setLevel("ERROR")
    scheme = (folder / "scheme").read_text().strip()
    calibration = np.load(folder / "calibration.npz")["x"].astype(np.float32)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(folder / "saved_model"))
    configure(tf, converter, scheme, calibration)
    try:
        model = converter.convert()
    except Exception as exc:  # ConverterError: the converter's own words for the pair
        (folder / "refused").write_text(f"{type(exc).__name__}: {exc}")
        return 0
    (folder / "model.tflite").write_bytes(model)
    return 0


def convert_in_child(folder: Path, command: list[str] | None = None) -> bytes:
    """Run :func:`main` on ``folder`` in a new Python process (``command``: another child, for
    tests): the ``.tflite`` bytes, or ConversionRefused (the converter's message) or
    ConversionDied (the signal or exit code)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = command or [sys.executable, "-m", "harness.adapters._litert_convert", str(folder)]
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S)
    if (folder / "refused").exists():
        raise ConversionRefused((folder / "refused").read_text())
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        raise ConversionDied(f"the converter's process died with {name}", name)
    if done.returncode != 0 or not (folder / "model.tflite").exists():
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        raise ConversionDied(f"the converter's process exited with {done.returncode}: "
                             f"{tail[0][:300]}", None)
    return (folder / "model.tflite").read_bytes()


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
