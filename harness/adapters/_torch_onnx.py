"""What the PyTorch -> ONNX -> ONNX Runtime adapters share: build ``nn.LSTM`` / ``nn.GRU`` from
the canonical weights (layout ``torch``, :meth:`harness.adapters._torch.TorchRNN.build`), export
it with ``torch.onnx.export`` (one exporter per adapter) and run the exported model in ONNX
Runtime on CPU, at the case's own batch and length.

The export example has a batch and a length other than the case's (:func:`example_size`: 2, or
3 where the case has 2; the length is the case's ``export_seq_len`` where it has one), and the
batch and time axes are declared dynamic, so a graph that
froze either at the example's size is refused by ORT at the case's size; the adapter checks the
graph's declared input shapes first and says which axis was frozen at what (an error row, not a
crash of the run). pytorch#191855
reports the dynamo exporter freezing the sequence length of a bidirectional layer; with torch
2.13 it happens to any nn.LSTM / nn.GRU exported after another of the same op in the process
(:func:`harness.adapters.torch_onnx_dynamo.forget_previous_exports`, which that adapter calls so
that cases do not depend on their order).

The export call itself is each adapter's own (:meth:`TorchOnnx.export_graph`, in its file): the
two exporters take the dynamic axes in different forms and return the graph in different
forms; the rest (the module, the example, the run in ONNX Runtime) is shared here.

The exported model stays in memory (``ONNXProgram.model_proto`` / a BytesIO) while the adapter
runs; ``--save-outputs`` writes it as outputs/<case>/<adapter>.onnx (``Outputs.models``), the
graph ORT ran, to open in Netron or run again. The module is exported unpacked, without
``pack_padded_sequence``, so the exported graph has no sequence-lengths input: variable-length
cases are not applicable.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from harness.adapters._torch import NN_REASONS, TORCH_DTYPES, TorchRNN, import_torch
from harness.adapters.base import AdapterFault, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.frameworks.onnx import import_onnxruntime
from harness.handed import Handed
from harness.spec import Case
from harness.versions import release

# The torch these adapters were checked with (MINIMUM_VERSIONS' torch 2.4 has no dynamo argument)
CHECKED_TORCH = (2, 13)


def example_size(size: int) -> int:
    """The export example's batch or length: another size than the case's, and small, as the
    dynamo exporter's cost grows with the example's length (torch 2.13 traces aten.lstm's
    decomposition one step at a time: seed 000's case, 5 bidirectional layers of 12 steps, took
    4.0-5.2 s of CPU time an export with an example of 14 steps, 2.8-3.5 s with 2). At least 2:
    torch.export specializes a dynamic axis whose example size is 0 or 1."""
    return 3 if size == 2 else 2

def export_length(case: Case) -> int:
    """The export example's length: the case's ``export_seq_len`` where it has one (the model
    exported at one length and run at another, as users deploy it), else another length than
    the case's (:func:`example_size`), so that a frozen time axis shows either way."""
    return case.export_seq_len or example_size(case.seq_len)


CAPABILITIES = Capabilities(
    # ORT's CPU LSTM/GRU kernels have no double (the onnxruntime adapter); a float16 export
    # is not tried here
    dtypes=frozenset({"float32"}),
    gru_reset_after=frozenset({True}),
    variable_lengths=False,
    reasons=NN_REASONS | {
        "dtypes": "torch.onnx export run in ONNX Runtime: float32 only (ORT's CPU LSTM/GRU "
                  "kernels have no double; float16/bfloat16 exports not tried)",
        "projection": "nn.LSTM with proj_size is not exported by this adapter (ONNX LSTM has "
                      "no projection)",
        "projection_layers": "nn.LSTM with proj_size is not exported by this adapter (ONNX LSTM "
                             "has no projection)",
        "variable_lengths": "the module is exported without pack_padded_sequence: the exported "
                            "graph has no sequence-lengths input",
    },
)


def with_state(module, lstm: bool):
    """``module`` as an nn.Module taking (x, h0[, c0]) and returning (y, h_n[, c_n]): flat
    tensors the exporters can name (the class is made here: torch is imported at run time)."""
    torch = import_torch()

    class RNNWithState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = module

        def forward(self, x, h0, c0=None):
            if lstm:
                y, (h_n, c_n) = self.rnn(x, (h0, c0))
                return y, h_n, c_n
            y, h_n = self.rnn(x, h0)
            return y, h_n

    return RNNWithState().eval()


class TorchOnnx(TorchRNN):
    """``nn.LSTM`` / ``nn.GRU`` exported by ``torch.onnx.export``, run in ONNX Runtime. An
    adapter names its exporter (``exporter``, as run.json says it), the packages that exporter
    needs beyond torch and onnx (``exporter_modules``: distribution name -> import function,
    which raises Unavailable when it is missing) and its export call (:meth:`export_graph`);
    and declares its own name."""

    framework = "onnx"
    requires = ("torch", "onnx", "onnxruntime")
    exporter = ""
    exporter_modules: dict[str, Callable[[], ModuleType]] = {}
    capabilities = CAPABILITIES
    saved_models = ("onnx",)  # the exported graph, as ORT ran it

    def check_available(self) -> None:
        torch = import_torch()
        import_onnxruntime()
        if release(torch.__version__) < CHECKED_TORCH:
            # torch.onnx.export's dynamo argument (2.5), its default and ONNXProgram changed
            # across 2.5 .. 2.9; these adapters were checked with torch 2.13 only
            raise Unavailable(f"needs torch>={'.'.join(map(str, CHECKED_TORCH))} (the version "
                              f"this adapter was checked with), found {torch.__version__}")
        for import_package in self.exporter_modules.values():
            import_package()

    def versions(self) -> dict[str, str]:
        torch = import_torch()
        onnx, ort = import_onnxruntime()
        versions = {"torch": torch.__version__, "onnx": onnx.__version__,
                    "onnxruntime": ort.__version__, "exporter": self.exporter}
        versions |= {dist: import_package().__version__
                     for dist, import_package in self.exporter_modules.items()}
        return versions

    def export_graph(self, torch: ModuleType, wrapped: Any, args: tuple[Any, ...],
                     names: list[str]) -> Any:
        """The onnx.ModelProto of ``wrapped`` called with ``args`` (inputs named ``names``),
        batch (axis 0 of ``x``, 1 of the states) and time (axis 1 of ``x``) declared dynamic."""
        raise NotImplementedError

    def export(self, case: Case, native: dict[str, np.ndarray]):
        """The onnx.ModelProto of the case's module, exported with an example of another batch
        (:func:`example_size`) and the length :func:`export_length` says, batch and time
        declared dynamic."""
        torch = import_torch()
        lstm = case.cell_kind.has_cell_state
        wrapped = with_state(self.build(case, native), lstm)
        dtype = getattr(torch, TORCH_DTYPES[case.dtype])
        gen = torch.Generator().manual_seed(0)
        n, t = example_size(case.batch), export_length(case)
        states = case.num_layers * case.num_directions
        x = torch.randn(n, t, case.input_size, generator=gen, dtype=dtype)
        h0 = torch.randn(states, n, case.hidden_size, generator=gen, dtype=dtype)
        c0 = torch.randn(states, n, case.hidden_size, generator=gen, dtype=dtype)
        args = (x, h0, c0) if lstm else (x, h0)
        names = ["x", "h0", "c0"][:len(args)]
        with warnings.catch_warnings(), _quiet_exporter():
            warnings.simplefilter("ignore")  # the exporters' deprecation and tracer warnings
            return self.export_graph(torch, wrapped, args, names)

    def session(self, model: bytes):
        _, ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: ORT warns of outputs' declared shapes
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        model = self.export(case, native).SerializeToString()
        sess = self.session(model)
        np_dtype = np.float32
        feeds = [inputs.x, inputs.h0] + ([inputs.c0] if case.cell_kind.has_cell_state else [])
        feed = {}
        for arg, value in zip(sess.get_inputs(), feeds, strict=True):
            value = np.ascontiguousarray(value, dtype=np_dtype)
            frozen_axes(arg.name, arg.shape, value.shape)
            feed[arg.name] = value
        got = [np.asarray(a, dtype=np.float64) for a in sess.run(None, feed)]
        if case.cell_kind.has_cell_state:
            y, h_n, c_n = got
        else:
            (y, h_n), c_n = got, None
        out = Outputs(y=y, h_n=h_n, c_n=c_n, models={"onnx": model})
        if case.export_seq_len is not None:  # the case's own axis: said where it is asked
            out.note = (f"exported at {case.export_seq_len} steps (time axis declared dynamic), "
                        f"run at {case.seq_len}")
        # the exported graph as ORT ran it; its outputs are the module's (y [N, T, D*H], h_n,
        # c_n [L*D, N, H]), not one ONNX node's per layer
        out.handed = Handed("onnx", {
            "framework": "torch.onnx", "runtime": "onnxruntime", "dtype": "float32",
            "read": "module", "exporter": self.exporter,
            "inputs": [a.name for a in sess.get_inputs()],
            "outputs": [o.name for o in sess.get_outputs()]},
            arrays={f"feed/{k}": v for k, v in feed.items()}, files={"model.onnx": model})
        return out

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> None:
        return None  # only an export records what ORT ran (in _run)


def frozen_axes(name: str, declared: list, shape: tuple[int, ...]) -> None:
    """AdapterFault where the exported graph declares input ``name`` with a fixed size on an
    axis where the case's data differ (an axis the export declared dynamic, frozen at the
    example's size), before ORT refuses it with its own message."""
    bad = [(axis, want, got) for axis, (want, got) in enumerate(zip(declared, shape, strict=True))
           if isinstance(want, int) and want != got]
    if bad:
        what = ", ".join(f"axis {axis} at {want} (the case has {got})" for axis, want, got in bad)
        steps = name == "x" and any(axis == 1 for axis, _, _ in bad)
        raise AdapterFault(
            f"the exported graph froze input {name!r}: {what}; the export declared the batch and "
            f"time axes dynamic, its example had another batch and length"
            + (" (a frozen sequence length, as in pytorch/pytorch#191855)" if steps else ""))


class _quiet_exporter:
    """The dynamo exporter logs each stage and the torchvision ops it skips at WARNING/INFO on
    the ``torch.onnx`` loggers: not for the user's terminal."""

    def __enter__(self):
        self.logger = logging.getLogger("torch.onnx")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)
        return self

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)
        return False
