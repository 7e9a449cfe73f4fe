"""``rnn-harness doctor``: read the case, the weights through the claimed layout and the
expected outputs (a file, or an adapter run on the file read as its own layout), diagnose, and
write the report and the corrected weights."""

from __future__ import annotations

import numpy as np

from harness.compare import tolerance_for
from harness.data import output_shapes
from harness.doctor.diagnose import diagnose
from harness.doctor.render import diagnosis_dict, render
from harness.errors import HarnessError, WeightsError
from harness.spec import Case


def load_expected(path: str, case: Case) -> dict[str, np.ndarray]:
    """``y`` (required), ``h_n``, ``c_n`` from an outputs file, shapes checked against the case."""
    from harness.memory import max_memory
    from harness.npz import load_npz

    arrays = load_npz(path, what="expected outputs", max_bytes=max_memory())
    shapes = output_shapes(case)
    if "y" not in arrays:
        raise WeightsError("missing tensor y", file=path, field="y")
    out = {}
    for name, shape in shapes.items():
        if name not in arrays:
            continue
        a = np.asarray(arrays[name])
        if tuple(a.shape) != shape:
            raise WeightsError(f"expected shape {list(shape)}, got {list(a.shape)}", file=path,
                               field=name)
        if not np.issubdtype(a.dtype, np.floating) or not np.isfinite(a).all():
            raise WeightsError("expected finite floating-point values", file=path, field=name)
        out[name] = a.astype(np.float64)
    return out


def doctor_file(case_file: str, weights: str, layout_name: str, *, expected: str | None = None,
                adapter: str | None = None, write_fixed: str | None = None,
                name: str | None = None, select: str | None = None,
                budget_s: float = 60.0, fmt: str = "markdown",
                repro: str | None = None) -> tuple[str, int]:
    """``rnn-harness doctor``: the report (markdown, or JSON with ``fmt="json"``) and the exit
    code (0 found, 1 not found). ``repro``: a folder for a NumPy-only script showing the claimed
    reading and the corrected one side by side (:mod:`harness.repro.doctor_script`)."""
    from harness.adapters import get_adapter
    from harness.cases import load_cases
    from harness.convert import guard, pick_case
    from harness.layouts import get_layout
    from harness.memory import max_memory
    from harness.prepare import load_inputs
    from harness.readers import read_native as read_any

    limit = max_memory()

    def read_native(path, layout_name, c, select=None):  # never more than the memory limit
        return read_any(path, layout_name, c, select=select, max_bytes=limit)

    if (expected is None) == (adapter is None):
        raise HarnessError("give either --expected OUT.npz or --adapter NAME")
    layout = get_layout(layout_name)
    runner = get_adapter(adapter) if adapter else None
    cases = load_cases(case_file)
    guard(cases, name)

    def claimed_native(c: Case) -> dict[str, np.ndarray]:
        native, _ = read_native(weights, layout.name, c, select=select)
        layout.from_native(native, c, file=weights)
        return native

    case = pick_case(cases, name, claimed_native, case_file)
    native = _claimed_reading(claimed_native, case, read_native, weights, layout.name, select)
    inputs = load_inputs(case, limit)
    if runner is not None:
        want, tol, source = _adapter_outputs(
            runner, case, inputs, weights,
            lambda own: read_native(weights, own, case, select=select)[0])
    else:
        want = load_expected(expected, case)
        tol = tolerance_for(case, "expected")
        source = f"{expected}"
    dx = diagnose(case, layout, native, inputs, want, source=source, tol=tol, budget_s=budget_s)
    repro_line = (_write_repro(repro, dx, layout, native, inputs, want, tol, source)
                  if repro else None)
    return _report(dx, layout.name, repro_line, fmt, write_fixed)


def _claimed_reading(claimed_native, case: Case, read_native, weights: str, layout_name: str,
                     select: str | None) -> dict[str, np.ndarray]:
    """The file's tensors, checked readable through the claimed layout; where they are not,
    the error names the layouts the file fits."""
    try:
        return claimed_native(case)
    except WeightsError as exc:
        from harness.convert import fitting_layouts
        have, _ = read_native(weights, layout_name, case, select=select)
        fits_ = [n for n in fitting_layouts(have, case) if n != layout_name]
        if fits_:
            exc.message += (f" (the file fits layout {', '.join(fits_)}; the claimed layout must "
                            "be able to read the file's tensors)")
        raise


def _adapter_outputs(runner, case: Case, inputs, weights: str, read_own
                     ) -> tuple[dict[str, np.ndarray], object, str]:
    """``--adapter``: the outputs ``runner`` gives on the file read as its own layout
    (``read_own(layout name)``: the file's tensors), their tolerance and their source in
    words."""
    from harness import isolation
    from harness.layouts import get_layout

    # asked and run where the run would ask and run it (its own process, for a framework
    # that fixes its configuration at import), under the run's default timeout
    with isolation.executor(isolation.DEFAULT_TIMEOUT) as where:
        for why in (where.unavailable_reason(runner), runner.not_applicable_reason(case)):
            if why:
                raise HarnessError(f"adapter {runner.name!r} cannot run this case here: "
                                   f"{why}")
        own = runner.layout or get_layout("canonical")
        try:
            truth = own.from_native(read_own(own.name), case, file=weights)
        except WeightsError as exc:
            exc.message += (f" (with --adapter, the weights must be in the adapter's own "
                            f"layout {own.name!r}: the framework is the source of truth)")
            raise
        try:
            out, _ = where.call(runner, case, truth, inputs)
        except isolation.PairFailure as exc:
            raise HarnessError(f"adapter {runner.name!r} failed on this case: {exc}"
                               ) from None
    tol = tolerance_for(case, runner.name, runner.tolerances)
    return out.named(), tol, f"adapter {runner.name} (the file read as its layout {own.name!r})"


def _report(dx, layout_name: str, repro_line: str | None, fmt: str, write_fixed: str | None
            ) -> tuple[str, int]:
    """The report (markdown or JSON) and the exit code; the corrected weights written where
    asked and found."""
    from harness.npz import save_npz

    code = 0 if dx.best is not None else 1
    if fmt == "json":
        import json

        data = diagnosis_dict(dx)
        if repro_line:
            data["repro"] = repro_line
        if write_fixed and dx.fixed is not None:
            save_npz(write_fixed, dx.fixed)
            data["wrote_fixed"] = write_fixed
        return json.dumps(data, indent=2, default=str) + "\n", code
    text = render(dx)
    if repro_line:
        text += f"\n{repro_line}\n"
    if write_fixed:
        if dx.fixed is not None:
            save_npz(write_fixed, dx.fixed)
            text += (f"\nWrote the corrected weights (layout `{layout_name}`) to {write_fixed}: "
                     f"read as `{layout_name}` they reproduce the expected outputs (max abs "
                     f"error {dx.fixed_error:.1e}).\n")
        else:
            why = ("nothing found reproduces the outputs" if dx.best is None else
                   "the claimed layout is right, nothing to correct" if not dx.best.hypothesis
                   else "the mistake is in how the inputs were fed, not in the weights")
            text += f"\nNo corrected weights written to {write_fixed}: {why}.\n"
    return text, code


def _write_repro(folder: str, dx, layout, native: dict[str, np.ndarray], inputs, want: dict,
                 tol, source: str) -> str:
    """``--repro``: the claimed and the corrected reading side by side, or why not."""
    from harness.repro.doctor_script import write_doctor_repro

    best = dx.best
    if best is None or not best.hypothesis or dx.fixed is None:
        why = ("nothing found reproduces the outputs" if best is None else
               "the claimed layout is right, nothing to show" if not best.hypothesis else
               "the mistake is in how the inputs were fed, not in the weights")
        return f"No reproducer written to {folder}: {why}."
    fixed_case = dx.fixed_case or dx.case
    return write_doctor_repro(
        folder, case=dx.case, fixed_case=fixed_case, layout=layout.name,
        claimed=layout.from_native(native, dx.case).tensors,
        right=layout.from_native(dx.fixed, fixed_case).tensors, inputs=inputs, expected=want,
        atol=tol.atol, rtol=tol.rtol, mistakes=[m.text for m in best.hypothesis], source=source)
