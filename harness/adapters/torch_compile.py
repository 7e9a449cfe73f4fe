"""``torch.compile`` (TorchDynamo + Inductor, CPU) of ``nn.LSTM`` / ``nn.GRU`` (layout ``torch``).

Dynamo does not trace an RNN module unless ``torch._dynamo.config.allow_rnn`` is set
(pytorch#158007: without it a plain LSTM is left to eager PyTorch); the adapter sets it only
for its own call (``torch._dynamo.config.patch``, restored after). A compile that captured no
recurrent op (the whole RNN ran eager: a graph break around it, or dynamo skipping the frame) is
an error naming that, never a pass: the backend records every graph dynamo hands it, and the
recurrent op (``torch.lstm`` / ``torch.gru``) must be in one of them. The pair's reason says
what ran: the graphs, graph breaks, the ops captured, and what Inductor made of the recurrent op.
With torch 2.13 Inductor decomposes it and unrolls the time loop: per step and direction an
extern GEMM (``aten.addmm``, the recurrent product; one ``aten.mm`` per layer and direction for
the inputs) and generated C++ kernels for the gates (its ``output_code`` log shows them); the
reason gives the counts (``extern_calls``, ``generated_kernel_count``).

Side effects: Inductor's caches (FX graph, AOTAutograd, compiled C++ modules, locks) go to a
temporary folder of the adapter's for the call (``TORCHINDUCTOR_CACHE_DIR`` and
``TRITON_CACHE_DIR`` set for it by ``torch._inductor.utils.fresh_cache`` and restored after;
the folder is removed), precompiled C++ headers (kept in a folder fixed at import, under
``$TMPDIR``) are not made, and dynamo's compiled code is reset after each case, so nothing is
written outside and no case reuses another's compile.

Costly: a compile per case (24 s of CPU for a 2-layer bidirectional LSTM; 40 s to minutes of
wall time on 2 shared cores, docs/deployment.md), so the adapter is left out of the
default selection (:attr:`Adapter.named_only`) and runs when named.

Variable-length batches need a ``PackedSequence``, which dynamo (torch 2.13) does not capture at
all (the whole frame runs eager): not applicable, and tests/adapters/test_adapter_torch_compile.py
checks it still runs eager, so the capability is added when a release captures it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator

import numpy as np

from harness.adapters._torch import NN_REASONS, TORCH_DTYPES, TorchRNN, import_torch
from harness.adapters.base import Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.handed import Handed
from harness.spec import Case

PACKED_REASON = ("torch.compile (torch 2.13) does not capture nn.LSTM/nn.GRU on a "
                 "PackedSequence (variable lengths): dynamo runs the whole frame eager")


class EagerFallback(RuntimeError):
    """torch.compile ran, but the recurrent op was not compiled: it ran in eager PyTorch."""


def recurrent_ops(torch) -> frozenset:
    """The functions an ``nn.LSTM`` / ``nn.GRU`` forward calls for its whole recurrence."""
    return frozenset({torch.lstm, torch.gru, torch._VF.lstm, torch._VF.gru})


@contextlib.contextmanager
def compile_scope(torch, allow_rnn: bool = True) -> Iterator[None]:
    """``allow_rnn`` and Inductor's caches in a temporary folder, for this call only."""
    import torch._inductor.config
    from torch._inductor.utils import fresh_cache

    top = tempfile.mkdtemp(prefix="rnn-harness-inductor-")
    try:
        # precompiled headers go to a folder fixed at import (codecache._HEADER_DIR, under the
        # default cache in $TMPDIR), outside fresh_cache's: not made for this call
        with torch._dynamo.config.patch(allow_rnn=allow_rnn), \
                torch._inductor.config.patch(cpp_cache_precompile_headers=False), \
                fresh_cache(dir=top):
            yield
    finally:
        torch._dynamo.reset()  # this case's compiled code and guards go with the case
        shutil.rmtree(top, ignore_errors=True)


class TorchCompile(TorchRNN):
    name = "torch-compile"
    title = "torch.compile (Inductor) of nn.LSTM/nn.GRU (CPU)"
    named_only = ("compiles the model once per case with Inductor: tens of seconds a case on 2 "
                  "cores, minutes under load")
    capabilities = Capabilities(
        projection=True,
        gru_reset_after=frozenset({True}),
        # a bfloat16 nn.LSTM does not compile on the CPU (torch 2.13, measured by the capability
        # contract run by name): Inductor fails in oneDNN, "could not create a primitive
        # descriptor for the LSTM forward propagation primitive"; dynamo alone captures it
        dtypes=frozenset({"float64", "float32", "float16"}),
        variable_lengths=False,
        reasons=NN_REASONS | {
            "variable_lengths": PACKED_REASON,
            "dtypes": "torch.compile (Inductor, torch 2.13 CPU) of a bfloat16 nn.LSTM fails in "
                      "oneDNN: 'could not create a primitive descriptor for the LSTM forward "
                      "propagation primitive'",
        },
    )
    # dynamo's switch for tracing RNN modules, set for the adapter's own call only (a test
    # turns it off to see the eager fallback refused)
    allow_rnn = True

    def compile_graph(self, gm, example_inputs):
        """What the backend makes of each graph dynamo captured: Inductor's compiled code."""
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)

    def check_available(self) -> None:
        import importlib.util

        torch = import_torch()
        # found, not imported: dynamo and Inductor take seconds to import, paid by the first pair
        missing = [m for m in ("torch._dynamo", "torch._inductor")
                   if importlib.util.find_spec(m) is None]
        if missing or not hasattr(torch, "compile"):
            raise Unavailable(f"torch {torch.__version__} has no torch.compile "
                              f"({', '.join(missing) or 'torch.compile'} missing)")

    def versions(self) -> dict[str, str]:
        torch = import_torch()
        return {"torch": torch.__version__, "torch_threads": str(torch.get_num_threads())}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        torch = import_torch()
        from torch._dynamo.utils import counters
        from torch._inductor import metrics

        dtype = getattr(torch, TORCH_DTYPES[case.dtype])
        lstm = case.cell_kind.has_cell_state
        module = self.build(case, native)
        graphs: list = []

        def inductor(gm, example_inputs):  # dynamo's graphs, recorded, then Inductor's
            graphs.append(gm)
            return self.compile_graph(gm, example_inputs)

        def forward(x, h0, c0):
            return module(x, (h0, c0) if lstm else h0)

        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=dtype)

        x, h0 = t(inputs.x), t(inputs.h0)
        c0 = t(inputs.c0) if lstm else None
        with compile_scope(torch, self.allow_rnn), torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "LSTM with projections is not supported with oneDNN")
            counters.clear()
            metrics.reset()
            start = time.perf_counter()
            y, hc = torch.compile(forward, backend=inductor, fullgraph=False)(x, h0, c0)
            seconds = time.perf_counter() - start
            breaks = sum(counters["graph_break"].values())
            extern = counters["inductor"].get("extern_calls", 0)
            kernels = metrics.generated_kernel_count
        ops = recurrent_ops(torch)
        captured = [str(getattr(n.target, "__name__", n.target)) for g in graphs
                    for n in g.graph.nodes if n.op == "call_function" and n.target in ops]
        if not captured:
            raise EagerFallback(
                f"torch.compile captured no recurrent op: nn.{type(module).__name__} ran in eager "
                f"PyTorch ({len(graphs)} graph(s) compiled, {breaks} graph break(s))")
        h_n, c_n = hc if lstm else (hc, None)
        emitted = (f"Inductor decomposed it into a loop unrolled over the steps: {extern} extern "
                   f"GEMM call(s) (aten.mm/addmm) and {kernels} generated C++ kernel(s)"
                   if extern or kernels else "no code generated: the captured graph ran as is")
        note = (f"torch.compile: {len(graphs)} graph(s), {breaks} graph break(s); dynamo "
                f"captured torch.{'/'.join(sorted(set(captured)))} whole; {emitted}; compile "
                f"and first call {seconds:.1f} s")

        def n(a):
            return a.detach().to(dtype=torch.float64).numpy()

        return Outputs(y=n(y), h_n=n(h_n), c_n=None if c_n is None else n(c_n), note=note,
                       handed=self.hand(case, native, inputs))

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        """The eager module's record, compiled as this adapter compiles it (its reproducer
        calls ``torch.compile`` with ``allow_rnn``, Inductor being the default backend)."""
        handed = super().hand(case, native, inputs)
        handed.call["compile"] = {"allow_rnn": self.allow_rnn}
        return handed
