"""PyTorch ``nn.LSTM`` / ``nn.GRU`` (layout ``torch``) -> ``torch.export`` -> ExecuTorch's edge
dialect -> an ExecuTorch program (``.pte``), run by ExecuTorch's own runtime on the CPU
(``executorch.runtime``): the road PyTorch takes to phones and microcontrollers.

Two variants, as data on one class (:attr:`ExecuTorch.delegate`):

- ``executorch``: lowered with the XNNPACK partitioner (``to_edge_transform_and_lower``), so the
  parts XNNPACK supports run in its delegate and the rest in ExecuTorch's portable kernels. A
  lowering in which XNNPACK took nothing is an error row naming that, never a pass: the road's
  delegate did not run.
- ``executorch-portable``: no partitioner, every op on the portable kernels.

What ran, said in each pair's reason: ``torch.export`` decomposes the recurrent op and unrolls
it over the steps (ExecuTorch 1.5.1, torch 2.13: an unrolled loop of matmuls and gate ops, no
recurrent op left), then how many delegate calls XNNPACK took and which ops (``linear``,
``sigmoid``, ``tanh``, ...), and which ops stayed on the portable kernels (with XNNPACK: the
copies that split, squeeze and concatenate the states).

Sequence length: the program is exported at ``export_seq_len`` (the case key; absent: at
``seq_len``) and run at ``seq_len``. Where the two differ, the time axis is declared dynamic
(``torch.export.Dim.DYNAMIC``), as a user exporting once for every length would.
pytorch/executorch#8468 and #12344 report that an LSTM cannot be exported so: torch.export's
decomposition of the recurrent op fixes the time axis at the example's length. With torch 2.13
it raises ("marked ... as dynamic but your code specialized it to be a constant"); the adapter
reports that as the declared known upstream bug (harness/known_bugs.py) while its entry
applies, and as an error row naming the fixed length otherwise. (Exported without the
declaration, the program has the length fixed and the runtime refuses another one: "Attempted
to resize a static tensor".)

Costly: the lowering takes seconds to a minute a case on 2 cores (docs/deployment.md), plus the
import of ExecuTorch (10-16 s), so both variants are left out of the default selection
(:attr:`Adapter.named_only`) and run when named.

``--save-outputs`` writes the program as outputs/<case>/<adapter>.pte (``Outputs.models``), the
very file the runtime ran; ``Outputs.handed`` holds it with the inputs as fed, for a failing
pair's reproducer (docs/repro.md), which runs the program again. Side effects: the program
stays in memory (the runtime loads it from bytes); nothing is written to disk. The runtime's
native log lines (its CPU discovery at start, its errors) go to a scratch file while it runs,
not to the user's terminal; an error's lines are put in its message.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

from harness import known_bugs
from harness.adapters._torch import NN_REASONS, TORCH_DTYPES, TorchRNN, import_torch
from harness.adapters._torch_onnx import with_state
from harness.adapters.base import AdapterFault, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import KnownUpstreamCrash, Unavailable
from harness.families.converted import run_program
from harness.families.readout import readout
from harness.frameworks.native_stderr import native_stderr_captured
from harness.handed import Handed
from harness.spec import Case
from harness.versions import installed

# Edge-dialect nodes that are bookkeeping, not computation: left out of the ops a reason names
BOOKKEEPING = frozenset({"alloc", "getitem"})
# torch.export's message where a dimension declared dynamic was specialized (torch 2.13)
SPECIALIZED = "specialized it to be a constant"

CAPABILITIES = Capabilities(
    dtypes=frozenset({"float32"}),
    gru_reset_after=frozenset({True}),
    projection=True,
    variable_lengths=False,
    reasons=NN_REASONS | {
        "dtypes": "ExecuTorch program: float32 only (XNNPACK's float kernels are float32 and "
                  "float16; float16/bfloat16/float64 programs not tried)",
        "variable_lengths": "the module is exported without pack_padded_sequence: the program "
                            "has no sequence-lengths input",
    },
)


class TimeAxisFixed(AdapterFault):
    """The exported program cannot run at the case's length: its time axis is fixed."""


def import_executorch() -> ModuleType:
    """ExecuTorch's package, imported with its start-up chatter (torchao's optional kernels it
    cannot load, pytree deprecation lines) kept off the terminal."""
    if "executorch.exir" not in sys.modules:
        with native_stderr_captured(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                import executorch.exir  # noqa: F401
                import executorch.runtime  # noqa: F401
            except ImportError as exc:
                raise Unavailable(f"executorch is not installed ({exc}); pip install "
                                  f"executorch==1.5.1") from None
    import executorch

    return executorch


def runtime_lines(lines: list[str]) -> str:
    """The runtime's own log lines of an error (its CPU discovery left out), joined."""
    kept = [line.strip() for line in lines if line.strip() and "cpuinfo" not in line]
    return "; ".join(kept[:6])


class ExecuTorch(TorchRNN):
    name = "executorch"
    title = "PyTorch nn.LSTM/nn.GRU -> torch.export -> ExecuTorch with XNNPACK (CPU runtime)"
    requires = ("torch", "executorch")
    capabilities = CAPABILITIES
    saved_models = ("pte",)  # the program the runtime ran
    named_only = ("lowers each case to an ExecuTorch program: 15-90 s a case with XNNPACK on 2 "
                  "cores, and ExecuTorch's import 10-16 s")
    delegate: str | None = "xnnpack"  # None: the portable kernels alone (executorch-portable)

    def check_available(self) -> None:
        import importlib.util

        import_torch()
        # found, not imported: the import takes seconds, paid by the first pair that runs
        if importlib.util.find_spec("executorch") is None:
            raise Unavailable("executorch is not installed; pip install executorch==1.5.1")

    def versions(self) -> dict[str, str]:
        torch = import_torch()
        return {"torch": torch.__version__, "executorch": installed("executorch") or "",
                "delegate": self.delegate or "portable kernels only",
                "torch_threads": str(torch.get_num_threads())}

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> None:
        # the eager module's record would not reproduce what the program ran; ``_run`` records
        # the program itself (``Outputs.handed``, family executorch)
        return None

    # -- the road: export, lower, serialize, run ------------------------------------------

    def export_program(self, case: Case, native: dict[str, np.ndarray]) -> Any:
        """The ``torch.export`` program of the case's module, exported at ``export_seq_len``
        (absent: ``seq_len``) and the case's batch; the time axis declared dynamic where the
        case runs at another length. Raises :class:`TimeAxisFixed` (or the known upstream
        bug's :class:`KnownUpstreamCrash`) where torch.export fixes it."""
        torch = import_torch()
        lstm = case.cell_kind.has_cell_state
        wrapped = with_state(self.build(case, native), lstm)
        dtype = getattr(torch, TORCH_DTYPES[case.dtype])
        steps = case.export_seq_len or case.seq_len
        gen = torch.Generator().manual_seed(0)
        states = case.num_layers * case.num_directions
        x = torch.randn(case.batch, steps, case.input_size, generator=gen, dtype=dtype)
        h_size = case.proj_size or case.hidden_size  # h is projected where P > 0
        h0 = torch.randn(states, case.batch, h_size, generator=gen, dtype=dtype)
        c0 = torch.randn(states, case.batch, case.hidden_size, generator=gen, dtype=dtype)
        args = (x, h0, c0) if lstm else (x, h0)
        dynamic = steps != case.seq_len
        shapes = (({1: torch.export.Dim.DYNAMIC},) + (None,) * (len(args) - 1)
                  if dynamic else None)
        try:
            with warnings.catch_warnings():
                # nn.LSTM's _flat_weights "assigned during export": torch.export's own remark
                warnings.simplefilter("ignore")
                return torch.export.export(wrapped, args, dynamic_shapes=shapes, strict=False)
        except Exception as exc:
            if not (dynamic and SPECIALIZED in str(exc)):
                raise
            message = (f"torch.export fixed the time axis at the export length {steps}: "
                       f"declared dynamic (Dim.DYNAMIC) to run at seq_len {case.seq_len}, "
                       f"it says 'marked ... as dynamic but your code specialized it to be a "
                       f"constant ({steps})'")
            bug = known_bugs.known_bug(case, self.name, None)
            if bug is not None:
                raise KnownUpstreamCrash(f"{message}: {bug.summary}", bug.upstream) from None
            raise TimeAxisFixed(message) from None

    def lower(self, program: Any) -> tuple[Any, str, str]:
        """The edge program lowered for :attr:`delegate`, what it holds in words (the delegate
        calls and the ops they took, the ops left to the portable kernels) and the recurrent
        ops left whole in it ('' where the lowering decomposed them). XNNPACK taking nothing
        is an :class:`AdapterFault`."""
        import_executorch()
        from executorch.devtools.backend_debug import get_delegation_info
        from executorch.exir import to_edge_transform_and_lower

        partitioners = []
        if self.delegate == "xnnpack":
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
                XnnpackPartitioner,
            )

            partitioners = [XnnpackPartitioner()]
        with warnings.catch_warnings(), _quiet_loggers():
            warnings.simplefilter("ignore")  # pytree deprecations of the lowering passes
            edge = to_edge_transform_and_lower(program, partitioner=partitioners)
        info = get_delegation_info(edge.exported_program().graph_module)
        table = info.get_operator_delegation_dataframe()
        delegated, portable = Counter(), Counter()
        for _, row in table.iterrows():
            op = str(row["op_type"])
            if op in BOOKKEEPING or op == "Total":
                continue
            delegated[_short(op)] += int(row["occurrences_in_delegated_graphs"])
            portable[_short(op)] += int(row["occurrences_in_non_delegated_graphs"])
        portable_ops = _ops(portable)
        kept = _ops(Counter({op: delegated[op] + portable[op] for op in delegated | portable
                             if op.startswith(("lstm", "gru", "_thnn_fused"))}))
        if self.delegate is not None and info.num_delegated_subgraphs == 0:
            raise AdapterFault(
                f"{self.delegate.upper()} delegated nothing: the whole program would run on the "
                f"portable kernels ({portable_ops}), not the road's delegate")
        if self.delegate is None:
            said = f"every op on the portable kernels: {portable_ops}"
        else:
            said = (f"{self.delegate.upper()} took {info.num_delegated_nodes} node(s) in "
                    f"{info.num_delegated_subgraphs} delegate call(s) ({_ops(delegated)}); "
                    f"portable kernels: {portable_ops or 'nothing'}")
        return edge, said, kept

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        torch = import_torch()
        lstm = case.cell_kind.has_cell_state
        start = time.perf_counter()
        program = self.export_program(case, native)
        edge, said, kept = self.lower(program)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pte = edge.to_executorch().buffer
        seconds = time.perf_counter() - start
        from executorch.runtime import Runtime, Verification

        dtype = getattr(torch, TORCH_DTYPES[case.dtype])

        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=dtype)

        feed = [t(inputs.x), t(inputs.h0)] + ([t(inputs.c0)] if lstm else [])
        steps = case.export_seq_len or case.seq_len
        try:
            with native_stderr_captured() as lines:
                outputs = run_program(torch, Runtime.get(), Verification.Minimal, pte, "forward",
                                      feed)  # as a reproducer runs it
        except RuntimeError as exc:
            cause = f"{exc}; the runtime says: {runtime_lines(lines)}"
            if steps != case.seq_len:
                raise TimeAxisFixed(f"the program exported at {steps} steps does not run at "
                                    f"seq_len {case.seq_len}: {cause}") from None
            raise AdapterFault(f"the ExecuTorch runtime failed: {cause}") from None
        roles = {"0": "y", "1": "h_n"} | ({"2": "c_n"} if lstm else {})
        if sorted(outputs) != sorted(roles):
            raise AdapterFault(f"the program returned {len(outputs)} outputs, expected "
                               f"{len(roles)} (y, h_n{', c_n' if lstm else ''})")
        ys, h_n, c_n = readout(outputs, roles, 1)
        y = ys[0]
        exported = (f"exported at {steps} steps" + (f" (time axis dynamic), run at "
                                                    f"{case.seq_len}" if steps != case.seq_len
                                                    else ""))
        form = (f"the recurrent op kept whole ({kept})" if kept else
                f"the recurrent op decomposed into a loop unrolled over the {steps} steps")
        note = (f"ExecuTorch: {exported}; {form}; {said}; export and lowering {seconds:.1f} s, "
                f"program {len(pte)} bytes")
        # the reproducer's record: the program as the runtime ran it, its inputs as fed
        names = ["x", "h0"] + (["c0"] if lstm else [])
        handed = Handed("executorch", {
            "framework": "executorch", "method": "forward", "verification": "Minimal",
            "delegate": self.delegate, "inputs": names, "roles": roles, "dtype": case.dtype,
            "h_n": "output", "absent": {}},
            arrays={f"feed/{name}": f.numpy() for name, f in zip(names, feed, strict=True)},
            files={"model.pte": bytes(pte)})
        return Outputs(y=y, h_n=h_n, c_n=c_n, models={"pte": bytes(pte)}, note=note,
                       handed=handed)


class ExecuTorchPortable(ExecuTorch):
    name = "executorch-portable"
    title = "PyTorch nn.LSTM/nn.GRU -> torch.export -> ExecuTorch portable kernels (CPU runtime)"
    named_only = ("lowers each case to an ExecuTorch program: 4-25 s a case on 2 cores, and "
                  "ExecuTorch's import 10-16 s")
    delegate = None


def _short(op: str) -> str:
    """``aten_linear_default`` -> ``linear``: the edge op's name without dialect and overload."""
    name = op.removeprefix("aten_")
    for overload in ("_default", "_tensor", "_dims", "_int", "_scalar", "_Tensor"):
        name = name.removesuffix(overload)
    return name


def _ops(counts: Counter) -> str:
    return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()) if n)


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """The lowering's passes log at INFO/WARNING on torch's and ExecuTorch's loggers: not for
    the user's terminal."""
    loggers = [logging.getLogger(name) for name in ("executorch", "torch.export")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
