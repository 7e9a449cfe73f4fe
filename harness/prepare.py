"""A case made ready to run: canonical parameters, inputs, the reference and the noise floor.

The reference and the noise floor are NumPy's, or, in a run on the GPU (``--device gpu``) where
torch sees one, the same generic reference code on torch CUDA tensors (:func:`baseline_arrays`):
then the NumPy ``reference`` adapter is judged against that baseline like any other adapter.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from harness import data, params, reference
from harness.case_yaml import field_line
from harness.data import Inputs, Outputs, state_shapes
from harness.dtypes import FORMATS, native_numpy, round_to
from harness.errors import CaseError, WeightsError
from harness.layouts import get_layout
from harness.memory import MAX_MEMORY_ENV, MemoryLimit, gib, max_memory
from harness.npz import load_npz
from harness.params import Canonical
from harness.readers import deployed, read_case_weights
from harness.spec import Case, ShippedFile, TensorFile


@dataclass
class Prepared:
    case: Case
    canonical: Canonical
    inputs: Inputs
    reference: Outputs
    noise_floor: Outputs
    seconds: float = 0.0  # all of prepare
    reference_seconds: float = 0.0  # of which computing the reference (and its gradients)
    noise_floor_seconds: float = 0.0  # and the noise floor (a float64 case's: the reference's)
    steps: list | None = None  # harness.steplocal.step_cases, made for the first pair needing them
    baseline_on: str = "numpy"  # where the reference and the noise floor were computed


# Resource guard ------------------------------------------------------------------------------

def _cast_itemsize(case: Case) -> int:
    """Bytes an element of an adapter's natives in the case dtype
    (:meth:`harness.adapters.base.Adapter.native_dtype`): none where they are held in float64
    (float64 and bfloat16 cases)."""
    held = np.dtype(native_numpy(case.dtype))
    return 0 if held == np.float64 else held.itemsize


# Python object overheads, measured (peak RSS over a range of shapes,
# tests/inputs/test_memory_guard.py): per layer and direction of a reference pass (its blocks,
# transposes, tape, list entries), per timestep of one (the step's small arrays), per timestep
# of a backward pass, and once
_PER_LAYER_BYTES = 2500
_PER_STEP_BYTES = 250
_PER_STEP_BACKWARD_BYTES = 1500
_FIXED_BYTES = 3 * 2**19


def estimate_bytes(case: Case) -> dict[str, int]:
    """Bytes one case needs, by part, from its sizes alone (Python ints: no overflow).

    parameters: every canonical block, and one adapter's natives in the case dtype (float32,
    float16) converted from them; inputs: x, h0, c0; outputs: y, h_n, c_n; reference: per pass
    (the float64 reference, and the noise floor in a lower dtype, both kept) the weights'
    working copies, every layer's y plus the largest layer's working buffers per direction (its
    reversed input, the input projection of all timesteps [B, T, gates*H], y, and as much again
    in temporaries), and the noise floor's outputs; Python objects: the overheads of the arrays
    and lists made per layer, direction and timestep (a million layers of size 1 are gigabytes
    of them, not the kilobytes their numbers take).
    """
    B, T, I, H = case.batch, case.seq_len, case.input_size, case.hidden_size
    L, D, O, G = case.num_layers, case.num_directions, case.out_size, len(case.gates)
    P = case.proj_size
    passes = 1 if case.dtype == "float64" else 2
    per_layer = G * H * O + 2 * G * H + (3 * H if case.peepholes else 0) + P * H
    n_params = D * (G * H * (I + (L - 1) * O * D) + L * per_layer)
    states = L * D * B * (O + (H if case.cell_kind.has_cell_state else 0))
    widest_input = I if L == 1 else max(I, O * D)
    parts = {
        "parameters": (8 + _cast_itemsize(case)) * n_params,
        "inputs": 8 * (B * T * I + states),
        "outputs": 8 * (B * T * D * O + states),
        "reference buffers": 8 * passes * (n_params + L * B * T * D * O
                                           + 2 * B * T * (widest_input + G * H + O))
                             + 8 * (passes - 1) * (B * T * D * O + states),
        "Python objects": _FIXED_BYTES + passes * L * D * (_PER_LAYER_BYTES
                                                          + T * _PER_STEP_BYTES),
    }
    if case.gradients:  # upstream gradients, dx, parameter gradients and the cached activations
        parts["gradients"] = (8 * passes * (B * T * (D * O + I) + 2 * states + n_params
                                            + L * D * B * T * (G * H + 3 * H + O))
                              + passes * L * D * T * _PER_STEP_BACKWARD_BYTES)
    return parts


def estimate_device_bytes(case: Case) -> int:
    """Bytes GPU work on one case needs on the device, the largest of what runs there: the
    float64 reference on the GPU (``reference-cuda``: every tensor in float64, one pass, its
    gradients), which is more than a framework's own run in the case dtype. Python objects
    stay on the host."""
    parts = estimate_bytes(case.model_copy(update={"dtype": "float64"}))
    return sum(v for k, v in parts.items() if k != "Python objects")


# The work a case may ask for, whatever the memory limit: every layer and every timestep is a
# Python loop in the reference, in the noise floor and in several adapters (a layer also builds a
# framework layer), so a million layers, or a billion steps, of size 1 would fit a large machine's
# memory and run for hours. No real stack is near these; a longer sequence is split into cases.
MAX_LAYERS = 1000
MAX_CELL_STEPS = 10**7  # layers x directions x timesteps, one pass


def check_work(case: Case) -> None:
    """Refuse a case with more than :data:`MAX_LAYERS` layers or :data:`MAX_CELL_STEPS` cell
    steps, from its sizes alone, before anything is allocated or looped over."""
    steps = case.num_layers * case.num_directions * case.seq_len
    if case.num_layers > MAX_LAYERS:
        field, what = "num_layers", (f"has {case.num_layers} layers, more than the "
                                     f"{MAX_LAYERS} the harness runs")
    elif steps > MAX_CELL_STEPS:
        field, what = "seq_len", (f"asks for {steps} cell steps (num_layers x directions x "
                                  f"seq_len), more than the {MAX_CELL_STEPS} the harness runs")
    else:
        return
    raise CaseError(f"case {case.name} {what} (each is a Python loop in the reference and in "
                    "several adapters); make the case smaller", file=case.source, field=field,
                    line=field_line(case.source, (field,)))


def check_memory(case: Case, limit: int | None = None) -> None:
    """Refuse a case whose tensors would exceed ``limit`` bytes on the host, or, with a
    :class:`MemoryLimit` for GPU work, its ``gpu`` bytes on the device, before allocating
    anything. The refusal names both limits and the override. A case within them that asks for
    more work than the harness runs (:func:`check_work`) is refused next, whatever the limit."""
    limit = max_memory() if limit is None else limit
    parts = estimate_bytes(case)
    total = sum(parts.values())
    gpu = getattr(limit, "gpu", None)
    device = estimate_device_bytes(case) if gpu is not None else 0
    if total <= limit and (gpu is None or device <= gpu):
        check_work(case)
        return
    sizes = {k: getattr(case, k) for k in ("hidden_size", "input_size", "seq_len", "batch",
                                           "num_layers")}
    biggest = max(sizes, key=sizes.get)
    limits = f" ({limit.describe()})" if isinstance(limit, MemoryLimit) else ""
    if total > limit:
        detail = ", ".join(f"{k} {gib(v)}" for k, v in parts.items())
        need = f"needs an estimated {gib(total)} ({detail}), more than the memory limit of " \
               f"{gib(limit)}"
    else:
        need = f"needs an estimated {gib(device)} on the GPU (the float64 reference there), " \
               f"more than the GPU memory limit of {gib(gpu)}"
    raise CaseError(
        f"case {case.name} {need}{limits}; make the case smaller or raise --max-memory / "
        f"{MAX_MEMORY_ENV}", file=case.source, field=biggest,
        line=field_line(case.source, (biggest,)))


def check(case: Case, limit: int | None = None) -> None:
    """Everything that can be wrong with a case's input, before any pair runs: its memory
    estimate, then its weight and input files (read, validated, discarded)."""
    check_memory(case, limit)
    with_file_context(case, "weights", lambda: load_weights(case, limit))
    with_file_context(case, "inputs", lambda: load_inputs(case, limit))
    if case.shipped is not None:  # the file its runtime's adapter runs: readable, the case's
        with_file_context(case, "shipped", lambda: deployed.shipped_layer(case, limit))


def with_file_context(case: Case, key: str, load: Callable[[], object]) -> object:
    """Run ``load``; a problem in a file the case names also says which case named it."""
    try:
        return load()
    except WeightsError as exc:
        if (isinstance(getattr(case, key), TensorFile | ShippedFile)
                and exc.file != case.source):
            line = field_line(case.source, (key, "file"))
            exc.message += f" ({key}.file of {case.source}" + (f":{line}" if line else "") + ")"
        raise


# Loading -------------------------------------------------------------------------------------

def _largest(dtype: str) -> float:
    # NumPy's finfo knows no bfloat16 ("not inexact"); ml_dtypes' finfo knows every format
    return float(ml_dtypes.finfo(FORMATS[dtype].numpy).max)


def check_finite(case: Case, key: str, tensors: dict[str, np.ndarray],
                 originals: dict[str, np.ndarray] | None = None) -> None:
    """Refuse weights or inputs that are not finite in the case dtype (bad input: a value that
    overflows the case dtype becomes inf, and every result computed from it is meaningless).
    ``tensors``: rounded to the case dtype; ``originals``: the values before rounding (a file's),
    for the message."""
    spec = getattr(case, key)
    for name, a in tensors.items():
        if np.isfinite(a).all():
            continue
        largest = f"largest finite {case.dtype}: {_largest(case.dtype):.5g}"
        if isinstance(spec, TensorFile):
            src = np.asarray((originals or tensors)[name], dtype=np.float64)
            finite = np.abs(src[np.isfinite(src)])
            biggest = f"{finite.max():.3g}" if finite.size else "inf"
            raise WeightsError(f"values up to {biggest} overflow the case dtype ({largest})",
                               file=case.resolve(spec.file), field=name)
        scale = getattr(spec, "scale", None)
        raise WeightsError(f"{key} drawn with scale {scale:g} overflow the case dtype "
                           f"({largest}, in {name})", file=case.source, field=f"{key}.scale",
                           line=field_line(case.source, (key, "scale")))


def load_weights(case: Case, limit: int | None = None) -> Canonical:
    """Canonical parameters from the case: generated from the seed, or read from a weights file
    (an .npz of native tensors, or a framework's own file: :func:`read_case_weights`, which
    tells the layout where the case leaves it out and checks what the file says against the
    case), under the memory limit, never unpickling."""
    if not isinstance(case.weights, TensorFile):
        with np.errstate(over="ignore"):  # overflow is refused just below, as one line
            canonical = params.generate(case)
        check_finite(case, "weights", canonical.tensors)
        return canonical
    path = case.resolve(case.weights.file)
    if case.weights.layout is not None:
        layout = get_layout(case.weights.layout)
        if case.cell not in layout.cells:
            raise WeightsError(f"layout {layout.name!r} has no {case.cell}", file=case.source,
                               field="weights.layout")
    try:
        reader = deployed.read_case_weights if deployed.handles(path) else read_case_weights
        name, native, _ = reader(path, case, layout=case.weights.layout,
                                 select=case.weights.select,
                                 max_bytes=max_memory() if limit is None else limit)
    except WeightsError as exc:  # a reader's advice names convert's options: say the keys
        exc.message = exc.message.replace("--select", "weights.select").replace(
            "--from", "weights.layout:")
        raise
    canonical = get_layout(name).from_native(native, case, file=str(path))
    with np.errstate(over="ignore"):
        rounded = {k: round_to(v, case.dtype) for k, v in canonical.tensors.items()}
    check_finite(case, "weights", rounded, canonical.tensors)
    return Canonical(rounded)


INPUT_NAMES = ("x", "h0", "c0", "seq_lengths", "dy", "dh_n", "dc_n")


def _did_you_mean(name: str, known: tuple[str, ...]) -> str:
    """`` (did you mean c0?)`` for ``c_O``, ``h_0``, ``C0``: names compared lower-cased, without
    underscores, the letter o read as a zero; else the closest by difflib."""
    import difflib

    def norm(n: str) -> str:
        return n.lower().replace("_", "").replace("o", "0")

    same = [k for k in known if norm(k) == norm(name)]
    close = same or difflib.get_close_matches(norm(name), [norm(k) for k in known], 1, 0.5)
    if not close:
        return ""
    hit = same[0] if same else next(k for k in known if norm(k) == close[0])
    return f" (did you mean {hit}?)"


def load_inputs(case: Case, limit: int | None = None) -> Inputs:
    """Inputs from the case: generated from the seed, or read from ``inputs.file``.

    The file's names are checked as a weights file's are: an unknown one (``h_0``, ``c_O``) is
    refused with the name it was probably meant to be, ``c0`` for a GRU is refused. Lengths are
    the file's ``seq_lengths`` or the case's; both given and different: refused. Every adapter
    reads lengths and initial states from the Inputs returned here (``inputs.seq_lengths``)."""
    if not isinstance(case.inputs, TensorFile):
        with np.errstate(over="ignore"):
            generated = data.generate(case)
        check_finite(case, "inputs", {k: v for k, v in vars(generated).items()
                                      if isinstance(v, np.ndarray) and k != "seq_lengths"})
        return generated
    path = case.resolve(case.inputs.file)
    arrays = load_npz(path, what="inputs", max_bytes=max_memory() if limit is None else limit)
    h_shape, c_shape = state_shapes(case)
    expected = {"x": (case.batch, case.seq_len, case.input_size), "h0": h_shape}
    if case.cell_kind.has_cell_state:
        expected["c0"] = c_shape
    optional = {}  # upstream gradients: generated from the seed when absent
    if case.gradients:
        optional = {"dy": (case.batch, case.seq_len, case.num_directions * case.out_size),
                     "dh_n": h_shape}
        if case.cell_kind.has_cell_state:
            optional["dc_n"] = c_shape
    known = (*expected, *optional, "seq_lengths")
    if "x" not in arrays:
        meant = [n for n in arrays if _did_you_mean(n, ("x",))]
        raise WeightsError(f"missing tensor x (found: {', '.join(arrays) or 'nothing'})"
                           + (f"; did you mean x for {meant[0]}?" if meant
                              else ""), file=path, field="x")
    for name in arrays:
        if name in known:
            continue
        if name in ("c0", "dc_n"):
            raise WeightsError("a GRU has no cell state: remove it", file=path, field=name)
        if name in ("dy", "dh_n"):
            raise WeightsError("upstream gradients, but the case computes none (gradients: "
                               "true uses them)", file=path, field=name)
        raise WeightsError(f"unknown tensor{_did_you_mean(name, known)}; an inputs file holds "
                           f"{', '.join(known)} (docs/cases.md)", file=path, field=name)
    got = {}
    for name, shape in (expected | optional).items():
        if name not in arrays:
            if name not in optional:
                got[name] = np.zeros(shape)  # initial states default to zeros
            continue
        a = arrays[name]
        if a.shape != shape:
            raise WeightsError(f"expected shape {list(shape)}, got {list(a.shape)}", file=path,
                               field=name)
        if not np.issubdtype(a.dtype, np.floating) or not np.isfinite(a).all():
            raise WeightsError("expected finite floating-point values", file=path, field=name)
        with np.errstate(over="ignore"):
            got[name] = round_to(a, case.dtype)
        check_finite(case, "inputs", {name: got[name]}, {name: a})
    lengths = arrays.get("seq_lengths")
    if lengths is not None:
        if lengths.shape != (case.batch,) or not np.issubdtype(lengths.dtype, np.integer):
            raise WeightsError(f"expected {case.batch} integers", file=path, field="seq_lengths")
        if lengths.min() < 1 or lengths.max() > case.seq_len:
            raise WeightsError(f"expected lengths in 1..{case.seq_len}", file=path,
                               field="seq_lengths")
        lengths = lengths.astype(np.int64)
        if case.seq_lengths is not None and list(lengths) != list(case.seq_lengths):
            raise WeightsError(  # with_file_context names the case file
                f"{[int(v) for v in lengths]} contradicts the case's seq_lengths "
                f"{list(case.seq_lengths)}: give the lengths in one place", file=path,
                field="seq_lengths")
    elif case.seq_lengths:
        lengths = np.asarray(case.seq_lengths, dtype=np.int64)
    inputs = Inputs(x=got["x"], h0=got["h0"], c0=got.get("c0"), seq_lengths=lengths,
                    dy=got.get("dy"), dh_n=got.get("dh_n"), dc_n=got.get("dc_n"))
    return data.with_upstream(case, inputs) if case.gradients else inputs


def with_inputs_lengths(case: Case, inputs: Inputs) -> Case:
    """The case with the lengths its inputs hold (an inputs file's ``seq_lengths``), so that
    capabilities (variable lengths), layouts and adapters see one set of lengths."""
    if inputs.seq_lengths is None or case.seq_lengths is not None:
        return case
    return case.model_copy(update={"seq_lengths": [int(v) for v in inputs.seq_lengths]})


def _check_reference(case: Case, canonical: Canonical, out: Outputs, what: str) -> None:
    """A reference or noise floor that is not finite compares nothing (NaN matches nothing, and
    a pair would be judged against garbage): an error of the case, never a pass of any pair."""
    named = out.named()
    if out.grads is not None:
        named |= out.grads.named()
    bad = [k for k, v in named.items() if not np.isfinite(v).all()]
    if not bad:
        return
    biggest = max(float(np.abs(t).max(initial=0.0)) for t in canonical.tensors.values())
    raise CaseError(f"{what} overflows ({', '.join(bad)} not finite): weights up to "
                    f"{biggest:.3g} in a {case.dtype} case; make the weights or inputs smaller",
                    file=case.source, field="weights")


def prepare(case: Case, limit: int | None = None, device: str = "cpu") -> Prepared:
    """Canonical parameters, inputs, the reference and the noise floor of one case: what every
    adapter of the case shares. The float64 reference is computed once; in a float64 case it is
    also the noise floor. ``limit``: the memory limit in bytes (default: :func:`max_memory`).
    ``device``: the run's (``--device``): ``gpu`` computes the reference and the noise floor on
    the GPU where torch sees one (:func:`baseline_arrays`)."""
    start = time.perf_counter()
    check_memory(case, limit)
    canonical = with_file_context(case, "weights", lambda: load_weights(case, limit))
    inputs = with_file_context(case, "inputs", lambda: load_inputs(case, limit))
    case = with_inputs_lengths(case, inputs)
    on = baseline_arrays(device)
    computing = time.perf_counter()
    # overflow in the reference is refused below, as an error of the case, not a warning
    with np.errstate(over="ignore", invalid="ignore"):
        ref, floor, reference_seconds, floor_seconds = _reference_and_floor(
            case, canonical, inputs, computing, on)
    _check_reference(case, canonical, ref, "the float64 reference")
    _check_reference(case, canonical, floor, f"the {case.dtype} noise floor")
    return Prepared(case, canonical, inputs, ref, floor, time.perf_counter() - start,
                    reference_seconds, floor_seconds,
                    baseline_on=on.name if on is not None else "numpy")


def _reference_and_floor(case: Case, canonical: Canonical, inputs: Inputs, computing: float,
                         on: ArraysOn | None = None) -> tuple[Outputs, Outputs, float, float]:
    """The reference and the noise floor, with NumPy or (``on``) on the device."""
    compute = _reference_outputs if on is None else on.reference_outputs
    ref = compute(case, canonical, inputs, "float64")
    reference_seconds = time.perf_counter() - computing
    if case.dtype == "float64":
        floor, floor_seconds = ref, reference_seconds
    else:
        computing = time.perf_counter()
        floor = compute(case, canonical, inputs, case.dtype)
        floor_seconds = time.perf_counter() - computing
    return ref, floor, reference_seconds, floor_seconds


def reference_and_floor(case: Case, canonical: Canonical,
                        inputs: Inputs) -> tuple[Outputs, Outputs]:
    """The float64 reference and the noise floor of ``canonical`` (weights other than the
    case's own, e.g. as a framework with a known bug reads them), with NumPy."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref, floor, _, _ = _reference_and_floor(case, canonical, inputs, time.perf_counter())
    return ref, floor


def _reference_outputs(case: Case, canonical: Canonical, inputs: Inputs, dtype: str) -> Outputs:
    """The reference in ``dtype``'s arithmetic, with its gradients in a gradient case."""
    out = reference.run(case, canonical, inputs, dtype=dtype)
    if case.gradients:
        out.grads = reference.gradients(case, canonical, inputs, dtype=dtype)
    return out


# The reference on the GPU --------------------------------------------------------------------

@dataclass(frozen=True)
class ArraysOn:
    """Torch tensors on ``device``: where :func:`prepare` computes the reference and the noise
    floor in a GPU run (the same generic reference code as on NumPy arrays). Tests use it with
    ``device="cpu"``."""

    torch: Any
    device: str

    @property
    def name(self) -> str:
        return f"torch {self.device}"

    def to(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(self.device)

    def back(self, a: Any) -> np.ndarray:
        return a.detach().cpu().numpy()

    def reference_outputs(self, case: Case, canonical: Canonical, inputs: Inputs, dtype: str
                          ) -> Outputs:
        """:func:`_reference_outputs` on this device, with NumPy arrays in and out."""
        on = Canonical({k: self.to(v) for k, v in canonical.tensors.items()})
        with self.ieee_float32_products():
            out = _reference_outputs(case, on, inputs.mapped(self.to), dtype).mapped(self.back)
        if self.device == "cuda":  # the tapes' memory back to the GPU, for the adapters
            self.torch.cuda.empty_cache()
        return out

    @contextlib.contextmanager
    def ieee_float32_products(self) -> Iterator[None]:
        """No TF32 in float32 products (the noise floor's arithmetic is float32's, as on the
        CPU), for the duration; the previous setting comes back."""
        matmul = self.torch.backends.cuda.matmul
        if hasattr(matmul, "fp32_precision"):  # torch >= 2.9
            before, matmul.fp32_precision = matmul.fp32_precision, "ieee"
        else:
            before, matmul.allow_tf32 = matmul.allow_tf32, False
        try:
            yield
        finally:
            if hasattr(matmul, "fp32_precision"):
                matmul.fp32_precision = before
            else:
                matmul.allow_tf32 = before


def baseline_arrays(device: str) -> ArraysOn | None:
    """Torch CUDA tensors for a run on the GPU (``device`` ``gpu``) where torch sees one;
    None (NumPy) otherwise."""
    if device != "gpu":
        return None
    try:
        import torch
    except ImportError:
        return None
    return ArraysOn(torch, "cuda") if torch.cuda.is_available() else None
