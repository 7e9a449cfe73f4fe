"""``rnn-harness bisect``: one case x adapter pair (or every case of a file) run on several
releases of one package, each in an environment of its own (:mod:`harness.release_envs`), and
the first release where the verdict changes.

Each release's run is ``rnn-harness run FILE --adapters ADAPTER`` by the environment's own
interpreter, importing this rnn-harness; its report folder is read back
(:func:`harness.report.read_back.read_report`) and nothing is recomputed: the verdict is the
pair's status in run.json, the worst error and the first diverging step are divergence.csv's
rows, read as ``rnn-harness diff`` reads them.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from harness.errors import HarnessError, printable, whole_sentences
from harness.release_envs import InstallError, ReleaseEnv, same_release

NODE_FORM = "FILE[::CASE]::ADAPTER (as pytest's node ids: cases/gru-reset.yaml::flax-nnx)"
RUN_TIMEOUT = 3 * 3600.0  # seconds for one release's run (its pairs have their own limit)


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


@dataclass(frozen=True)
class Node:
    """What a node id names: a case file, one of its cases (None: every case) and an adapter."""

    file: Path
    case: str | None
    adapter: str
    cases: tuple[str, ...]  # the cases the node covers, in the file's order


def parse_node(node_id: str) -> Node:
    """``FILE[::CASE]::ADAPTER`` checked against the file and the adapter registry: HarnessError
    (exit 2) for an id not of that form, a file that is not a case file, a case the file does
    not hold, an adapter that does not exist."""
    from harness.adapters import ADAPTERS
    from harness.cases import load_named

    parts = node_id.split("::")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
        raise HarnessError(f"expected {NODE_FORM}, got {node_id[:200]!r}", field="NODE_ID")
    file, adapter = Path(parts[0]), parts[-1]
    case = parts[1] if len(parts) == 3 else None
    if adapter not in ADAPTERS:
        raise HarnessError(f"unknown adapter {adapter!r}{did_you_mean(adapter, list(ADAPTERS))}"
                           " (`rnn-harness adapters` lists them)", field="NODE_ID")
    if not file.is_file():
        raise HarnessError("case file not found", file=file)
    names = tuple(c.name for c in load_named(file))  # HarnessError for what is not a case file
    if case is not None and case not in names:
        raise HarnessError(f"no case {case!r} in the file{did_you_mean(case, list(names))} "
                           f"(it holds {', '.join(names)})", file=file, field="NODE_ID")
    return Node(file, case, adapter, (case,) if case else names)


@dataclass(frozen=True)
class PairOutcome:
    """One pair's verdict on one release, as its report says."""

    case: str
    verdict: str
    worst: str = ""  # the worst free-running error: max_abs and x tolerance
    first_step: str = ""  # where it first goes beyond tolerance, e.g. ``y L0 d0 t=0``
    reason: str = ""  # the report's reason (shown for a pair that could not run)


@dataclass(frozen=True)
class ReleaseOutcome:
    """A release's run: its pairs, or why it could not be installed or run (``problem``)."""

    version: str
    pairs: tuple[PairOutcome, ...] = ()
    problem: str | None = None

    def verdicts(self) -> dict[str, str]:
        return {p.case: p.verdict for p in self.pairs}


def harness_path() -> str | None:
    """The folder to put on the environment's PYTHONPATH so that its interpreter imports this
    rnn-harness; None where this one is installed in a site-packages folder, which the
    environment sees already (behind its own, so the release installed there comes first)."""
    import harness

    root = Path(harness.__file__).resolve().parents[1]
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def run_release(env: ReleaseEnv, node: Node, timeout: float = RUN_TIMEOUT) -> ReleaseOutcome:
    """Run ``node`` with ``env``'s interpreter and read its report; InstallError when the run
    could not be made or imported another version of the package."""
    from harness.report.read_back import read_report

    environ = dict(os.environ)
    root = harness_path()
    if root is None:
        environ.pop("PYTHONPATH", None)
    else:  # this rnn-harness and nothing else ahead of the environment's own packages
        environ["PYTHONPATH"] = root
    with tempfile.TemporaryDirectory(prefix="rnn-harness-bisect-") as tmp:
        out = Path(tmp) / "report"
        command = [str(env.python), "-m", "harness", "run", str(node.file.resolve()),
                   "--adapters", node.adapter, "--quiet", "--out", str(out)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=environ,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise InstallError(f"the run did not end in {timeout:.0f} s") from None
        if done.returncode not in (0, 1) or not (out / "run.json").is_file():
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            raise InstallError(f"rnn-harness run exited {done.returncode}: "
                               + printable(lines[-1][:400] if lines else "no output"))
        report = read_report(out)
    versions = {canonicalize_name(k): str(v) for k, v in report.run.versions.items()}
    found = versions.get(canonicalize_name(env.package))
    if found is not None and not same_release(found, env.version):
        raise InstallError(f"the run imported {env.package} {found}, not {env.version}")
    return ReleaseOutcome(env.version, tuple(_pairs(report, node)))


def _pairs(report, node: Node) -> list[PairOutcome]:
    from harness import compare

    rows = compare.of_mode(report.rows, compare.FREE)
    found = []
    for pair in report.run.pairs:
        if pair.adapter != node.adapter or pair.case not in node.cases:
            continue
        mine = rows[(rows["case"] == pair.case) & (rows["adapter"] == pair.adapter)]
        worst, first = compare.worst(mine), compare.first_divergence(mine)
        found.append(PairOutcome(
            pair.case, pair.status,
            f"{worst['max_abs']:.2e} ({worst['tol_ratio']:.3g}x tol)" if worst is not None
            else "",
            compare.where(first) if first is not None else "", pair.reason or ""))
    return found


Progress = Callable[[str], None]


def bisect(node: Node, package: str, versions: Sequence[str], prepare: Callable[[str], ReleaseEnv],
           run: Callable[[ReleaseEnv, Node], ReleaseOutcome] | None = None,
           progress: Progress | None = None) -> list[ReleaseOutcome]:
    """``node`` on each release of ``versions``, oldest first: ``prepare(version)`` gives the
    release's environment (:func:`harness.release_envs.prepare`), ``run`` runs the node there
    (:func:`run_release` by default).
    A release that could not be installed or run is an outcome with its ``problem``."""
    run = run or run_release
    outcomes = []
    for version in sorted(versions, key=Version):
        try:
            if progress:
                progress(f"{package} {version}: installing ...")
            env = prepare(version)
            if progress:
                progress(f"{package} {version}: running {node.adapter} ...")
            outcomes.append(run(env, node))
        except InstallError as exc:
            outcomes.append(ReleaseOutcome(version, problem=str(exc)))
    return outcomes


@dataclass(frozen=True)
class Change:
    """A case's verdict that differs from the release before (the one that ran before it)."""

    case: str
    before: str  # the release before
    version: str
    old: str
    new: str


def first_change(outcomes: Sequence[ReleaseOutcome]) -> list[Change]:
    """For each case, the first release whose verdict differs from that of the release that
    ran before it (releases that could not be installed or run are passed over); the cases
    whose verdict never changes have none."""
    changes: dict[str, Change] = {}
    last: dict[str, tuple[str, str]] = {}  # case -> (release, verdict) of the latest that ran
    for outcome in outcomes:
        for case, verdict in outcome.verdicts().items():
            if case in last and case not in changes and last[case][1] != verdict:
                changes[case] = Change(case, last[case][0], outcome.version, last[case][1],
                                       verdict)
            last[case] = (outcome.version, verdict)
    return sorted(changes.values(), key=lambda c: Version(c.version))


def table(outcomes: Sequence[ReleaseOutcome], package: str) -> str:
    """A row per release (and per case where the node covers several): verdict, worst error,
    first diverging step."""
    from tabulate import tabulate

    several = len({p.case for o in outcomes for p in o.pairs}) > 1
    rows = []
    for o in outcomes:
        if o.problem is not None:
            rows.append([o.version, *([""] if several else []), "not installed or run", "", ""])
        elif not o.pairs:
            rows.append([o.version, *([""] if several else []), "no pair in the report", "", ""])
        for p in o.pairs:
            rows.append([o.version, *([p.case] if several else []), p.verdict, p.worst or "-",
                         p.first_step or "-"])
    head = [package, *(["case"] if several else []), "verdict", "worst error",
            "first diverging step"]
    # releases are text: "3.0" is not the number 3
    return printable_table(tabulate(rows, headers=head, tablefmt="simple", disable_numparse=True))


def printable_table(text: str) -> str:
    """The table with each line made printable (a reason or version from a run's report)."""
    return "\n".join(printable(line) for line in text.splitlines())


def change_lines(outcomes: Sequence[ReleaseOutcome], package: str) -> list[str]:
    """What follows the table: the first release where the verdict changes, or that none does."""
    ran = [o for o in outcomes if o.problem is None]
    if len(ran) < 2:
        return [f"first change: none to tell: {len(ran)} release(s) of {package} ran"]
    changes = first_change(outcomes)
    if not changes:
        return [f"first change: none: the same verdict on every release of {package} that ran "
                f"({ran[0].version} to {ran[-1].version})"]
    return [f"first change: {package} {c.version} ({c.case}: {c.old} on {c.before}, {c.new} "
            f"on {c.version})" for c in changes]


def reason_lines(outcomes: Sequence[ReleaseOutcome], package: str) -> list[str]:
    """Why a pair was unavailable or an error on a release: an adapter a release breaks, or a
    release older than the adapter's declared lower bound."""
    from harness import compare

    return [printable(f"{package} {o.version}, {p.case}: {p.verdict}: "
                      f"{whole_sentences(p.reason or 'no reason given', 200)}")
            for o in outcomes for p in o.pairs if p.verdict in (compare.UNAVAILABLE,
                                                                 compare.ERROR)]


def problem_lines(outcomes: Sequence[ReleaseOutcome], package: str) -> list[str]:
    """A line per release that could not be installed or run, naming it and why."""
    return [printable(f"{package} {o.version}: could not be installed or run: {o.problem}")
            for o in outcomes if o.problem is not None]


def progress_to_terminal() -> Progress | None:
    """Progress lines on stderr where it is a terminal (installs take minutes), else none."""
    if not sys.stderr.isatty():
        return None
    return lambda line: print(printable(line), file=sys.stderr, flush=True)


def record_lines(outcomes: Sequence[ReleaseOutcome], node: Node, package: str,
                 python: str) -> list[str]:
    """``--record``: the registry fields (harness/known_bugs.py) this bisect measured, as Python
    to paste into the entry of the node's adapter: a ``Bisected`` per case of the node that ran
    somewhere (not applicable on every release that ran: left out), the releases that read "known
    upstream bug" (``seen_on``) and the first release that looks fixed after the last of those
    (``fixed_in``)."""
    from harness import compare, known_bugs

    entries = ", ".join(b.upstream for b in known_bugs.for_adapter(node.adapter)) or "none yet"
    lines = [f"to record in harness/known_bugs.py (the entry of {node.adapter}: {entries}):"]
    for case in node.cases:
        verdicts = {o.version: (known_bugs.NOT_RUN if o.problem is not None else
                                o.verdicts().get(case, "no pair in the report"))
                    for o in outcomes}
        if set(verdicts.values()) <= {compare.NOT_APPLICABLE, known_bugs.NOT_RUN}:
            continue
        pair = f"{node.file.as_posix()}::{case}::{node.adapter}"
        lines.append(f"    Bisected({pair!r}, {package!r}, {python!r}, {verdicts!r}),")
        seen = [v for v, said in verdicts.items() if said == compare.KNOWN_BUG]
        if not seen:
            continue
        lines.append(f"    seen_on: {', '.join(repr({package: v}) for v in seen)}")
        later = [v for v, said in verdicts.items() if said == compare.LOOKS_FIXED
                 and Version(v) > Version(seen[-1])]
        lines.append(f"    fixed_in: {({package: later[0]})!r}" if later else
                     "    fixed_in: none: no release after the last that showed it looks fixed")
    return [printable(line) for line in lines]
