"""``rnn-harness repro REPORT CASE::ADAPTER [--out DIR]``: write one pair's reproducer again,
from a report folder, whatever the pair's verdict (a passing pair's reproducer exits 0).

The report folder is untrusted input, read as ``merge`` and ``diff`` read one (bounded,
validated, no pickle, nothing outside it followed): the pair must be one of its run.json's,
the case is its recorded spec (a case that reads a weights or inputs file is refused: a report
from elsewhere must not make this command read other files), and the adapter one of this
installation's. The pair is run again here (same seed, same data), and its folder written as
the report writes it: into ``REPORT/repro/<case>/<adapter>/``, or ``--out DIR``; a link at or
below ``REPORT/repro`` or ``--out`` is refused before the run (harness.safe_files).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import HarnessError

# what write_one writes; a non-empty --out holding anything else is refused
_WRITTEN = {"repro.py", "README.md", "data.npz", "model.onnx", "model.tflite", "model.pte",
            "test_data_set_0"}


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    r = commands.add_parser("repro", help="write a pair's standalone reproducer again from a "
                                          "report folder (also for a passing pair)")
    r.add_argument("report", help="the report folder (run --out)")
    r.add_argument("pair", metavar="CASE::ADAPTER", help="the pair, as the report names it")
    r.add_argument("--out", help="the reproducer's folder (default REPORT/repro/CASE/ADAPTER)")
    return r


def _pair(text: str, report) -> tuple[str, str]:
    from harness.shard import SEPARATOR

    case, sep, adapter = text.rpartition(SEPARATOR)
    if not sep or not case or not adapter:
        raise HarnessError(f"expected CASE{SEPARATOR}ADAPTER, got {text[:120]!r}",
                           field="CASE::ADAPTER")
    if not any(p.case == case and p.adapter == adapter for p in report.run.pairs):
        raise HarnessError(f"the report has no pair {text[:120]!r}", file=report.folder /
                           "run.json", field="pairs")
    return case, adapter


def _case(report, name: str):
    from pydantic import ValidationError

    from harness.spec import Case, TensorFile

    entry = report.run.cases.get(name)
    run_json = report.folder / "run.json"
    if entry is None or entry.spec is None:
        raise HarnessError(f"case {name[:80]!r} has no recorded spec", file=run_json,
                           field="cases")
    try:
        case = Case.model_validate(dict(entry.spec))
    except ValidationError as exc:
        raise HarnessError(f"case {name[:80]!r}: recorded spec does not validate "
                           f"({exc.error_count()} error(s))", file=run_json) from None
    if isinstance(case.weights, TensorFile) or isinstance(case.inputs, TensorFile):
        raise HarnessError(f"case {name[:80]!r} reads a weights or inputs file; a report folder "
                           "does not make this command read other files: run the case itself "
                           "(run --out, which writes its reproducer)", file=run_json,
                           field="cases")
    return case


def _out_folder(out: Path) -> None:
    from harness import safe_files

    safe_files.check(out / "test_data_set_0", top=out, field="--out")
    if out.exists() and not out.is_dir():
        raise HarnessError("exists and is not a folder", file=out, field="--out")
    if out.is_dir():
        other = sorted(p.name for p in out.iterdir() if p.name not in _WRITTEN)
        if other:
            raise HarnessError(f"holds {', '.join(other[:3])}, which a reproducer does not "
                               "write; give a new or empty folder", file=out, field="--out")


def handle(args: argparse.Namespace) -> int:
    from harness import safe_files
    from harness.adapters import get_adapter
    from harness.pairs import reproduce
    from harness.prepare import prepare
    from harness.report import agreeing_in
    from harness.report.read_back import read_report
    from harness.repro.write import safe_name, write_one

    report = read_report(args.report)
    case_name, adapter_name = _pair(args.pair, report)
    case = _case(report, case_name)
    adapter = get_adapter(adapter_name)
    if args.out:
        root, names = Path(args.out), None
        _out_folder(root)
    else:
        root = report.folder / "repro"
        names = (safe_name(case_name), safe_name(adapter_name))
        # refused before the run: a downloaded report's repro/ may link anywhere
        safe_files.check(root / names[0] / names[1] / "test_data_set_0", top=root)
    from harness.prepare import check_memory

    check_memory(case)  # a recorded spec of any size: refused before anything is allocated
    record = reproduce(prepare(case), adapter)
    agree = agreeing_in([(p.case, p.adapter, p.status) for p in report.run.pairs], case_name)
    if args.out:
        safe_files.folder(root, field="--out")
        names = (".", ".")  # the folder itself
    folder = write_one(root, record, agree, names)
    print(f"{record.case}::{record.adapter} ({record.status}): {folder.resolve()}")
    return 0
