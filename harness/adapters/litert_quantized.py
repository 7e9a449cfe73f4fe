"""The quantized LiteRT adapters: the deployed tf_keras model (:mod:`._litert_deployed`, ``y`` its
only output, zero initial states) converted with a quantization and run in the LiteRT
interpreter on CPU, float input and output kept (``QUANTIZE`` / ``DEQUANTIZE`` inside):

- ``litert-int8``: full integer (a representative dataset, ``TFLITE_BUILTINS_INT8``), the
  interpreter's default ``BUILTIN`` kernels, its distance from ``BUILTIN_REF`` in its reason;
- ``litert-int8-ref``: the same model under ``BUILTIN_REF``, the reference kernels;
- ``litert-dynamic``: dynamic range (weights int8, activations float, quantized per row by the
  hybrid kernel at run time);
- ``litert-int16x8``: 16-bit activations, 8-bit weights.

They run the cases with a ``quantization:`` key; calibration uses the case's own input
distribution at its batch and sequence length (:func:`harness.quantization.calibration_inputs`).
Each conversion runs in a process of its own (:mod:`._litert_convert`): a converter that dies
is an error row naming the signal, or, for a crash the known-bug registry declares of the
adapter (:data:`harness.known_bugs.KNOWN_BUGS`, an entry with a ``crash``), a known upstream bug;
where such an entry applies and the converter converts the model, the pair "looks fixed". A
model none of whose recurrent ops reads an integer tensor is an error row ("nothing was
quantized"): a quantized pair that passes on a float model tests nothing. Where the
dynamic-range converter leaves every weight float by design (tensors under 1024 elements:
:func:`too_small_for_dynamic_range`), ``litert-dynamic`` is not applicable, with that reason.
The pair is judged by :func:`harness.quantization.judge` (docs/quantization.md), and
``litert-int8-ref``'s LSTM pairs to the bit against the integer reference
(:mod:`harness.judges.bit_exact`, reading the converted model from ``Outputs.models``); where the
converted model declares two grids for one set of integers
(:func:`harness.frameworks.litert_flatbuffer.grid_conflict_words`), the pair's reason says where.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from harness import known_bugs
from harness.adapters import _litert_convert
from harness.adapters._keras import import_tf_keras, layer_reasons
from harness.adapters._litert import DTYPE_REASON, litert_version, quiet_converter
from harness.adapters._litert_deployed import (
    DeployedTfKeras,
    deployed_model,
    feeds,
    final_states,
    handed,
    invoke,
    ops_note,
    ops_of,
    run_signature,
)
from harness.adapters.base import AdapterFault, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import KnownCrashGone, KnownUpstreamCrash, NotApplicable
from harness.frameworks import litert_flatbuffer
from harness.frameworks.litert import import_litert
from harness.grids import QuantizedModel
from harness.quantization import calibration_inputs
from harness.spec import Case

ROUTE = ("tf_keras Model (y only) saved as a SavedModel, TFLiteConverter.from_saved_model in a "
         "process of its own")
ZERO_STATES = "a deployed quantized model starts from zero states (its states are the op's own)"
NO_FUSED_GRU_DYNAMIC = ("TFLite has no fused GRU op: a dynamic-range GRU is a WHILE loop whose "
                        "weights the harness does not map back to the gates")
UPSTREAM_16X8 = "tensorflow/tensorflow#59626"
# The converter's dynamic-range quantization leaves a weight tensor of fewer elements float
# (min_elements_for_weights); the fused LSTM's weights are one tensor per gate, H x I and H x H
DYNAMIC_MIN_ELEMENTS = 1024


# the last conversion (QuantizedLiteRT.convert): its model, or how it failed
_CONVERTED: dict[tuple[str, str], bytes | Exception] = {}


class QuantizedLiteRT(DeployedTfKeras):
    """A quantization ``scheme`` of :mod:`._litert_convert` run under ``op_resolver`` (an
    ``ai_edge_litert`` ``OpResolverType`` name; None: the interpreter's default)."""

    named_only = "a conversion costs seconds a model, in a process of its own"
    quantized = True
    scheme = "int8"
    op_resolver: str | None = None
    # another op resolver the same model also runs under: the pair's reason gives how many
    # output steps the two kernels are apart (tensorflow#53763 is such a difference)
    beside: str | None = None
    # the integer reference the pair must equal to the bit (harness/judges/bit_exact.py, which
    # reads the converted model from Outputs.models["tflite"]); None: judged in output steps
    bit_exact_reference: str | None = None
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        recurrent_activations=frozenset({"sigmoid"}),
        variable_lengths=False,
        initial_state=False,
        reasons=layer_reasons("tf_keras") | {
            "dtypes": DTYPE_REASON,
            "variable_lengths": "a deployed fused model has no lengths (a mask converts to a "
                                "WHILE loop)",
            "initial_state": ZERO_STATES,
            "recurrent_activations": "the quantized LSTM kernel's gates are sigmoid only",
            "gradients": "a converted LiteRT model is inference only (no backward pass)",
        },
    )

    def check_available(self) -> None:
        super().check_available()
        import_litert()

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "ai_edge_litert": litert_version(), "converter": ROUTE,
                "scheme": self.scheme, "op_resolver": self.op_resolver or "AUTO"}

    def convert(self, case: Case, native: dict[str, np.ndarray]) -> bytes:
        """The quantized ``.tflite`` of the case (a child process converts it), once per case,
        weights and scheme in a process: ``litert-int8-ref`` runs the model ``litert-int8``
        converted."""
        digest = hashlib.sha256(case.model_dump_json(exclude={"name"}).encode())
        for name in sorted(native):
            digest.update(name.encode() + np.ascontiguousarray(native[name]).tobytes())
        key = (digest.hexdigest(), self.scheme)
        if key not in _CONVERTED:
            _CONVERTED.clear()  # one kept: the int8 pair's model (or crash), for int8-ref
            try:
                _CONVERTED[key] = self._convert(case, native)
            except (KnownUpstreamCrash, AdapterFault, _litert_convert.ConversionRefused) as exc:
                _CONVERTED[key] = exc
        got = _CONVERTED[key]
        if isinstance(got, Exception):
            raise got
        declared = known_bugs.known_crash(case, self.name, None)
        if declared is not None:  # converted where the registry says the converter dies
            raise KnownCrashGone(
                f"expected the converter to die with {declared.crash} (known upstream bug "
                f"{declared.upstream}) but it converted the model: {declared.looks_fixed()}",
                declared.upstream)
        return got

    def _convert(self, case: Case, native: dict[str, np.ndarray]) -> bytes:
        tf, K = import_tf_keras()
        with tempfile.TemporaryDirectory(prefix="rnn-harness-tflite-") as top:
            folder = Path(top)
            with tf.device("/CPU:0"):
                model = deployed_model(K, tf, case, native, activation=self.activations[
                    case.recurrent_activation], states=False)
                with quiet_converter(tf):  # "Compiled the loaded model, but ..." per save
                    model.save(folder / "saved_model", save_format="tf")
            np.savez(folder / "calibration.npz", x=calibration_inputs(case).astype(np.float32))
            (folder / "scheme").write_text(self.scheme)
            try:
                return _litert_convert.convert_in_child(folder)
            except _litert_convert.ConversionDied as exc:
                declared = known_bugs.known_crash(case, self.name, exc.signal_name)
                if declared is not None:  # the row names the signal and the upstream bug
                    raise KnownUpstreamCrash(f"{exc} converting to {self.scheme}",
                                             declared.upstream) from None
                raise AdapterFault(f"{exc} converting to {self.scheme}") from None

    def kernel_model(self, model: bytes) -> bytes:
        """The model the interpreter runs: the converted one (a planted bug changes it, while
        the yardstick reads the converted one)."""
        return model

    def kernel_feeds(self, feeds: dict[str, np.ndarray], quantized: QuantizedModel
                     ) -> dict[str, np.ndarray]:
        """What the interpreter is fed: the case's inputs (a planted bug shifts them as a
        kernel reading them wrongly would)."""
        return feeds

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        Interpreter = import_litert()
        try:
            model = self.convert(case, native)
        except _litert_convert.ConversionRefused as exc:
            raise self.refused(exc) from None
        ops = ops_of(Interpreter, model)
        integer = litert_flatbuffer.integer_recurrent_tensors(model)
        if not integer:
            raise AdapterFault(f"nothing was quantized: no integer tensor in the recurrent ops "
                               f"(converted ops {', '.join(ops)})")
        if "WHILE" in ops or litert_flatbuffer.FUSED_LSTM not in ops:
            raise AdapterFault(f"the converter did not emit the fused "
                               f"{litert_flatbuffer.FUSED_LSTM} kernel: converted ops "
                               f"{', '.join(ops)}")
        quantized = litert_flatbuffer.quantized_model(case, model, self.scheme)
        ran = self.kernel_model(model)
        fed = self.kernel_feeds(feeds(case, inputs, False), quantized)
        [(output, got)] = run_signature(Interpreter, ran, fed, op_resolver=self.resolver()).items()
        y = np.asarray(got, dtype=np.float64)
        h_n, absent = final_states(case, y)
        kinds = sorted({t.rsplit("(", 1)[1].rstrip(")") for t in integer})
        note = (f"{ops_note(ops)} under the {self.op_resolver or 'default'} op resolver; "
                f"integer tensors in the recurrent ops: {', '.join(kinds)}")
        conflicts = litert_flatbuffer.grid_conflict_words(model)
        if conflicts:  # the converter's file, not the kernel (docs/quantization.md)
            note += f"; {conflicts}"
        if self.beside is not None and quantized.output is not None:
            other = invoke(Interpreter, ran, fed, op_resolver=self.resolver(self.beside))
            apart = float(np.max(np.abs(y - other))) / quantized.output.scale
            note += (f"; {self.beside} vs {self.op_resolver or 'default'} kernels: {apart:.3g} "
                     f"output steps apart")
        # the reproducer runs what the interpreter ran (a planted bug's model and feeds)
        record = handed(case, ran, fed, output, absent, op_resolver=self.op_resolver,
                        scheme=self.scheme)
        return Outputs(y=y, h_n=h_n, absent=absent, models={"tflite": model}, note=note,
                       quantized=quantized, handed=record)

    def resolver(self, name: str | None = None) -> Any:
        """The ``OpResolverType`` named (default: :attr:`op_resolver`; None: the default)."""
        name = name or self.op_resolver
        if name is None:
            return None
        from ai_edge_litert.interpreter import OpResolverType

        return getattr(OpResolverType, name)

    def refused(self, exc: Exception) -> Exception:
        """What a converter's refusal of the scheme makes of the pair: an error row quoting it
        (the 16x8 adapter: not applicable)."""
        return AdapterFault(f"the converter refused {self.scheme}: {first_line(exc)}")


def first_line(exc: Exception) -> str:
    """The converter's message: its first line that says something (not a location line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    said = [ln for ln in lines if "error:" in ln] or lines
    return said[0][:400] if said else type(exc).__name__


class LiteRTInt8(QuantizedLiteRT):
    name = "litert-int8"
    title = "tf_keras LSTM/GRU -> full-integer int8 LiteRT (BUILTIN kernels, CPU)"
    beside = "BUILTIN_REF"  # its distance from litert-int8-ref, which is judged to the bit


class LiteRTInt8Ref(QuantizedLiteRT):
    name = "litert-int8-ref"
    title = "tf_keras LSTM/GRU -> full-integer int8 LiteRT (BUILTIN_REF reference kernels, CPU)"
    op_resolver = "BUILTIN_REF"
    beside = "BUILTIN"
    bit_exact_reference = "litert-int8"


class LiteRTDynamic(QuantizedLiteRT):
    name = "litert-dynamic"
    title = "tf_keras LSTM -> dynamic-range LiteRT (int8 weights, hybrid kernel, CPU)"
    scheme = "dynamic"
    capabilities = Capabilities(**{
        **{f: getattr(QuantizedLiteRT.capabilities, f)
           for f in QuantizedLiteRT.capabilities.__dataclass_fields__},
        "cells": frozenset({"lstm"}),
        "reasons": QuantizedLiteRT.capabilities.reasons | {"cells": NO_FUSED_GRU_DYNAMIC},
    })

    def not_applicable_reason(self, case: Case) -> str | None:
        return super().not_applicable_reason(case) or too_small_for_dynamic_range(case)


def too_small_for_dynamic_range(case: Case) -> str | None:
    """Why the dynamic-range converter would quantize none of ``case``'s LSTM, or None: it
    leaves a weight tensor under :data:`DYNAMIC_MIN_ELEMENTS` elements float, and it quantizes
    a fused LSTM only when every one of its per-gate weights reaches that (measured with
    TensorFlow 2.21: H x I = 256 or 1024 with H x H = 1024 or 256 stay float; 1024 and 1024
    are int8). A float model would pass while testing nothing (executorch PR#14893)."""
    H = case.hidden_size
    small = [f"{what} have {H} x {size} = {H * size} elements per gate" for what, size in (
        ("input weights", min(case.layer_input_size(la) for la in range(case.num_layers))),
        ("recurrent weights", H)) if H * size < DYNAMIC_MIN_ELEMENTS]
    if not small:
        return None
    return (f"the converter's dynamic-range quantization leaves weight tensors under "
            f"{DYNAMIC_MIN_ELEMENTS} elements float, by design, and quantizes a fused LSTM only "
            f"when all its per-gate weights reach that; this case's {' and '.join(small)}: "
            f"nothing would be quantized")


class LiteRTInt16x8(QuantizedLiteRT):
    name = "litert-int16x8"
    title = "tf_keras LSTM/GRU -> 16-bit activations, 8-bit weights LiteRT (CPU)"
    scheme = "16x8"

    def refused(self, exc: Exception) -> Exception:
        return NotApplicable(f"the converter refuses 16x8: \"{first_line(exc)}\" "
                             f"({UPSTREAM_16X8})")
