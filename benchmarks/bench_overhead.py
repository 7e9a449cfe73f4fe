"""Harness overhead per case x adapter pair, beyond the adapter's own forward.

    python benchmarks/bench_overhead.py                 # every available CPU adapter, 2 cases
    python benchmarks/bench_overhead.py --adapters torch-cpu,keras --repeat 20
    python benchmarks/bench_overhead.py --profile       # cProfile of every pair over 10 %
    python benchmarks/bench_overhead.py --smoke         # reference adapters, tiny case only
    python benchmarks/bench_overhead.py --suite cases   # the suite's own cases, totals per adapter
    python benchmarks/bench_overhead.py --layouts cases # describe DIR's cases per layout

``pair`` is the wall time of ``harness.runner.run_pair`` (availability check, canonical ->
native conversion through the layout, the adapter's ``_run``, output checks, the divergence
rows and the verdict); ``forward`` is the ``_run`` time it reports (``PairResult.seconds``);
overhead = pair − forward, in % of pair (target < 10 %). The parts are timed on their own:
``to_native`` (the layout), ``check`` (shapes; NaN/Inf come from the divergence's sums),
``divergence`` (``compare.rows_of``). ``frame`` is not part of the pair: the pandas DataFrame
of one pair's rows on its own, an upper bound of what the reports pay for it later
(``RunResult.divergence`` builds one frame for all pairs; ``--suite`` times that and adds it to
the overhead).

Pairs are made as a run makes them: every adapter first runs the tiny case once (framework
import, compiled kernels, graph tracing), then per repeat each case is prepared afresh and its
pairs run one after another in the registry's order, once each. So what a case's first pairs
work out and later ones reuse (the reference's side of the divergence) is paid where a run pays
it, not hidden by repeating one pair. The
table shows medians over the repeats (the overhead is a difference of two times taken in the
same call, so the median is steadier than a minimum); the parts are timed afterwards, hot.

``--layouts DIR``: per layout, the time to describe every case of DIR (``Layout.tensors``:
what each conversion of a pair works out anew); the median of ``--repeat`` passes.

``--suite DIR``: every case x adapter pair of DIR's cases; per adapter the sums over its pairs
of the per-pair medians (overhead % = total overhead / total pair time), the same with the
adapter's share of the run's one frame (``with frame %``, by rows) and the worst single pair;
``all``: every pair together. ``prepare (per case)``: the cases' ``prepare``, its "forward"
the reference and the noise floor (``Prepared.reference_seconds``) and its overhead the rest
(weights and inputs, their cast, the reference's side of every pair's rows, which the case's
adapters share); ``all with prepare``: the pairs and the prepares together (overhead per
pair).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import print_facts, set_threads, table

from harness import compare
from harness.adapters import select
from harness.prepare import prepare
from harness.runner import RunResult, run_pair
from harness.spec import Case, discover

CASES = {
    "mid-lstm": dict(cell="lstm", input_size=64, hidden_size=128, num_layers=2,
                     bidirectional=True, batch=16, seq_len=50, dtype="float32"),
    "mid-gru": dict(cell="gru", input_size=64, hidden_size=128, num_layers=2,
                    bidirectional=True, batch=16, seq_len=50, dtype="float32"),
    "tiny-lstm": dict(cell="lstm", input_size=3, hidden_size=4, num_layers=1, batch=2,
                      seq_len=5, dtype="float32"),
}


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def parts(prep, adapter) -> dict[str, float]:
    """Seconds of the overhead's parts, each timed on its own (median of 5)."""
    case = prep.case
    dtype = adapter.native_dtype(case)
    native = adapter.layout.to_native(prep.canonical, case, dtype) if adapter.layout else None
    out, _ = adapter.run(case, prep.canonical, prep.inputs)
    tol = compare.tolerance_for(case, adapter.name, adapter.tolerances)
    fns = {
        "to_native": lambda: native and adapter.layout.to_native(prep.canonical, case, dtype),
        "check": lambda: adapter._check(case, out, adapter.baseline),  # finite: in the sums
        "divergence": lambda: None if adapter.baseline else compare.rows_of(
            case, adapter.name, out, prep.reference, tol, prep.noise_floor),
    }
    if not adapter.baseline:  # made once per run for all pairs (report), not by the pair
        block = compare.rows_of(case, adapter.name, out, prep.reference, tol, prep.noise_floor)
        fns["frame"] = lambda: compare.frame_of([block])
    return {name: median([_seconds(fn) for _ in range(5)]) for name, fn in fns.items()}


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def profile(prep, adapter, repeat: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(repeat):
        run_pair(prep, adapter)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(r"harness|pandas", 14)
    return s.getvalue()


def as_run(cases: list[Case], adapters, repeat: int, prepared: dict | None = None):
    """Every pair of ``cases`` x ``adapters`` timed as a run makes it (the module text):
    (adapter, case) -> [(pair seconds, forward seconds)] per repeat, the last PairResult of
    each, and why the pairs that did not run did not. ``prepared``, if given, gets case name ->
    [(prepare seconds, of which the reference and noise floor computing)] per repeat."""
    warm = prepare(Case(name="tiny-lstm", **CASES["tiny-lstm"]))
    for adapter in adapters:  # imports, compiled kernels, graph tracing
        run_pair(warm, adapter)
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    results, notes = {}, {}
    for k in range(repeat):
        for case in cases:
            prep = prepare(case)
            if prepared is not None:
                prepared.setdefault(case.name, []).append((prep.seconds, prep.reference_seconds))
            for adapter in adapters:
                t = time.perf_counter()
                r = run_pair(prep, adapter)
                pair = time.perf_counter() - t
                if r.status in (compare.PASS, compare.DIVERGED, compare.BASELINE):
                    times.setdefault((adapter.name, case.name), []).append((pair, r.seconds))
                    results[adapter.name, case.name] = r
                else:
                    notes[adapter.name, case.name] = f"{r.status}: {r.reason}"
            del prep
        print(f"  repeat {k + 1} of {repeat}: done", flush=True)
    return times, results, notes


def suite(folder: str, adapters, repeat: int) -> None:
    """Totals per adapter over every pair of the suite's cases."""
    cases = discover([folder])
    prepared: dict[str, list[tuple[float, float]]] = {}
    times, results, _ = as_run(cases, adapters, repeat, prepared)
    totals = {a.name: [0, 0.0, 0.0, 0.0, ""] for a in adapters}  # pairs, pair, fwd, worst %
    for (name, case_name), runs in times.items():
        pair, fwd = median([p for p, _ in runs]), median([f for _, f in runs])
        t = totals[name]
        t[0], t[1], t[2] = t[0] + 1, t[1] + pair, t[2] + fwd
        if 100 * (pair - fwd) / pair > t[3]:
            t[3], t[4] = 100 * (pair - fwd) / pair, case_name
    results = list(results.values())
    # the run's one DataFrame of every pair's rows (divergence.csv, the reports' slices),
    # charged to the adapters in proportion to their rows
    run = RunResult(cases, adapters, results)
    frame = median([_seconds(lambda: run.divergence) for _ in range(5)])
    n_rows = {a.name: 0 for a in adapters}
    for r in results:
        n_rows[r.adapter] += len(r.block) if r.block is not None else 0
    share = {k: frame * v / max(1, sum(n_rows.values())) for k, v in n_rows.items()}
    print_facts([("suite", f"{folder} ({len(cases)} cases)"), ("repeat", str(repeat)),
                 ("one frame of all rows", f"{1e3 * frame:.1f} ms ({len(results)} pairs)")])
    rows = [[name, n, pair, fwd, 1e3 * (pair - fwd) / n, 100 * (pair - fwd) / pair,
             100 * (pair - fwd + share[name]) / (pair + share[name]), worst, where]
            for name, (n, pair, fwd, worst, where) in totals.items() if n]
    n, pair, fwd = (sum(t[k] for t in totals.values()) for k in range(3))
    if n:  # every pair of the suite together: the harness's share of the time its pairs take
        rows.append(["all", n, pair, fwd, 1e3 * (pair - fwd) / n, 100 * (pair - fwd) / pair,
                     100 * (pair - fwd + frame) / (pair + frame), "", ""])
    # each case's prepare: its harness work (weights and inputs, the cast, the reference's side
    # of the rows) beyond computing the reference and the noise floor
    cost = {name: (median([p for p, _ in runs]), median([r for _, r in runs]))
            for name, runs in prepared.items()}
    worst = max(cost, key=lambda k: (cost[k][0] - cost[k][1]) / cost[k][0])
    prep, ref = sum(p for p, _ in cost.values()), sum(r for _, r in cost.values())
    rows.append(["prepare (per case)", len(cost), prep, ref, 1e3 * (prep - ref) / len(cost),
                 100 * (prep - ref) / prep, "",
                 100 * (cost[worst][0] - cost[worst][1]) / cost[worst][0], worst])
    if n:  # the pairs and the cases' prepares together
        over = pair - fwd + frame + prep - ref
        rows.append(["all with prepare", n, pair + prep, fwd + ref, 1e3 * over / n,
                     100 * (pair - fwd + prep - ref) / (pair + prep),
                     100 * over / (pair + frame + prep), "", ""])
    print(table(rows, ["adapter", "pairs", "pair s", "forward s", "overhead ms/pair",
                       "overhead %", "with frame %", "worst pair %", "worst case"]))


def layouts(folder: str, repeat: int) -> None:
    """The descriptions of every case of ``folder`` per layout."""
    from harness.layouts import LAYOUTS

    cases = discover([folder])
    rows = []
    for name, layout in LAYOUTS.items():
        held = [c for c in cases if c.cell in layout.cells]

        def one_pass(layout=layout, held=held) -> int:
            described = 0
            for case in held:
                try:
                    layout.tensors(case)
                    described += 1
                except Exception:  # a model the layout cannot hold (cuDNN: peepholes, ...)
                    pass
            return described
        n = one_pass()
        rows.append([name, n, 1e3 * median([_seconds(one_pass) for _ in range(repeat)])])
    print_facts([("suite", f"{folder} ({len(cases)} cases)"), ("repeat", str(repeat))])
    print(table(rows, ["layout", "cases described", "describe ms (all of them)"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", default=None, help="comma-separated (default: every CPU one)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (NumPy BLAS: OPENBLAS_NUM_THREADS; default: as they are)")
    ap.add_argument("--profile", action="store_true",
                    help="print a cProfile of every pair whose overhead is over 10 %%")
    ap.add_argument("--smoke", action="store_true", help="reference adapters, tiny case, 2 runs")
    ap.add_argument("--suite", metavar="DIR", help="totals over every pair of DIR's cases")
    ap.add_argument("--layouts", metavar="DIR",
                    help="describe DIR's cases per layout")
    args = ap.parse_args()
    if args.smoke:
        args.adapters, args.cases, args.repeat = "reference,noise-floor", "tiny-lstm", 2
    set_threads(args.threads)
    if args.layouts:
        layouts(args.layouts, args.repeat)
        return
    adapters = select(args.adapters.split(",") if args.adapters else None, device="cpu")
    if args.suite:
        suite(args.suite, adapters, args.repeat)
        return

    cases = [Case(name=label, **CASES[label]) for label in args.cases.split(",")]
    times, _, skipped = as_run(cases, adapters, args.repeat)
    rows, over = [], []
    for case in cases:
        prep = prepare(case)
        for adapter in adapters:
            runs = times.get((adapter.name, case.name))
            if not runs:
                continue
            pair, fwd = [p for p, _ in runs], [f for _, f in runs]
            overheads = [p - f for p, f in runs]
            pct = 100 * median([o / p for o, p in zip(overheads, pair, strict=True)])
            part = parts(prep, adapter)
            rows.append([case.name, adapter.name, 1e3 * median(pair), 1e3 * median(fwd),
                         1e3 * median(overheads), pct, 1e3 * part["to_native"],
                         1e3 * part["check"], 1e3 * part["divergence"],
                         1e3 * part.get("frame", 0.0)])
            if pct > 10:
                over.append((case.name, adapter, prep))
    notes = [f"{c} x {a}: {why}" for (a, c), why in skipped.items()]
    print_facts([("repeat", str(args.repeat))])
    print(table(rows, ["case", "adapter", "pair ms", "forward ms", "overhead ms",
                       "overhead %", "to_native ms (hot)", "check ms (hot)",
                       "divergence ms (hot)", "frame ms (report)"]))
    for note in notes:
        print("  skipped:", note)
    if over:
        print("\nover 10 %:", ", ".join(f"{label} x {a.name}" for label, a, _ in over))
    if args.profile:
        for label, adapter, prep in over:
            print(f"\n--- cProfile, {label} x {adapter.name}, {args.repeat} pairs ---")
            print(profile(prep, adapter, args.repeat))


if __name__ == "__main__":
    main()
