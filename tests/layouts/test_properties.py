"""Properties over random valid configurations (hypothesis):

- the float64 reference agrees with PyTorch on CPU in float64 wherever PyTorch can run the
  case (the adapter's own ``not_applicable_reason`` decides);
- canonical -> native -> canonical is exact for every registered layout that can hold the
  case (a bias pair a layout stores summed is compared as its sum);
- converting A -> B -> A gives back what A held, for every pair of layouts that hold the case.

A failing example, once hypothesis has shrunk it, is written as a minimal case file under
``tmp/failures/`` (its path is in the assertion message) that ``rnn-harness run`` reproduces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness import compare, params, reference
from harness.adapters.torch_cpu import TorchCPU
from harness.cases import load_cases
from harness.cli import main
from harness.convert import CannotHold, convert, effective, refusal
from harness.data import generate
from harness.layouts import LAYOUTS, Layout
from harness.npz import write_text
from harness.pairs import run_pair
from harness.params import Canonical
from harness.prepare import prepare
from harness.progress import describe
from harness.spec import Case

ROOT = Path(__file__).parents[2]
FAILURES = ROOT / "tmp" / "failures"
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TORCH = TorchCPU()


@st.composite
def cases(draw, forget_bias: bool = False) -> Case:
    """A valid float64 case: both cells, sizes 1..8, 1..3 layers, every direction, projection,
    peepholes, GRU reset before/after, variable lengths, random initial states."""
    cell = draw(st.sampled_from(["lstm", "gru"]))
    H = draw(st.integers(1, 8))
    B, T = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    kw: dict = dict(
        name="prop", cell=cell, dtype="float64", input_size=draw(st.integers(1, 8)),
        hidden_size=H, num_layers=draw(st.integers(1, 3)), batch=B, seq_len=T,
        direction=draw(st.sampled_from(["forward", "reverse", "bidirectional"])),
        initial_state=draw(st.sampled_from(["zeros", "random"])),
        seed=draw(st.integers(0, 2**16)),
    )
    if draw(st.booleans()):
        kw["seq_lengths"] = draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
    if cell == "lstm":
        kw["proj_size"] = draw(st.integers(0, H - 1)) if H > 1 and draw(st.booleans()) else 0
        kw["peepholes"] = draw(st.booleans())
        if forget_bias:
            kw["forget_bias"] = draw(st.sampled_from([0.0, 1.0, 0.3, -2.5]))
    else:
        kw["reset_after"] = draw(st.booleans())
    return Case(**kw)


def write_failure(case: Case, test: str, adapters: list[str] | None = None, note: str = "") -> Path:
    """A case file reproducing ``case`` (hypothesis re-runs the shrunk example last, so the
    file left behind is the minimal one)."""
    doc = case.model_dump(mode="json", exclude={"source"}, exclude_defaults=True)
    doc = {"cell": case.cell, "input_size": case.input_size, "hidden_size": case.hidden_size,
           **doc, "name": f"failure-{test.replace('_', '-')}"}
    doc = {"name": doc.pop("name"), **doc}
    doc.pop("adapters", None)
    if adapters:
        doc["adapters"] = adapters
    path = FAILURES / f"{test}.yaml"
    header = (f"# Minimal failing example of tests/layouts/test_properties.py::{test}, shrunk by "
              "hypothesis.\n"
              f"# Reproduce: rnn-harness run {_shown(path)}"
              + (f" --adapters reference,{','.join(adapters)}" if adapters else "") + "\n"
              + (f"# {note}\n" if note else ""))
    write_text(path, header + yaml.safe_dump(doc, sort_keys=False))
    if not (path.parent / ".gitignore").exists():  # scratch: copy a case to cases/ to keep it
        write_text(path.parent / ".gitignore", "*\n")
    return path


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# The reference against PyTorch ------------------------------------------------------------------

@PROPERTY
@given(case=cases())
def test_reference_agrees_with_torch_in_float64(case):
    assume(TORCH.not_applicable_reason(case) is None)
    if TORCH.unavailable_reason():
        pytest.skip(TORCH.unavailable_reason())
    r = run_pair(prepare(case), TORCH)
    if r.status != compare.PASS:
        path = write_failure(case, "test_reference_agrees_with_torch_in_float64", ["torch-cpu"])
        raise AssertionError(f"torch-cpu {r.status}: {describe(r)}; minimal case: {path}")


# Layouts ----------------------------------------------------------------------------------------

def holders(case: Case) -> list[Layout]:
    """The registered layouts that can hold every canonical block of ``case``: not refused
    (cells, the capabilities of the adapters that run it), and a place for every block (a
    layout no registered adapter runs, such as cuDNN's opaque buffer, has only the latter)."""
    wanted = set(params.expected_shapes(case))
    out = []
    for layout in LAYOUTS.values():
        if refusal(case, layout) is None:
            placed = {s for sources in summed_groups(layout, case) for s in sources}
            if placed == wanted:
                out.append(layout)
    return out


def summed_groups(layout: Layout, case: Case) -> list[tuple[str, ...]]:
    """Canonical keys stored together (summed) in one block of ``layout``."""
    return [pl.sources for t in layout.tensors(case) for pl in t.placements]


def roundtrip_mismatches(case: Case, layout: Layout, canonical: params.Canonical) -> list[str]:
    back = layout.from_native(layout.to_native(canonical, case), case)
    bad = []
    for sources in summed_groups(layout, case):
        want = sum(canonical[s] for s in sources)
        got = sum(back[s] for s in sources)
        if not np.array_equal(want, got):
            bad.append(" + ".join(sources))
    if set(back.tensors) != set(canonical.tensors):
        bad.append(f"keys {sorted(set(back.tensors) ^ set(canonical.tensors))}")
    return bad


@PROPERTY
@given(case=cases())
def test_canonical_native_canonical_is_exact(case):
    canonical = params.generate(case)
    layouts = holders(case)
    assert "canonical" in [x.name for x in layouts]
    for layout in layouts:
        bad = roundtrip_mismatches(case, layout, canonical)
        if bad:
            path = write_failure(case, "test_canonical_native_canonical_is_exact",
                                 note=f"layout {layout.name}: rnn-harness layouts --layout "
                                      f"{layout.name} --case <this file>")
            raise AssertionError(f"layout {layout.name}: round trip changed {bad}; "
                                 f"minimal case: {path}")


@PROPERTY
@given(case=cases(forget_bias=True))
def test_forget_bias_folding_round_trips_to_one_ulp(case):
    """A layout that stores ``bW_f + forget_bias`` gives back ``bW_f`` to within the rounding
    of that sum (exactness is impossible: (x + fb) - fb is not always x in floating point)."""
    canonical = params.generate(case)
    for layout in holders(case):
        back = layout.from_native(layout.to_native(canonical, case), case)
        for sources in summed_groups(layout, case):
            want, got = sum(canonical[s] for s in sources), sum(back[s] for s in sources)
            ulp = np.spacing(np.abs(want) + abs(case.forget_bias))
            assert np.all(np.abs(got - want) <= ulp), (layout.name, sources)


def _convert_or_none(case, src, dst, native):
    try:
        return convert(case, src, dst, native)[0]
    except CannotHold:
        return None


@PROPERTY
@given(case=cases(), data=st.data())
def test_convert_there_and_back_is_the_identity(case, data):
    """A -> B -> A gives back A's tensors where B holds every block apart, and their effect
    (summed bias pairs) where B stores some summed. Three random pairs (A, B) per example:
    all pairs of all layouts would take minutes."""
    layouts = holders(case)
    assume(len(layouts) >= 2)
    canonical = params.generate(case)
    for _ in range(3):
        a, b = data.draw(st.permutations(layouts).map(lambda p: p[:2]), label="layouts A, B")
        native_a = a.to_native(canonical, case)
        held_a = effective(case, a.from_native(native_a, case))
        native_b = _convert_or_none(case, a, b, native_a)
        if native_b is None:  # B cannot run the case (a capability, not a layout question)
            continue
        back = _convert_or_none(case, b, a, native_b)
        ok = back is not None and all(
            np.array_equal(v, effective(case, a.from_native(back, case))[k])
            for k, v in held_a.items())
        if ok and not any(len(s) > 1 for s in summed_groups(b, case)):
            ok = all(np.array_equal(back[k], v) for k, v in native_a.items())
        if not ok:
            path = write_failure(case, "test_convert_there_and_back_is_the_identity",
                                 note=f"convert {a.name} -> {b.name} -> {a.name}")
            raise AssertionError(f"convert {a.name} -> {b.name} -> {a.name} is not the "
                                 f"identity; minimal case: {path}")


@pytest.mark.parametrize("target", [n for n in LAYOUTS if n != "canonical"])
def test_convert_keeps_a_forget_bias_case(target):
    """forget_bias != 0 converts into every layout that can hold the case, folded or not, and
    back to within the rounding of the fold; torch's converted weights run to the reference."""
    case = Case(name="fb", cell="lstm", input_size=2, hidden_size=3, forget_bias=1.0,
                dtype="float64", batch=2, seq_len=3)
    canonical = params.generate(case)
    if refusal(case, LAYOUTS[target]):
        pytest.skip(refusal(case, LAYOUTS[target]))
    native = LAYOUTS["canonical"].to_native(canonical, case)
    out, _ = convert(case, LAYOUTS["canonical"], LAYOUTS[target], native)
    back, _ = convert(case, LAYOUTS[target], LAYOUTS["canonical"], out)
    want, got = effective(case, canonical), effective(case, Canonical(back))
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=0, atol=4e-16 * (1 + abs(case.forget_bias)),
                                   err_msg=f"{target}: {k}")
    if target == "torch":  # the converted state_dict itself, run as it is
        inputs = generate(case)
        y = TorchCPU()._run(case, out, inputs).y
        np.testing.assert_allclose(y, reference.run(case, canonical, inputs).y, rtol=0, atol=1e-14)


# The failure files ------------------------------------------------------------------------------

def test_a_failure_file_reproduces_its_case(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(__import__(__name__), "FAILURES", tmp_path / "failures")
    case = Case(name="x", cell="lstm", input_size=3, hidden_size=4, num_layers=2, proj_size=2,
                bidirectional=True, batch=3, seq_len=4, seq_lengths=[4, 1, 3],
                initial_state="random", dtype="float64", seed=7)
    path = write_failure(case, "example", ["torch-cpu"])
    assert path.parent == tmp_path / "failures"
    (loaded,) = load_cases(path)
    assert loaded.model_dump(exclude={"source", "name", "adapters"}) == case.model_dump(
        exclude={"source", "name", "adapters"})
    assert loaded.adapters == ["torch-cpu"]
    code = main(["run", str(path), "--adapters", "reference,torch-cpu", "--quiet",
                 "--out", str(tmp_path / "report")])
    assert code == 0, capsys.readouterr().err
