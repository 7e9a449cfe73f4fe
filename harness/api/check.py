"""The public functions (:mod:`harness.api`): cases from files, dicts or code; a check of a
case through adapters; expected outputs from a framework's own; the doctor's diagnosis."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.api.results import CheckResult
from harness.api.weights import GivenWeights, given_weights, named
from harness.data import Inputs
from harness.doctor.findings import Diagnosis
from harness.errors import CaseError, HarnessError
from harness.spec import Case

CaseLike = Case | Mapping[str, Any] | str | os.PathLike | None
DICT_SOURCE = "case dict"  # what errors in a case built in code name as the file
DEFAULT_NAME = "check"  # the name of a case built in code that gives none


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    """A temporary folder for the files weights given as objects become; removed after."""
    with tempfile.TemporaryDirectory(prefix="rnn-harness-") as folder:
        yield Path(folder)


def _cases(case: CaseLike, weights: GivenWeights | None, fields: dict[str, Any]) -> list[Case]:
    """The cases ``case`` stands for, with ``fields`` and the weights' entry over them, each
    validated as a case file's are (:func:`harness.case_validation.validate_case` and
    :func:`harness.names.check_case_adapters`: errors name the field). A case built in code (a
    dict, or None) takes what the weights tell about it for the fields it leaves out."""
    from harness.case_validation import validate_case
    from harness.cases import load_cases
    from harness.names import check_case_adapters

    if case is None or isinstance(case, Mapping):
        data = dict(case or {})
        if "matrix" in data:
            raise CaseError("a matrix expands a case file: write one (a dict is one case)",
                            file=DICT_SOURCE, field="matrix")
        told = weights.fields if weights is not None else {}
        if "direction" in data or "bidirectional" in data:  # the case says it one way
            told = {k: v for k, v in told.items() if k not in ("direction", "bidirectional")}
        data = {"name": DEFAULT_NAME, **told, **data, **fields}
        found = [validate_case(data, file=DICT_SOURCE)]
    elif isinstance(case, Case):
        found = [case]
    elif isinstance(case, str | os.PathLike):
        found = load_cases(case)
    else:
        raise HarnessError(f"case: expected a case file, a dict of case keys or a Case, got "
                           f"{type(case).__name__}")
    out = []
    for c in found:
        update = dict(fields)
        if weights is not None:
            update["weights"] = weights.entry(c)
        if update:
            if "weights" in update:
                update["weights"] = update["weights"].model_dump(exclude_none=True)
            data = {**c.model_dump(exclude={"source"}, exclude_none=True), **update}
            c = validate_case(data, file=c.source or DICT_SOURCE)
        out.append(c)
    check_case_adapters(out)
    return out


def make_case(case: CaseLike = None, *, weights: Any = None, layout: str | None = None,
              select: str | None = None, name: str | None = None, **fields: Any) -> Case:
    """One case, validated as a case file is: from a case file (``name`` picks one of a
    matrix), a dict of case keys, a :class:`~harness.spec.Case`, or nothing but ``fields``
    and what the weights tell. ``weights``: as :func:`check` takes them; a framework object's
    files go to a temporary folder that lives as long as the process."""
    given = None
    if weights is not None:
        folder = Path(tempfile.mkdtemp(prefix="rnn-harness-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        given = given_weights(weights, folder, layout=layout, select=select)
    if name is not None and not isinstance(case, str | os.PathLike):
        fields["name"] = name
    with named(given.label if given else None, folder if given else Path(os.devnull)):
        cases = _cases(case, given, fields)
    if isinstance(case, str | os.PathLike) and name is not None:
        cases = [c for c in cases if c.name == name]
    if len(cases) != 1:
        raise CaseError(f"{len(cases)} cases" + (f" named {name!r}" if name else "")
                        + f": pick one with name= (the file has: "
                        f"{', '.join(c.name for c in _cases(case, None, {}))})", file=str(case))
    return cases[0]


def case_inputs(case: CaseLike) -> Inputs:
    """The inputs every adapter of ``case`` is fed (x [B, T, I], h0, c0, seq_lengths), as the
    run makes them: to run a framework's own model on the same data."""
    from harness.prepare import load_inputs, with_file_context

    case = case if isinstance(case, Case) else make_case(case)
    return with_file_context(case, "inputs", lambda: load_inputs(case))


def check(case: CaseLike = None, *, weights: Any = None, adapters: str | Sequence[str] | None
          = None, device: str | None = None, layout: str | None = None, select: str | None = None,
          out: str | os.PathLike | None = None, step_mode: str = "auto",
          timeout: float | None = None, **fields: Any) -> CheckResult:
    """Run ``case`` through ``adapters`` and compare each with the float64 reference.

    ``case``: a case file (every case of a matrix runs), a dict of case keys, a
    :class:`~harness.spec.Case`, or None (the weights tell the sizes); ``fields`` override any
    of its keys (``seq_len=8``). ``weights``: a file (.npz, .pt/.pth, .keras/.h5/.weights.h5,
    .onnx, .msgpack), a torch ``nn.LSTM``/``nn.GRU`` module, a Keras layer or model, an ONNX
    ``ModelProto`` or a mapping of native arrays (``layout`` then says whose, unless their
    names and shapes fit one layout only); ``select`` picks the RNN in a model. ``adapters``:
    names (``"reference,torch-cpu"`` or a list, not empty), ``"all"`` (the default: every
    adapter but those run only when named) or ``"every"`` (those too); ``device`` ``cpu``,
    ``gpu`` or ``all`` filters them (default: as ``rnn-harness run``, the devices this machine
    has for ``all`` and ``every``, every device for names); within what the case selects.
    ``out``: a report folder to write (default none).

    Bad input (a case or weights that cannot be read) raises :class:`HarnessError` naming the
    file and field, before anything runs; an adapter that fails is a pair with the verdict
    ``error``, never an exception."""
    from harness import prepare, runner
    from harness.plan import Request, plan
    from harness.run_options import RunOptions

    # the adapters, the device and the named-only rule, as the command line and the plugin have
    # them (harness.plan); bad names and devices are refused here, before any weights are read
    request = Request(adapters=adapters, device=device, adapters_field="adapters",
                      device_field="device")
    with _scratch() as folder:
        given = (given_weights(weights, folder, layout=layout, select=select)
                 if weights is not None else None)
        with named(given.label if given else None, folder):
            cases = _cases(case, given, fields)
            for c in cases:  # bad input raises here, before anything runs
                prepare.check(c)
        planned = plan(replace(request, cases=cases))
        options = RunOptions(timeout=timeout, step_mode=step_mode, device=planned.device,
                             named=planned.named)
        result = runner.run(cases, list(planned.adapters), options)
        report = None
        if out is not None:
            from harness.report import write_report

            report = write_report(result, out)
    return CheckResult.of_run(result, report)


def expected_outputs(outputs: Any, case: CaseLike, *, framework: str,
                     batch_first: bool | None = None) -> dict[str, np.ndarray]:
    """``y``, ``h_n``, ``c_n`` (float64) in the harness's order from what ``framework`` returned
    on :func:`case_inputs`: ``torch``: ``(y, (h_n, c_n))`` or ``(y, h_n)``; ``keras``:
    ``[y, h, c]`` or Bidirectional's ``[y, h_f, c_f, h_b, c_b]`` (``return_state=True``); ``onnx``:
    ``[Y, Y_h, Y_c]``. In a stack of several layers, one such list per layer (or ``y`` alone,
    without final states). ``batch_first``: torch's flag, ONNX's ``layout=1`` (default: read
    from the shapes where batch != seq_len). ``np.savez(path, **result)`` writes what
    ``rnn-harness doctor --expected`` reads."""
    from harness.api.expected import from_framework

    case = case if isinstance(case, Case) else make_case(case)
    lengths = None
    if framework == "keras":  # Keras repeats the last valid output at padded steps
        lengths = case_inputs(case).seq_lengths
    return from_framework(outputs, case, framework, batch_first=batch_first, lengths=lengths)


def diagnose(case: CaseLike, *, weights: Any, layout: str,
             expected: Mapping[str, Any] | str | os.PathLike, select: str | None = None,
             budget_s: float = 60.0) -> Diagnosis:
    """The layout doctor (``rnn-harness doctor``): which misreading of ``weights`` read as
    ``layout`` (the layout they are believed to be in) reproduces ``expected`` (``y``, and
    ``h_n``, ``c_n`` where known: :func:`expected_outputs`, or an .npz of them) on the case's
    inputs. Returns the doctor's :class:`~harness.doctor.Diagnosis` (``best`` is None when
    nothing found reproduces them; ``harness.doctor.render`` prints it)."""
    from harness.compare import tolerance_for
    from harness.doctor import diagnose as doctor_diagnose
    from harness.doctor import load_expected
    from harness.layouts import get_layout
    from harness.memory import max_memory
    from harness.npz import save_npz
    from harness.prepare import check_memory, load_inputs
    from harness.readers import read_native

    claimed = get_layout(layout)
    with _scratch() as folder:
        given = given_weights(weights, folder, select=select)
        with named(given.label, folder):
            found = _cases(case, given, {})
            if len(found) != 1:
                raise CaseError(f"{len(found)} cases: give one (make_case(..., name=))",
                                file=str(case))
            the_case = found[0]
            check_memory(the_case)
            path = str(the_case.resolve(the_case.weights.file))
            native, _ = read_native(path, claimed.name, the_case, select=select,
                                    max_bytes=max_memory())
            claimed.from_native(native, the_case, file=path)
        in_code = isinstance(expected, Mapping)
        if in_code:
            saved = folder / "expected.npz"
            save_npz(saved, {k: np.asarray(v) for k, v in expected.items()})
            expected, source = saved, "expected outputs given in code"
        else:
            source = str(expected)
        with named("the expected outputs" if in_code else None, folder):
            want = load_expected(str(expected), the_case)
        inputs = load_inputs(the_case)
    return doctor_diagnose(the_case, claimed, native, inputs, want, source=source,
                           tol=tolerance_for(the_case, "expected"), budget_s=budget_s)
