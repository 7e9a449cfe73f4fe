"""The adapter base: capabilities as data, lazy availability, one ``_run`` to implement.

An adapter runs a case in one framework on one device. The base converts canonical
parameters to the adapter's native tensors through its layout (never by hand), casts them to
the case dtype, calls ``_run``, times it, and checks what comes back (shapes, finiteness), so a
subclass writes only the framework-specific part. Framework imports happen in
:meth:`Adapter.check_available` and ``_run``, never at import time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.cpu_flags import cpu_flags
from harness.data import Inputs, Outputs, gradient_shapes, output_shapes
from harness.dtypes import native_numpy
from harness.errors import Unavailable
from harness.handed import Handed
from harness.layouts import get_layout
from harness.layouts.base import Layout
from harness.params import Canonical
from harness.spec import Case, Tol
from harness.versions import installed, release

ALL_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})


# The lowest version of each framework the adapters need: the bounds declared in pyproject.toml
# (tests/cli/test_cli_conventions.py checks they agree) and pinned by constraints/minimum.txt
# (``tox -e minimum``). torch 2.4 is the first built against NumPy 2 (an older one cannot be
# imported beside numpy 2.x); the adapters' newer torch APIs have fallbacks (cuDNN's
# ``rnn.fp32_precision``, 2.9, else the legacy ``allow_tf32``: adapters/torch_cudnn.py). onnx
# 1.17 is the first with opset 22 / IR 10, which the onnxruntime adapter emits; onnxruntime
# 1.18 .. 1.20 reject opset 22 ("Opset 22 is under development").
MINIMUM_VERSIONS = {
    "torch": "2.4",
    "tensorflow": "2.21",
    "tf_keras": "2.21",
    "keras": "3.15",
    "onnx": "1.17",
    "onnxruntime": "1.21",
    "ai_edge_litert": "2.3",
    "openvino": "2026.4.1",
    "nncf": "3.4.0",
    "jax": "0.10.2",
    "flax": "0.12.8",
    "msgpack": "1.2.4",
    "mlx": "0.32.4",
    "executorch": "1.5.1",
}


def too_old(distributions: tuple[str, ...]) -> str | None:
    """Why the installed ``distributions`` are too old for the harness, or None. Reads the
    installed metadata only (no framework import); one not installed is left to the adapter's
    own import check, which names the package to install."""
    for dist in distributions:
        found = installed(dist)
        needed = MINIMUM_VERSIONS[dist]
        if found is not None and release(found) < release(needed):
            return f"needs {dist}>={needed}, found {found}"
    return None


def not_installed(distributions: tuple[str, ...]) -> list[str]:
    """Those of ``distributions`` that are not installed at all (metadata only, no import)."""
    return [dist for dist in distributions if installed(dist) is None]


def installed_reason(adapter: Adapter) -> str | None:
    """Why ``adapter`` cannot run here as far as the installed packages tell (no import), or
    None; a GPU adapter's device and a converter's health are only seen by importing its
    framework (:meth:`Adapter.unavailable_reason`)."""
    missing = not_installed(adapter.requires)
    if missing:
        return f"{', '.join(missing)} not installed"
    return too_old(adapter.requires)


NOT_QUANTIZED_CASE = "not a quantized case (it has no quantization: key; docs/quantization.md)"


class AdapterFault(Exception):
    """An adapter ran but returned something unusable (wrong shape, NaN/Inf)."""


@dataclass(frozen=True)
class Capabilities:
    """What an adapter can run. ``reasons`` overrides the default not-applicable wording."""

    cells: frozenset[str] = frozenset({"lstm", "gru"})
    directions: frozenset[str] = frozenset({"forward", "bidirectional"})
    dtypes: frozenset[str] = ALL_DTYPES
    peepholes: bool = False
    projection: bool = False
    cell_clip: bool = False
    proj_clip: bool = False
    gate_clip: bool = False
    input_forget: bool = False
    forget_bias: bool = True  # added at run time, or folded into a stored bias by the layout
    recurrent_activations: frozenset[str] = frozenset({"sigmoid"})
    gru_reset_after: frozenset[bool] = frozenset({True, False})
    variable_lengths: bool = True
    initial_state: bool = True
    multi_layer: bool = True
    projection_layers: int | None = None  # most layers a projected stack may have (None: any)
    gradients: bool = False
    reasons: dict[str, str] = field(default_factory=dict)
    # capability -> why a case needing it has its gradients not compared (forward only)
    gradient_reasons: dict[str, str] = field(default_factory=dict)

    def table(self) -> dict[str, str]:
        """One printable value per capability (``adapters`` command, reports)."""
        def show(v):
            if isinstance(v, frozenset):
                return ",".join(sorted(map(str, v)))
            return "yes" if v is True else "no" if v is False else str(v)
        table = {k: show(getattr(self, k)) for k in self.__dataclass_fields__
                 if k not in ("reasons", "gradient_reasons")}
        if self.gradients and self.gradient_reasons:
            table["gradients"] = f"yes, except with {','.join(sorted(self.gradient_reasons))}"
        return table


# (capability, does the case need it?, does the adapter have it?, default reason)
Requirement = tuple[str, Callable[[Case], bool], Callable[[Capabilities, Case], bool],
                    Callable[[Case], str]]

REQUIREMENTS: list[Requirement] = [
    ("cells", lambda c: True, lambda a, c: c.cell in a.cells,
     lambda c: f"no {c.cell.upper()} support"),
    ("directions", lambda c: True, lambda a, c: c.dir_mode in a.directions,
     lambda c: f"no {c.dir_mode} direction"),
    ("dtypes", lambda c: True, lambda a, c: c.dtype in a.dtypes,
     lambda c: f"no {c.dtype} support"),
    ("peepholes", lambda c: c.peepholes, lambda a, c: a.peepholes,
     lambda c: "no peephole connections"),
    ("projection", lambda c: c.proj_size > 0, lambda a, c: a.projection,
     lambda c: "no LSTM projection"),
    ("projection_layers", lambda c: c.proj_size > 0,
     lambda a, c: a.projection_layers is None or c.num_layers <= a.projection_layers,
     lambda c: f"no projection in a {c.num_layers}-layer stack"),
    ("cell_clip", lambda c: c.cell_clip is not None, lambda a, c: a.cell_clip,
     lambda c: "no cell-state clipping"),
    ("proj_clip", lambda c: c.proj_clip is not None, lambda a, c: a.proj_clip,
     lambda c: "no projection clipping"),
    ("gate_clip", lambda c: c.gate_clip is not None, lambda a, c: a.gate_clip,
     lambda c: "no gate pre-activation clipping (ONNX clip)"),
    ("input_forget", lambda c: c.input_forget, lambda a, c: a.input_forget,
     lambda c: "no coupled input-forget gate"),
    ("forget_bias", lambda c: c.forget_bias != 0, lambda a, c: a.forget_bias,
     lambda c: "no way to add a forget bias"),
    ("recurrent_activations", lambda c: True,
     lambda a, c: c.recurrent_activation in a.recurrent_activations,
     lambda c: f"no recurrent activation {c.recurrent_activation}"),
    ("gru_reset_after", lambda c: c.cell_kind.reads("reset_after"),
     lambda a, c: c.reset_after in a.gru_reset_after,
     lambda c: f"no GRU with reset_after={c.reset_after}"),
    ("variable_lengths", lambda c: c.seq_lengths is not None, lambda a, c: a.variable_lengths,
     lambda c: "no variable-length batches"),
    ("initial_state", lambda c: c.initial_state == "random", lambda a, c: a.initial_state,
     lambda c: "no initial states"),
    ("multi_layer", lambda c: c.num_layers > 1, lambda a, c: a.multi_layer,
     lambda c: "no stacked layers"),
]
# ``gradients`` is not a requirement: an adapter without a backward pass still runs a gradient
# case forward, and its pair says the gradients were not compared (Adapter.gradient_note).


class Adapter:
    """Base of every adapter. Subclasses set the class attributes and implement ``_run``."""

    name: str = ""
    title: str = ""
    framework: str = ""  # pytest marker: reference, torch, tensorflow, keras, onnx, cupy
    device: str = "cpu"  # cpu | gpu
    layout_name: str | None = None
    capabilities: Capabilities = Capabilities()
    tolerances: dict[str, Tol] = {}  # per-dtype defaults of this adapter (e.g. TF32)
    baseline: bool = False  # the float64 reference itself: compared with nothing
    # True for the noise-floor reference: its outputs are the noise floor itself, so its pair
    # passes by construction wherever the floor judges it (RunResult.passes_by_construction)
    is_the_noise_floor: bool = False
    # (kind, adapter name) variants a DIVERGED GPU pair is rerun with to find its cause
    # (harness/attribution.py: kinds tf32_off, deterministic, cpu)
    reruns: tuple[tuple[str, str], ...] = ()
    # native tensors handed to ``_run`` in the case dtype (float16/32/64; bfloat16 as float64)
    # rather than float64: half the bytes to write for float32, no cast left to the adapter
    native_in_case_dtype: bool = False
    # the distributions (keys of MINIMUM_VERSIONS) the adapter imports: an installed one older
    # than its minimum makes the adapter unavailable, with the version needed
    requires: tuple[str, ...] = ()
    # suffixes of the model files ``_run`` returns in ``Outputs.models`` (the graph an exporter
    # wrote): ``--save-outputs`` writes each as outputs/<case>/<adapter>.<suffix>
    saved_models: tuple[str, ...] = ()
    # environment variables of a worker process of the adapter's own: not None, the adapter
    # never runs in the process that asks for it (its availability check, environment and
    # calls go to that worker, :mod:`harness.isolation`), e.g. for a framework that reads its
    # configuration once per process, at import, from the environment
    own_process: dict[str, str] | None = None
    # not None: why the adapter is left out of the default selection (``--adapters`` not given,
    # or ``all``), e.g. a compile per case that costs seconds; it runs on a case only when named
    # on the command line or in that case's ``adapters:`` (harness.adapters.select,
    # harness.pairs.selected_by_case). The ``adapters`` command and the report show it.
    named_only: str | None = None
    # True: a quantized runtime, which runs only the cases with a ``quantization:`` key (the
    # others are not applicable, saying so; docs/quantization.md)
    quantized: bool = False

    _availability: str | None | bool = False  # False: not checked yet

    # Availability --------------------------------------------------------------------------
    def check_available(self) -> None:
        """Raise Unavailable(reason) when the adapter cannot run here. Imports lazily."""

    def unavailable_reason(self) -> str | None:
        if self._availability is False:
            try:
                old = too_old(self.requires)
                if old is not None:
                    raise Unavailable(old)
                self.check_available()
                self._availability = None
            except Unavailable as exc:
                self._availability = str(exc)
            except Exception as exc:  # a broken install is also "cannot run here"
                self._availability = f"{type(exc).__name__}: {exc}"
        return self._availability

    def versions(self) -> dict[str, str]:
        """Framework versions for run.json (only called when available)."""
        return {}

    def precision_flags(self) -> dict[str, object]:
        """This process's settings that change the adapter's arithmetic (TF32 and the like),
        for run.json (only called when available); the adapter's own pinning inside ``_run`` is
        in its versions. The TensorFlow and Keras adapters share TensorFlow's TF32 switch (read
        only where this process has imported TensorFlow); torch's adapters override this."""
        tf = sys.modules.get("tensorflow") if self.framework in ("tensorflow", "keras") else None
        if tf is None:
            return {}
        return {"tf.tensor_float_32_execution":
                tf.config.experimental.tensor_float_32_execution_enabled()}

    def environment(self) -> dict:
        """Availability, versions, precision and CPU flags, taken in this process: the runner asks
        for it where the adapter runs (:mod:`harness.isolation`) and records it
        (``PairResult.environment``, ``RunResult.environments``), so nothing is imported in a
        parent process for its versions."""
        reason = self.unavailable_reason()
        env: dict = {"available": reason is None, "reason": reason}
        if reason is None:
            try:
                env["versions"] = self.versions()
                env["precision_flags"] = self.precision_flags()
                # the instruction sets an integer kernel's results depend on (VNNI, AMX, ...)
                env["cpu_flags"] = cpu_flags()
            except Exception as exc:  # a version query must not lose the report
                env["versions_error"] = f"{type(exc).__name__}: {exc}"
        return env

    # Applicability -------------------------------------------------------------------------
    def not_applicable_reason(self, case: Case) -> str | None:
        if self.quantized and case.quantization is None:
            return f"{self.name}: {NOT_QUANTIZED_CASE}"
        caps = self.capabilities
        for cap, needed, has, reason in REQUIREMENTS:
            if needed(case) and not has(caps, case):
                return caps.reasons.get(cap) or f"{self.title or self.name}: {reason(case)}"
        return None

    def asked_for(self, case: Case) -> bool:
        """Whether ``case`` asks for this named-only adapter by a key of its own, as naming it
        in ``adapters:`` would (a ``shipped:`` file asks for its runtime's adapter)."""
        return False

    def judged_quantized(self, case: Case) -> bool:
        """Whether this adapter's pair on ``case`` is a quantized runtime's (the quantized
        judge's, where the case has ``quantization:``): :attr:`quantized`, or, for an adapter
        that runs a given file, whether that file is quantized."""
        return self.quantized

    def gradient_note(self, case: Case) -> str | None:
        """Why a gradient case's backward pass is not compared for this adapter, or None: no
        backward pass at all, or one that is wrong for a feature the case needs
        (``Capabilities.gradient_reasons``)."""
        caps = self.capabilities
        if not case.gradients:
            return None
        if not caps.gradients:
            why = caps.reasons.get("gradients") or f"{self.title or self.name}: no backward pass"
        else:
            why = next((caps.gradient_reasons[cap] for cap, needed, *_ in REQUIREMENTS
                        if cap in caps.gradient_reasons and needed(case)), None)
            if why is None:
                return None
        return f"gradients not applicable ({why}); forward compared only"

    def route_note(self, case: Case) -> str | None:
        """A note for the pair on how the adapter computes ``case`` where that differs from its
        usual way (reference-cuda: the generic code where its fused kernels do not reach)."""
        return None

    def computes_gradients(self, case: Case) -> bool:
        return case.gradients and self.gradient_note(case) is None

    @property
    def layout(self) -> Layout | None:
        return get_layout(self.layout_name) if self.layout_name else None

    # Running -------------------------------------------------------------------------------
    def run(self, case: Case, canonical: Canonical, inputs: Inputs, *,
            check_finite: bool = True) -> tuple[Outputs, float]:
        """Run and check; returns the outputs (float64) and the seconds ``_run`` took.
        ``check_finite=False`` leaves NaN/Inf to the caller (``harness.pairs.run_pair`` sees
        them in the divergence's sums, which read every element anyway)."""
        native = (self.layout.to_native(canonical, case, self.native_dtype(case))
                  if self.layout else canonical.tensors)
        start = time.perf_counter()
        out = self._run(case, native, inputs)
        seconds = time.perf_counter() - start
        if out.grads is not None and self.layout is not None:
            out.grads.params = self.layout.grads_from_native(out.grads.params, case).tensors
        self._check(case, out, check_finite)
        return out, seconds

    def native_dtype(self, case: Case) -> type:
        """The NumPy type of the native tensors ``_run`` gets (:attr:`native_in_case_dtype`)."""
        return native_numpy(case.dtype) if self.native_in_case_dtype else np.float64

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        """Run the case; for a gradient case (:meth:`computes_gradients`) also the backward pass
        of the loss in ``harness.data`` with ``inputs.dy``/``dh_n``/``dc_n``, returning
        ``Outputs.grads`` with ``params`` keyed by native tensor name. ``native`` is the
        adapter's own (made for this run by the layout)."""
        raise NotImplementedError

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed | None:
        """What ``_run`` hands the framework for this case (harness/handed.py), made
        without running it; None where the adapter records nothing (no reproducer). An adapter
        that records sets ``Outputs.handed`` in ``_run`` from the very call it makes; the run
        asks this only for a known upstream bug whose pair did not run (an adapter made
        unavailable by that bug)."""
        return None

    def _expected(self, case: Case, out: Outputs) -> dict[str, tuple[tuple[int, ...], np.ndarray]]:
        """Every output the case asks of this adapter: saved name -> (shape, what came back)."""
        expected = dict(output_shapes(case))
        got_all = out.named()
        if self.computes_gradients(case):
            if out.grads is None:
                raise AdapterFault("returned no gradients for a gradient case")
            expected |= gradient_shapes(case)
            got_all = got_all | out.grads.named()
        return {name: (shape, got_all.get(name)) for name, shape in expected.items()
                if name not in out.absent}

    def _check(self, case: Case, out: Outputs, finite: bool = True) -> None:
        wrong = sorted(set(out.absent) - set(output_shapes(case)))
        if wrong or "y" in out.absent:
            raise AdapterFault(f"declares absent {wrong or ['y']}: only final states may be "
                               f"absent ({sorted(set(output_shapes(case)) - {'y'})})")
        for name, (shape, got) in self._expected(case, out).items():
            if got is None:
                raise AdapterFault(f"returned no {name}")
            if tuple(got.shape) != shape:
                raise AdapterFault(f"returned {name} of shape {list(got.shape)}, "
                                   f"expected {list(shape)}")
        unknown = set(out.models) - set(self.saved_models)
        if unknown:
            raise AdapterFault(f"returned model file(s) {sorted(unknown)} it does not declare "
                               f"(saved_models: {list(self.saved_models)})")
        if finite:
            self.check_finite(case, out)

    def check_finite(self, case: Case, out: Outputs, skip: frozenset[str] = frozenset()) -> None:
        """AdapterFault naming the first output (saved name) with NaN or Inf, ``skip`` left
        out (outputs already seen to be finite)."""
        for name, (_, got) in self._expected(case, out).items():
            if name in skip or got is None:
                continue
            if not np.isfinite(np.add.reduce(got, axis=None)):  # one pass, no temporary
                bad = int(np.count_nonzero(~np.isfinite(got)))  # or the sum overflowed
                if bad:
                    raise AdapterFault(f"returned {bad} non-finite value(s) in {name}")
