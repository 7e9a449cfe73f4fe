"""``litert-torch``: ``nn.LSTM`` / ``nn.GRU`` (layout ``torch``, the module :mod:`torch_cpu
<harness.adapters.torch_cpu>` runs) converted by ``litert_torch.convert`` (PyTorch -> LiteRT
directly: ``torch.export``, then StableHLO lowered to TFLite ops; ai-edge-torch is its deprecated
name) and run in the LiteRT interpreter (``ai_edge_litert``) on CPU, as a deployed ``.tflite``
runs.

The form emitted, measured with litert-torch 0.10.0 and torch 2.13 (docs/deployment.md): the
recurrence unrolled over the steps, neither the fused ``UNIDIRECTIONAL_SEQUENCE_LSTM`` kernel
nor a ``WHILE`` loop (litert-torch#53): per layer, direction and step ``FULLY_CONNECTED`` for
the recurrent product and ``SLICE`` / ``LOGISTIC`` / ``TANH`` / ``MUL`` / ``ADD`` for the gates.
The pair's reason names the form and counts the converted ops; a model with the fused kernel or
a loop would say so. litert-torch#808 (a plain ``nn.LSTM`` fails to convert, reported on
ai-edge-torch 2025-09) does not reproduce on 0.10.0: the issue's own call, an unbatched input
without a state, converts and matches eager PyTorch to 1e-7, as every bundled case it runs does.

The model's inputs are the module's call flattened: ``x`` [B, T, I], then ``h0`` (and ``c0``)
[L*D, B, H] as nn.LSTM/nn.GRU take them; a case's ``initial_state: none`` converts the call
with ``x`` alone (the module's own zero state, the form of #808's report). Its outputs ``y``,
``h_n`` (and ``c_n``) likewise.

``export_seq_len``: the model is converted at that length and run at ``seq_len``. The time axis
is converted dynamic (``torch.export.Dim``), as a user wanting another length must; with 0.10.0
``torch.export`` refuses that, the LSTM's decomposition having specialized the axis to the
length converted at (litert-torch#1062, open). The adapter then converts at the fixed length and
runs that model at ``seq_len`` (the interpreter resizes the input), and the row says what the
fixed-shape model returned: its unrolled steps ignore the steps past the length converted at
(``y`` of that many steps), a silently shorter answer a caller reading ``h_n`` would not see.
The row keeps that model (the exception's ``handed``): its reproducer runs it at ``seq_len``
and names the first step missing.
The registry (:mod:`harness.known_bugs`) declares #1062 from litert-torch 0.10.0: the row is
that known upstream bug (:class:`~harness.errors.KnownUpstreamCrash`), an error on an older
release, and a release that converts the dynamic axis and passes "looks fixed".

Costly: a conversion per case (``torch.export``, MLIR lowering and the TFLite converter: 5-25 s
for a small case on 2 shared cores, 155 s for a 5-layer bidirectional LSTM of 320 under load;
docs/deployment.md), so the adapter is left out of the default selection
(:attr:`Adapter.named_only`) and runs when named.

Side effects: the conversion runs in memory (no ``export_dir``, no file written); its progress
lines (``rich``, stdout), torch.export's warnings and the C++ converter's log lines (file
descriptor 2) are not for the user's terminal (:func:`quiet`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from harness.adapters._litert import form_of, litert_version, tflite_handed
from harness.adapters._torch import NN_REASONS, TORCH_DTYPES, TorchRNN, import_torch
from harness.adapters.base import AdapterFault, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import KnownUpstreamCrash, Unavailable
from harness.families.readout import readout
from harness.frameworks.litert import import_litert
from harness.frameworks.native_stderr import native_stderr_captured
from harness.handed import Handed
from harness.known_bugs import known_bug
from harness.spec import Case

# measured by converting the bundled cases' shapes (litert-torch 0.10.0, torch 2.13)
DTYPE_REASON = ("litert-torch 0.10.0: a float64 nn.LSTM/nn.GRU fails in the converter's passes "
                "(\"failed to legalize operation 'tfl.transpose' that was explicitly marked "
                "illegal\" on a f64 tensor), a bfloat16 one with \"Got unsupported ScalarType "
                "BFloat16\"; float32 and float16 convert")
# measured on cases/low-precision.yaml: the reverse direction's REVERSE_V2 has no float16 form
FLOAT16_BIDIRECTIONAL_REASON = (
    "litert-torch 0.10.0: a float16 bidirectional nn.LSTM/nn.GRU fails in the converter's "
    "passes (\"failed to legalize operation 'tfl.reverse_v2' that was explicitly marked "
    "illegal\"); float16 converts one direction only")
PACKED_REASON = ("nn.LSTM/nn.GRU take lengths only as a PackedSequence, which litert-torch 0.10.0 "
                 "does not convert: pack_padded_sequence fails in torch.export (\"zeros(): "
                 "argument 'size' failed to unpack the object ... got FakeTensor\")")


class FixedLength(AdapterFault):
    """The model could not be converted with a dynamic sequence length; the fixed-length one
    does not run the case's length."""


def import_litert_torch() -> Any:
    """``litert_torch``, imported without its chatter (torchao's "Failed to load" lines for GPU
    kernels, torch's pytree warnings), or Unavailable."""
    try:
        with quiet():
            import litert_torch
    except ImportError as exc:
        raise Unavailable(f"litert-torch is not installed ({exc}); "
                          "pip install litert-torch==0.10.0") from None
    return litert_torch


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Python's stdout and stderr (litert-torch's ``rich`` progress, warnings and log lines) and
    file descriptor 2 (the C++ converter's and interpreter's log lines) to scratch, for the
    call; Python warnings recorded and dropped. An exception still raises with its message."""
    sys.stdout.flush()
    with native_stderr_captured(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def why_refused(exc: Exception) -> str:
    """The line of torch.export's refusal that says why (``... specialized it to be a constant
    (4)``), else its first line."""
    lines = [line.strip(" -") for line in str(exc).splitlines() if line.strip()]
    said = next((line for line in lines if "specialized" in line), lines[0] if lines else "")
    return f"{type(exc).__name__}: {said.split('. ')[0]}"


def counted(ops: list[str]) -> str:
    """``TRANSPOSE x2, FULLY_CONNECTED x5, ...`` in order of first use."""
    return ", ".join(f"{op} x{n}" for op, n in Counter(ops).items())


class LiteRTTorch(TorchRNN):
    name = "litert-torch"
    title = "nn.LSTM/nn.GRU -> litert_torch.convert -> LiteRT interpreter (CPU)"
    framework = "litert"
    requires = ("torch", "ai_edge_litert")
    saved_models = ("tflite",)  # the converted model the interpreter ran
    named_only = ("converts the model once per case (torch.export, MLIR lowering, the TFLite "
                  "converter): seconds to minutes a case on 2 cores")
    capabilities = Capabilities(
        projection=True,
        gru_reset_after=frozenset({True}),
        dtypes=frozenset({"float32", "float16"}),
        variable_lengths=False,
        reasons=NN_REASONS | {
            "dtypes": DTYPE_REASON,
            "variable_lengths": PACKED_REASON,
            "gradients": "a converted LiteRT model is inference only (no backward pass)",
        },
    )

    def not_applicable_reason(self, case: Case) -> str | None:
        """The capabilities' reason, or float16 with two directions (a pair of capabilities
        the declaration cannot express alone)."""
        reason = super().not_applicable_reason(case)
        if reason is None and case.dtype == "float16" and case.num_directions == 2:
            return FLOAT16_BIDIRECTIONAL_REASON
        return reason

    def check_available(self) -> None:
        import_torch()
        import_litert()
        # found, not imported: litert_torch's import (TensorFlow's MLIR, torchao) takes seconds,
        # paid by the first pair
        if importlib.util.find_spec("litert_torch") is None:
            raise Unavailable("litert-torch is not installed; pip install litert-torch==0.10.0")

    def versions(self) -> dict[str, str]:
        torch = import_torch()
        return {"torch": torch.__version__, "litert_torch": importlib.metadata.version(
                    "litert-torch"), "ai_edge_litert": litert_version(),
                "torch_threads": str(torch.get_num_threads())}

    def convert(self, case: Case, module: Any, args: tuple, dynamic_length: bool) -> bytes:
        """The ``.tflite`` flatbuffer of ``module`` called on ``args`` (``dynamic_length``: the
        time axis of ``x`` declared dynamic)."""
        litert_torch = import_litert_torch()
        torch = import_torch()
        kwargs = {}
        if dynamic_length:
            T = torch.export.Dim("T", min=1, max=max(case.seq_len, args[0].shape[1]) * 4)
            kwargs["dynamic_shapes"] = ({1: T},) + tuple(
                None if not isinstance(a, tuple) else tuple(None for _ in a) for a in args[1:])
        with quiet():
            return litert_torch.convert(module, args, **kwargs).model_content()

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        torch = import_torch()
        Interpreter = import_litert()
        dtype = getattr(torch, TORCH_DTYPES[case.dtype])
        lstm = case.cell_kind.has_cell_state
        omit = case.initial_state == "none"  # converted without a state: the module's zeros
        module = self.build(case, native)

        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=dtype)

        def call(x):  # the module's call, as the model's inputs in order
            if omit:
                return (x,)
            return (x, (t(inputs.h0), t(inputs.c0))) if lstm else (x, t(inputs.h0))

        x = t(inputs.x)
        length = case.export_seq_len or case.seq_len
        start = time.perf_counter()
        if length == case.seq_len:
            model = self.convert(case, module, call(x), dynamic_length=False)
        else:  # converted at the case's export length: x's values there do not matter
            at = call(torch.zeros(case.batch, length, case.input_size, dtype=dtype))
            try:
                model = self.convert(case, module, at, dynamic_length=True)
            except Exception as exc:  # torch.export's refusal: the time axis specialized
                refusal = why_refused(exc)
                fixed = self.convert(case, module, at, dynamic_length=False)
                got, *_, record = self.invoke(Interpreter, fixed, call(x), lstm, omit)
                said = (f"litert-torch cannot convert nn.{type(module).__name__} with a "
                        f"dynamic sequence length ({refusal}); converted at export_seq_len "
                        f"{length}, the fixed-shape model run at seq_len {case.seq_len} returned "
                        f"y of {got.shape[1]} step(s) (its unrolled steps)")
                entry = known_bug(case, self.name, None)  # the registry's, for these versions
                failure = (KnownUpstreamCrash(said, entry.upstream) if entry is not None
                           else FixedLength(said))
                failure.handed = record  # its reproducer runs the fixed-shape model so
                raise failure from None
        seconds = time.perf_counter() - start
        with quiet():  # the interpreter's "Created ... XNNPACK delegate" line
            ops = [op["op_name"] for op in Interpreter(model_content=model)._get_ops_details()]
        y, h_n, c_n, record = self.invoke(Interpreter, model, call(x), lstm, omit)
        at_length = (f"converted at T={length} with the time axis dynamic, run at T="
                     f"{case.seq_len}" if length != case.seq_len else f"converted at T={length}")
        note = (f"LiteRT ran the {form_of(ops)} form litert-torch "
                f"{importlib.metadata.version('litert-torch')} emitted (converted ops: "
                f"{counted(ops)}); {at_length}"
                f"{', initial state omitted (the module zeros it)' if omit else ''}; "
                f"conversion {seconds:.1f} s")
        return Outputs(y=y, h_n=h_n, c_n=c_n, note=note, models={"tflite": model},
                       handed=record)

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> None:
        return None  # the eager module's record would not reproduce what the model ran

    @staticmethod
    def invoke(Interpreter: Any, model: bytes, args: tuple, lstm: bool, omit: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, Handed]:
        """Run the model's one signature on the module's call ``args`` flattened; y, h_n, c_n
        (float64) and the reproducer's record of the run. The signature's inputs are the
        flattened call in order (``args_0``, ``args_1_0``, ...) and its outputs ``output_0``
        (y), ``output_1`` (h_n), ``output_2`` (c_n)."""
        flat = [args[0]] + ([] if omit else list(args[1]) if lstm else [args[1]])
        with quiet():
            interpreter = Interpreter(model_content=model)
        names = interpreter.get_signature_list()["serving_default"]
        if len(names["inputs"]) != len(flat):
            raise AdapterFault(f"the converted model's inputs are {names['inputs']}, expected "
                               f"{len(flat)} (x{', h0' if not omit else ''}"
                               f"{', c0' if lstm and not omit else ''})")
        fed = {name: a.numpy() for name, a in zip(sorted(names["inputs"]), flat, strict=True)}
        with quiet():  # the XNNPACK delegate's "Created ..." line, at the first call
            runner = interpreter.get_signature_runner()
            got = runner(**fed)
        roles = {"output_0": "y", "output_1": "h_n"} | ({"output_2": "c_n"} if lstm else {})
        if sorted(got) != sorted(roles):
            raise AdapterFault(f"the converted model's outputs are {sorted(got)}, expected "
                               f"{sorted(roles)} (y, h_n{', c_n' if lstm else ''})")
        ys, h_n, c_n = readout(got, roles, 1)
        record = tflite_handed(model, fed, roles, runner="signature", framework="litert-torch")
        return ys[0], h_n, c_n, record
