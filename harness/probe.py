"""Discover an adapter's weight layout empirically and compare it with the declared one.

The framework is driven with one-entry perturbations of a *gate-symmetric* base:

1. Base run: every native entry holds the same value ``a``. Whatever the layout (any gate
   order, transpose or reshape), every canonical weight then equals ``a``; only the biases
   depend on the layout's bookkeeping (one summed bias vs an input and a recurrent one) and on
   whether the framework adds the case's ``forget_bias`` at run time. The reference is run for
   each of those readings; the one that reproduces the base run is *measured*.
   (A base of zeros would not do: with every gate pre-activation 0, g = tanh(0) = 0, so no
   input-gate entry has any effect.)
2. One run per native entry e, with that entry set to ``a + delta``; the reference is run once
   per canonical element c perturbed the same way. The canonical elements whose response
   reproduces the framework's response to e are what e *measurably holds*. Elements whose
   responses coincide (an LSTM's ``bW_g`` and ``bR_g`` both add to one pre-activation) form one
   class, and a native entry is attributed to the whole class.
3. The declared mapping (``layout.to_native`` of one-hot canonicals) must agree entry by entry
   with the measurement, up to those classes. Any difference is reported and fails the probe.

A probe costs one framework run per native entry, so it runs at small sizes by default: I 2,
H 3 (P 2), at most 2 layers. A layout does not depend on sizes (a layer above the first is laid
out as the second is), and the case's structure is kept: cell, directions, features (peepholes,
projection, forget bias, GRU variant). ``case_sizes`` (``probe --case-sizes``) probes at the
case's own sizes instead. Either way the data are replaced by a batch of 2, 3 steps, random
initial states (so the recurrent weights act from t = 0) and float64 when the adapter runs it.
Progress and the time left go to a progress display (:mod:`harness.progress`'s, on stderr).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from tabulate import tabulate

from harness import data, isolation, reference
from harness.adapters.base import Adapter
from harness.errors import HarnessError, NotApplicable
from harness.layouts import get_layout
from harness.layouts.base import Layout
from harness.params import Canonical, expected_shapes
from harness.progress import Progress, duration, time_left
from harness.spec import Case

BASE, DELTA = 0.375, 0.5  # exactly representable in every float format the adapters run
MAX_RUNS = 4000
SMALL = {"input_size": 2, "hidden_size": 3, "proj_size": 2, "num_layers": 2}  # upper bounds
PLAIN_EVERY = 10.0  # seconds between progress lines where they cannot be rewritten in place


@dataclass
class EntryResult:
    tensor: str
    index: tuple[int, ...]
    declared: frozenset[tuple[str, int]]  # (canonical key, flat index) summed into this entry
    measured: frozenset[tuple[str, int]]  # canonical elements whose response it reproduces
    expected: frozenset[tuple[str, int]]  # declared, closed under equal responses

    @property
    def ok(self) -> bool:
        return self.measured == self.expected


@dataclass
class ProbeResult:
    adapter: str
    layout: str
    case: Case
    entries: list[EntryResult]
    facts: list[tuple[str, str, str]]  # (what, declared, measured)
    runs: int = 0
    seconds: float = 0.0
    tolerance: float = 0.0
    rows: list[dict[str, str]] = field(default_factory=list)
    shrunk_from: str = ""  # the case's own sizes, when the probe ran at smaller ones

    @property
    def differences(self) -> list[str]:
        out = [f"{what}: declared {d}, measured {m}" for what, d, m in self.facts if d != m]
        for e in self.entries:
            if not e.ok:
                out.append(f"{e.tensor}{list(e.index)}: declared {_elements(e.declared)}, "
                           f"measured {_elements(e.measured) or 'no effect'}")
        return out

    @property
    def ok(self) -> bool:
        return not self.differences


def _elements(els: frozenset[tuple[str, int]]) -> str:
    return " or ".join(f"{k.rsplit('/', 1)[1] if k.count('/') == 2 else k}[{j}]"
                       for k, j in sorted(els))


def probe_case(case: Case, adapter: Adapter, case_sizes: bool = False) -> Case:
    """The case the probe runs: the same structure, small informative data; unless
    ``case_sizes``, small sizes too (:data:`SMALL`), where the adapter runs them."""
    dtype = "float64" if "float64" in adapter.capabilities.dtypes else "float32"
    state = "random" if adapter.capabilities.initial_state else "zeros"
    update = {"batch": 2, "seq_len": 3, "seq_lengths": None, "initial_state": state,
              "dtype": dtype}
    if not case_sizes:
        small = {k: min(getattr(case, k), v) for k, v in SMALL.items()}
        small["hidden_size"] = max(small["hidden_size"], small["proj_size"] + 1)
        try:  # validated as a case: the sizes' own rules (proj_size < hidden_size) hold
            shrunk = Case.model_validate({**case.model_dump(), **small})
        except ValueError:  # pydantic's ValidationError is one
            shrunk = None
        if shrunk is not None and adapter.not_applicable_reason(shrunk) is None:
            update.update(small)  # else the case's own sizes, which the adapter runs
    return case.model_copy(update=update)


def _sizes(c: Case) -> str:
    return (f"I={c.input_size} H={c.hidden_size}" + (f" P={c.proj_size}" if c.proj_size else "")
            + f", {c.num_layers} layer(s)")


class _Runs:
    """The progress of a probe's framework runs, with the time left (:mod:`harness.progress`'s
    estimate): rewritten in place on a terminal, a line every :data:`PLAIN_EVERY` s elsewhere."""

    def __init__(self, progress: Progress | None, label: str, total: int, sizes: str) -> None:
        self.progress, self.label, self.total = progress, label, total
        self.start = self.last = time.perf_counter()
        self.finished: list[float] = []
        if progress is not None:
            progress(f"{label} ({sizes}): {total} framework runs")

    def status(self, what: str) -> None:
        if hasattr(self.progress, "started"):
            self.progress.started(f"{self.label}: {what}")

    def done(self) -> None:
        now = time.perf_counter()
        self.finished.append(now)
        if self.progress is None:
            return
        text = (f"{self.label}: [{len(self.finished)}/{self.total}] runs "
                f"({duration(now - self.start)} so far, {time_left(self.finished, self.total)})")
        if now - self.last >= PLAIN_EVERY:
            self.last = now
            self.progress(text)
        elif hasattr(self.progress, "started"):
            self.progress.started(text)

    def close(self) -> None:
        if hasattr(self.progress, "close"):
            self.progress.close()


def probe(adapter: Adapter, case: Case, *, case_sizes: bool = False,
          progress: Progress | None = None) -> ProbeResult:
    """Measure ``adapter``'s layout on ``case`` (structure kept, data replaced; small sizes
    unless ``case_sizes``). ``progress``: told the framework runs done and the time left."""
    start = time.perf_counter()
    reason = isolation.unavailable_reason(adapter)
    if reason:
        raise HarnessError(f"adapter {adapter.name!r} is unavailable here: {reason}")
    reason = adapter.not_applicable_reason(case)
    if reason:
        raise HarnessError(f"adapter {adapter.name!r} cannot run this case: {reason}")
    own = case
    case = probe_case(case, adapter, case_sizes)
    shrunk_from = "" if _sizes(case) == _sizes(own) else _sizes(own)
    layout = adapter.layout or get_layout("canonical")
    tensors = layout.tensors(case)
    n_entries = sum(int(np.prod(t.shape)) for t in tensors)
    if n_entries + 1 > MAX_RUNS:
        raise HarnessError(f"probing {adapter.name} on this case needs {n_entries + 1} runs "
                           f"(more than {MAX_RUNS}); "
                           + ("probe at small sizes (without --case-sizes)" if case_sizes else
                              "use a case with smaller sizes (H 2-3, I 2)"))
    inputs = data.generate(case)
    tol = 1e-8 if case.dtype == "float64" else 2e-5
    runs = 0
    ticker = _Runs(progress, f"probe {adapter.name} on {own.name}", n_entries + 1, _sizes(case))

    def run_native(native: dict[str, np.ndarray]) -> np.ndarray:
        nonlocal runs
        runs += 1
        out = isolation.run_native(adapter, case, native, inputs)  # checked, where it runs
        ticker.done()
        return _flat(out.named())

    try:
        result = _measure(adapter, case, layout, tensors, inputs, tol, run_native, ticker)
    except NotApplicable as exc:  # the framework refused the probe's case when it ran it
        raise HarnessError(f"adapter {adapter.name!r} cannot run the probe's case "
                           f"({_sizes(case)}, batch {case.batch}, {case.seq_len} steps): {exc}"
                           ) from None
    finally:
        ticker.close()
    result.runs, result.seconds, result.shrunk_from = runs, time.perf_counter() - start, shrunk_from
    return result


def _measure(adapter: Adapter, case: Case, layout: Layout, tensors, inputs, tol: float,
             run_native, ticker: _Runs) -> ProbeResult:
    """Steps 1-3 of the module docstring; ``run_native`` runs the framework."""
    base_native = {t.name: np.full(t.shape, BASE) for t in tensors}
    base_out = run_native(base_native)

    # 1. the base reading: summed or split biases, forget bias at run time or stored
    shapes = expected_shapes(case)
    fb_options = [case.forget_bias, 0.0] if case.forget_bias else [0.0]
    readings = {}
    # a reset-after GRU may keep only the n gate's pair apart (bR_n acts inside r * (...)) and
    # sum the others (flax's GRUCell): the reading "n"
    splits = (False, True, *case.cell_kind.separate_biases(case.reset_after))
    for split in splits:
        for fb in fb_options:
            c = case.model_copy(update={"forget_bias": fb})
            base = _base_canonical(shapes, split)
            out = reference.run(c, Canonical(base), inputs).named()
            readings[(split, fb)] = (c, base, _flat(out))
    dist = {k: float(np.abs(v[2] - base_out).max()) for k, v in readings.items()}
    best = min(dist, key=dist.get)
    if dist[best] > tol:
        raise HarnessError(
            f"{adapter.name}: with every native entry = {BASE} no reading reproduces the run "
            f"(closest: {_reading_words(best, case)}, off by {dist[best]:.2g}); the executor "
            "does something the reference does not (check its runtime notes)")
    ref_case, base_canon, ref_base = readings[best]
    apart = {pl.sources[0].rsplit("/", 1)[1] for t in tensors for pl in t.placements
             if len(pl.sources) == 1 and pl.sources[0].rsplit("/", 1)[1].startswith("bR")}
    declared_split = "n" if apart == {"bR_n"} and "n" in splits else bool(apart)
    declared_runtime_fb = bool(case.forget_bias) and not any(
        pl.fold_forget_bias for t in tensors for pl in t.placements)
    facts = [("biases", _bias_words(declared_split), _bias_words(best[0]))]
    if case.forget_bias:
        facts.append((f"forget_bias {case.forget_bias:g}",
                      "added at run time" if declared_runtime_fb else "stored in a bias",
                      "added at run time" if best[1] else "stored in a bias"))

    # 2. responses of every canonical element, and of every native entry
    elements = [(k, j) for k, s in shapes.items() for j in range(int(np.prod(s)))]
    ticker.status(f"the reference's response to each of {len(elements)} canonical elements")
    responses = np.empty((len(elements), base_out.size))
    for n, (k, j) in enumerate(elements):
        c = dict(base_canon)
        v = c[k].copy()
        v.flat[j] += DELTA
        c[k] = v
        responses[n] = _flat(reference.run(ref_case, Canonical(c), inputs).named())
    declared = _declared(layout, case, shapes, elements)
    index = {el: n for n, el in enumerate(elements)}
    classes: dict[tuple[str, int], frozenset] = {}

    def same_as(el: tuple[str, int]) -> frozenset:
        if el not in classes:
            d = np.abs(responses - responses[index[el]][None, :]).max(axis=1)
            classes[el] = frozenset(elements[m] for m in np.nonzero(d <= tol)[0])
        return classes[el]

    entries = []
    for t in tensors:
        for pos in np.ndindex(*t.shape):
            native = dict(base_native)
            arr = native[t.name].copy()
            arr[pos] += DELTA
            native[t.name] = arr
            out = run_native(native)
            d = np.abs(responses - out[None, :]).max(axis=1)
            measured = frozenset(el for el, x in zip(elements, d, strict=True) if x <= tol)
            if not measured and np.abs(out - ref_base).max() <= tol:
                measured = frozenset()  # no effect at all
            dec = declared.get((t.name, pos), frozenset())
            closure = frozenset().union(*(same_as(el) for el in dec))
            entries.append(EntryResult(t.name, pos, dec, measured, closure))
    result = ProbeResult(adapter.name, layout.name, case, entries, facts, tolerance=tol)
    result.rows = _block_rows(layout, case, tensors, entries, shapes)
    return result


def _flat(named: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(named[k], dtype=np.float64).ravel() for k in sorted(named)])


def _base_canonical(shapes: dict[str, tuple[int, ...]], split: bool | str
                    ) -> dict[str, np.ndarray]:
    """Every block BASE, except the recurrent biases a reading sums away: all (``False``), none
    (``True``), all but the GRU n gate's (``"n"``)."""
    out = {}
    for k, s in shapes.items():
        name = k.rsplit("/", 1)[1]
        summed = name.startswith("bR") and (not split or (split == "n" and name != "bR_n"))
        out[k] = np.full(s, 0.0 if summed else BASE)
    return out


def _bias_words(split: bool | str) -> str:
    return {False: "one summed bias", True: "input and recurrent apart",
            "n": "one summed bias, the n gate's apart"}[split]


def _reading_words(r: tuple[bool | str, float], case: Case) -> str:
    split, fb = r
    words = _bias_words(split).replace("apart", "biases apart", 1)
    if case.forget_bias:
        words += ", forget_bias " + ("added at run time" if fb else "not added")
    return words


def _declared(layout: Layout, case: Case, shapes, elements) -> dict:
    """(tensor, position) -> canonical elements the layout places there (one-hot to_native)."""
    c0 = case.model_copy(update={"forget_bias": 0.0})  # folding is not placement
    zero = {k: np.zeros(s) for k, s in shapes.items()}
    out: dict[tuple[str, tuple[int, ...]], set] = {}
    for k, j in elements:
        c = dict(zero)
        v = np.zeros(shapes[k])
        v.flat[j] = 1.0
        c[k] = v
        for name, arr in layout.to_native(Canonical(c), c0).items():
            for pos in zip(*np.nonzero(arr), strict=True):
                out.setdefault((name, tuple(int(p) for p in pos)), set()).add((k, j))
    return {k: frozenset(v) for k, v in out.items()}


def _block_rows(layout: Layout, case: Case, tensors, entries: list[EntryResult], shapes
                ) -> list[dict[str, str]]:
    """One row per declared placement: what it should hold and what was measured there."""
    by_pos = {(e.tensor, e.index): e for e in entries}
    rows = []
    for t in tensors:
        idx = np.arange(int(np.prod(t.shape))).reshape(t.shape)
        for pl in t.placements:
            positions = [tuple(int(p) for p in np.unravel_index(i, t.shape))
                         for i in idx[pl.index].ravel()]
            es = [by_pos[(t.name, p)] for p in positions]
            bad = [e for e in es if not e.ok]
            measured = _measured_text(es, idx[pl.index].shape, shapes, case)
            scoped = not (case.num_layers == 1 and case.num_directions == 1)
            rows.append({"tensor": t.name, "slice": pl.where,
                         "declared": pl.describe(case.forget_bias, scoped=scoped),
                         "measured": measured if not bad else
                         f"DIFFERS at {len(bad)} of {len(es)} entries: {measured}"})
    return rows


def _measured_text(es: list[EntryResult], slice_shape: tuple[int, ...], shapes, case: Case
                   ) -> str:
    """What a slice measurably holds: the canonical block(s) and how they are laid there."""
    if all(not e.measured for e in es):
        return "no effect"
    common = set.intersection(*({k for k, _ in e.measured} for e in es))
    if not common:
        counts: dict[str, int] = {}
        for e in es:
            for k, _ in e.measured:
                counts[k] = counts.get(k, 0) + 1
        return "mixed: " + ", ".join(f"{_short(k, case)} ({n} entries)" for k, n in counts.items())
    texts = []
    for k in sorted(common):
        js = [min(j for kk, j in e.measured if kk == k) for e in es]
        got = np.array(js).reshape(slice_shape)
        idx = np.arange(int(np.prod(shapes[k]))).reshape(shapes[k])
        how = next((words for words, arr in (
            ("", idx if idx.shape == slice_shape else None),
            (" transposed", idx.T if idx.T.shape == slice_shape else None),
            (" (C-order reshape)", idx.reshape(slice_shape)))
            if arr is not None and np.array_equal(arr, got)), " (scrambled)")
        texts.append(_short(k, case) + how)
    return " = ".join(texts)


def _short(k: str, case: Case) -> str:
    layer, direction, name = k.split("/")
    if case.num_layers == 1 and case.num_directions == 1:
        return name
    return f"{name} ({layer.replace('layer', 'layer ')}, {direction})"


def render(result: ProbeResult) -> str:
    """The report printed by ``rnn-harness probe``."""
    c = result.case
    lines = [f"# Probe: adapter `{result.adapter}`, layout `{result.layout}`", "",
             f"{c.cell.upper()} I={c.input_size} H={c.hidden_size}"
             + (f" P={c.proj_size}" if c.proj_size else "")
             + f", {c.num_layers} layer(s), {c.dir_mode}, {c.dtype}: {result.runs} framework "
             f"runs in {result.seconds:.1f} s (match tolerance {result.tolerance:g})", ""]
    if result.shrunk_from:
        lines[-1:-1] = ["", f"Probed at small sizes (the case: {result.shrunk_from}): a layout "
                        "does not depend on sizes; `--case-sizes` probes at the case's own."]
    lines.append(tabulate([list(r.values()) for r in result.rows],
                          headers=["tensor", "slice", "declared", "measured"], tablefmt="github"))
    lines += ["", tabulate([list(f) for f in result.facts],
                           headers=["run-time fact", "declared", "measured"], tablefmt="github")]
    diffs = result.differences
    lines += ["", f"{len(result.entries)} native entries probed: "
              + ("the measured layout is the declared one." if not diffs else
                 f"{len(diffs)} difference(s):")]
    lines += [f"- {d}" for d in diffs[:40]]
    if len(diffs) > 40:
        lines.append(f"- ... and {len(diffs) - 40} more")
    return "\n".join(lines) + "\n"


def probe_file(adapter_name: str, case_file: str | None, *, name: str | None = None,
               case_sizes: bool = False, progress: Progress | None = None) -> tuple[str, int]:
    """``rnn-harness probe``: the reports and the exit code (1 on any difference)."""
    from harness.adapters import get_adapter
    from harness.cases import load_cases

    adapter = get_adapter(adapter_name)
    if case_file:
        cases = load_cases(case_file)
        if name is not None:
            cases = [c for c in cases if c.name == name]
            if not cases:
                raise HarnessError(f"no case named {name!r}", file=case_file)
    else:
        cases = [Case(name="probe-lstm", cell="lstm", input_size=2, hidden_size=3),
                 Case(name="probe-gru", cell="gru", input_size=2, hidden_size=3)]
    why = isolation.unavailable_reason(adapter)
    if why:
        raise HarnessError(f"adapter {adapter.name!r} is unavailable here: {why}")
    texts, code, ran = [], 0, 0
    for case in cases:
        reason = adapter.not_applicable_reason(case)
        if reason:
            texts.append(f"# Probe: adapter `{adapter.name}`, case `{case.name}`: not applicable "
                         f"({reason})\n")
            continue
        result = probe(adapter, case, case_sizes=case_sizes, progress=progress)
        ran += 1
        texts.append(render(result))
        code = code or (0 if result.ok else 1)
    if not ran:
        raise HarnessError(f"adapter {adapter.name!r} can run none of the cases")
    return "\n".join(texts), code
