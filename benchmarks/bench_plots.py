"""Milliseconds per PNG of the report's per-pair plots (``harness.report.plots``).

    python benchmarks/bench_plots.py --csv REPORT/divergence.csv             # a run's rows
    python benchmarks/bench_plots.py --csv REPORT/divergence.csv --peer OLD/plots.py
    python benchmarks/bench_plots.py                     # runs cases/ (reference, torch-cpu)
    python benchmarks/bench_plots.py --smoke             # two small cases, one round
    python benchmarks/bench_plots.py --csv ... --profile # cProfile of one round of drawing
    python benchmarks/bench_plots.py --csv ... --scratch /dev/shm  # PNGs in memory, no disk

Every pair's rows (``divergence.csv`` grouped by case x adapter, read as ``harness merge``
reads it: ``direction``/``t`` nullable integers) are drawn with each of the four plot
functions of :func:`harness.report.plots.draw_pair`, into a scratch folder, in this one
process, as ``run --plots all`` draws them. ``--peer FILE`` names another implementation of
the module (e.g. a copy of an earlier ``harness/report/plots.py``): it is imported from that
path and timed in the same run, the two alternating pair by pair, ``--repeat`` rounds (each
round new files, as a report writes them), each call keeping its best round (the one least
disturbed by other work on the machine). ms/plot = the kind's seconds over every pair (calls
that draw nothing included) / the PNGs it wrote; a module whose draw_pair reads the rows once
for its four plots (``_rows``) has that time in error_plot's. ``same pixels as peer`` counts
the PNGs whose decoded pixels equal the peer's.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)
import pandas as pd
from _common import ROOT, print_facts, table

KINDS = {  # function of the module: the suffix draw_pair gives its file
    "error_plot": "", "layer_heatmap": "-layers", "gradient_plot": "-grad",
    "gradient_blocks": "-grad-blocks",
}
SMOKE_CASES = ("varlen-bi-lstm", "grad-lstm-stack")


def load_peer(path: str):
    spec = importlib.util.spec_from_file_location("plots_peer", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--peer {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows_of_csv(csv: Path) -> list[tuple[pd.DataFrame, str]]:
    """(rows, title) of every case x adapter pair, in the file's order."""
    rows = pd.read_csv(csv, dtype={"case": str, "adapter": str, "output": str, "verdict": str})
    for c in ("direction", "t"):  # nullable, as harness.compare makes them
        rows[c] = rows[c].astype("Int64")
    dtypes = {}
    run = csv.parent / "run.json"
    if run.exists():
        dtypes = {k: v.get("dtype", "?") for k, v in json.loads(run.read_text())["cases"].items()}
    return [(part.reset_index(drop=True), f"{case} :: {adapter} ({dtypes.get(case, '?')})")
            for (case, adapter), part in rows.groupby(["case", "adapter"], sort=False)]


def rows_of_run(smoke: bool) -> list[tuple[pd.DataFrame, str]]:
    """A run of the repository's cases (reference, noise-floor, torch-cpu where importable)."""
    from harness import adapters as registry
    from harness import runner
    from harness.cases import discover

    names = ["reference", "noise-floor"]
    if importlib.util.find_spec("torch") is not None:
        names.append("torch-cpu")
    cases = discover([ROOT / "cases"])
    if smoke:
        cases = [c for c in cases if c.name in SMOKE_CASES]
    result = runner.run(cases, registry.select(names))
    dtypes = {c.name: c.dtype for c in result.cases}
    return [(p.rows, f"{p.case} :: {p.adapter} ({dtypes[p.case]})") for p in result.pairs
            if p.rows is not None and not p.rows.empty]


def same_pixels(a: Path, b: Path) -> bool:
    """Whether two PNGs hold the same pixels (their bytes may differ: compression)."""
    from PIL import Image

    if not b.exists():
        return False
    with Image.open(a) as x, Image.open(b) as y:
        return x.size == y.size and x.convert("RGBA").tobytes() == y.convert("RGBA").tobytes()


def draw_one(module, i: int, rows, title: str, folder: Path) -> dict[str, tuple[float, bool]]:
    """Pair ``i``'s plots as ``draw_pair`` draws them: (seconds, whether it wrote its PNG) by
    kind. A module whose draw_pair first reads the rows' columns once for all four plots
    (``_rows``) does so here too, its time charged to error_plot (drawn first)."""
    titles = {"error_plot": title, "layer_heatmap": f"{title}: every layer's y",
              "gradient_plot": f"{title}: dx, dh0, dc0",
              "gradient_blocks": f"{title}: parameter gradients"}
    times = {}
    t = time.perf_counter()
    rows = module._rows(rows) if hasattr(module, "_rows") else rows
    read = time.perf_counter() - t
    for kind, suffix in KINDS.items():
        fn = getattr(module, kind)
        t = time.perf_counter()
        drawn = fn(rows, folder / f"{i:03d}{suffix}.png", titles[kind])
        times[kind] = (time.perf_counter() - t + (read if kind == "error_plot" else 0.0),
                       bool(drawn))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, help="a run's divergence.csv (default: run cases/)")
    ap.add_argument("--peer", help="another plots.py to time beside harness.report.plots")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (minimum kept)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N pairs")
    ap.add_argument("--scratch", type=Path, default=None,
                    help="where the PNGs go (a temporary folder in it; default: the system's, "
                         "e.g. /dev/shm to leave the disk out of the times)")
    ap.add_argument("--profile", action="store_true", help="cProfile of one round (this one)")
    ap.add_argument("--smoke", action="store_true", help="two small cases, one round")
    args = ap.parse_args()
    if args.smoke:
        args.repeat = 1
    pairs = rows_of_csv(args.csv) if args.csv else rows_of_run(args.smoke)
    pairs = pairs[:args.limit] if args.limit else pairs
    if not pairs:
        raise SystemExit("no pair with divergence rows to plot")

    from harness.report import plots

    modules = {"this": plots}
    if args.peer:
        modules["peer"] = load_peer(args.peer)
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        folders = {name: Path(tmp) / name for name in modules}
        for name, module in modules.items():  # imports, fonts, caches: not timed
            draw_one(module, 0, *pairs[0], Path(tmp) / f"{name}-warm")
        best: dict[str, dict[tuple[int, str], float]] = {name: {} for name in modules}
        drawn: dict[tuple[int, str], bool] = {}
        for r in range(args.repeat):
            for i, (rows, title) in enumerate(pairs):
                for name, module in modules.items():  # pair by pair, alternating
                    # new files every round, as a report writes them (its old PNGs are
                    # removed first): truncating a file just written can wait for the disk
                    folder = folders[name] / str(r)
                    for kind, (sec, wrote) in draw_one(module, i, rows, title, folder).items():
                        best[name][(i, kind)] = min(best[name].get((i, kind), sec), sec)
                        if name == "this":
                            drawn[(i, kind)] = wrote
        last = str(args.repeat - 1)
        files = sorted((folders["this"] / last).glob("*.png"))
        size = max((f.stat().st_size for f in files), default=0)
        same = sum(same_pixels(f, folders["peer"] / last / f.name)
                   for f in files) if args.peer else None
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for i, (rows, title) in enumerate(pairs):
                draw_one(plots, i, rows, title, Path(tmp) / "profile")
            prof.disable()

    extra = [("pairs", str(len(pairs))), ("source", str(args.csv or "a run of cases/")),
             ("repeat", str(args.repeat)), ("largest PNG", f"{size / 1e3:.1f} kB")]
    if args.peer:
        extra.append(("peer", args.peer))
        extra.append(("same pixels as peer", f"{same} of {len(files)} PNGs"))
    print_facts(extra)

    def ms(name: str, kinds: list[str]) -> float:
        """The kinds' seconds over every pair (each call's best round) per PNG written."""
        keys = [key for key in best[name] if key[1] in kinds]
        n = sum(drawn[key] for key in keys)
        return 1e3 * sum(best[name][key] for key in keys) / n if n else float("nan")

    rows = []
    for kind in [*KINDS, "all"]:
        kinds = list(KINDS) if kind == "all" else [kind]
        row = [kind, sum(v for k, v in drawn.items() if k[1] in kinds), ms("this", kinds)]
        if args.peer:
            row += [ms("peer", kinds), ms("this", kinds) / ms("peer", kinds)]
        rows.append(row)
    headers = ["plot", "PNGs", "ms/plot"] + (["peer ms/plot", "ratio this/peer"]
                                             if args.peer else [])
    print(table(rows, headers))
    if args.profile:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
        print(s.getvalue())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
