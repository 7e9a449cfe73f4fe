"""Progress while running (harness.progress, rendering the run's events): pairs done of total,
the pair running now, the time left.

Not a terminal: one plain line per finished pair. A terminal: one line rewritten in place with a
carriage return, DIVERGED and error results kept on screen. A plain callable as the line sink
gets one ``str`` per finished pair.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness import adapters as registry
from harness import compare, progress, runner
from harness.cases import discover

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

CASES = {
    "tiny.yaml": """
name: tiny
input_size: 3
hidden_size: 4
batch: 2
seq_len: 4
seed: 1
matrix:
  cell: [lstm, gru]
""",
    # float32 torch cannot meet atol 1e-12: a planted DIVERGED pair.
    "tight.yaml": """
name: tight
cell: gru
input_size: 3
hidden_size: 4
batch: 2
seq_len: 4
seed: 2
tolerance: {adapters: {torch-cpu: {atol: 1.0e-12, rtol: 0}}}
""",
}
ADAPTERS = ["reference", "noise-floor", "torch-cpu"]
LINE = re.compile(r"^\[(\d+)/(\d+)\] \S+::\S+  .*\((~\d+(m\d\ds|s) left|time left unknown)\)$")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("cases")
    for name, text in CASES.items():
        (folder / name).write_text(text)
    return discover([folder])


def run(cases, lines):
    return runner.run(cases, registry.select(ADAPTERS), on_event=progress.RunProgress(lines))


def test_not_a_terminal_one_plain_line_per_finished_pair(cases):
    stream = io.StringIO()
    result = run(cases, progress.StderrProgress(stream))
    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    total = len(cases) * len(ADAPTERS)
    assert len(lines) == len(result.pairs) == total
    for k, line in enumerate(lines, 1):
        m = LINE.match(line)
        assert m, f"got {line!r}, but should be '[k/N] case::adapter  result  (time left)'"
        assert (int(m[1]), int(m[2])) == (k, total)
    assert "running" not in text  # which pair runs now is for terminals only
    assert lines[-1].endswith("(~0s left)")
    assert any("tight::torch-cpu  DIVERGED first at y" in line for line in lines)


def test_terminal_single_updating_line(cases, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the status line is cut to the terminal's width
    stream = Terminal()
    result = run(cases, progress.StderrProgress(stream))
    text = stream.getvalue()
    total = len(result.pairs)
    # the pair running now, with pairs done of total, before it finishes
    first = f"{cases[0].name}::reference"
    assert f"\r[0/{total}] running {first}  (0s so far, time left unknown)\x1b[K" in text
    # no estimate from the first pairs (they carry the imports), one once a few are done
    assert f"\r[2/{total}] running tight::torch-cpu  (0s so far, time left unknown)" in text
    assert re.search(rf"\r\[{total - 1}/{total}\] running tiny-gru::torch-cpu  "
                     r"\(\d+s so far, ~\d+s left\)", text)
    # passing results only rewrite the line; the DIVERGED one stays as a line of its own
    bad = [p for p in result.pairs if p.status in (compare.DIVERGED, compare.ERROR)]
    assert [p.adapter for p in bad] == ["torch-cpu"]
    kept = [seg for seg in text.split("\r") if seg.endswith("\n")]
    assert len(kept) == 1 and "tight::torch-cpu  DIVERGED" in kept[0]
    assert text.count("\n") == 1
    assert text.endswith("\r\x1b[K")  # the status line is cleared when the run ends


def test_plain_callable_gets_one_str_per_pair(cases):
    lines: list[str] = []
    result = run(cases, lines.append)
    assert len(lines) == len(result.pairs)
    assert all(isinstance(line, str) and LINE.match(line) for line in lines)
    statuses = [getattr(line, "status", None) for line in lines]
    assert statuses == [p.status for p in result.pairs]


def test_default_writes_to_the_current_stderr(capsys):
    progress.plain_progress("[1/1] x::y  pass")
    assert capsys.readouterr().err == "[1/1] x::y  pass\n"


def test_case_that_cannot_be_prepared_is_an_error_line(tmp_path: Path):
    (tmp_path / "broken.yaml").write_text(
        "name: broken\ncell: lstm\ninput_size: 3\nhidden_size: 4\n"
        "weights: {file: missing.npz, layout: torch}\n")
    stream = Terminal()
    result = runner.run(discover([tmp_path]), registry.select(["reference", "noise-floor"]),
                        on_event=progress.RunProgress(progress.StderrProgress(stream)))
    assert "broken" in result.case_errors
    text = stream.getvalue()
    assert re.search(r"\[2/2\] broken: error: .*missing\.npz.*\n", text), text


def test_time_formatting():
    assert progress.duration(0.4) == "0s"
    assert progress.duration(59.6) == "1m00s"
    assert progress.duration(125) == "2m05s"
    assert progress.time_left([], 10) == "time left unknown"
    # the first pairs carry the imports: no estimate from them alone
    assert progress.time_left([100.0, 100.1], 10) == "time left unknown"
    assert progress.time_left([1.0] * 10, 10) == "~0s left"


def test_time_left_ignores_the_slow_first_pairs(monkeypatch):
    # pair 1 took 60 s (imports), the next three 1 s each: 6 left at ~1 s, not at 15.75 s
    monkeypatch.setattr(progress.time, "perf_counter", lambda: 63.0)
    assert progress.time_left([60.0, 61.0, 62.0, 63.0], 10) == "~6s left"


# The default display (RunDisplay) and the command line ----------------------------------------

def _cli(folder: Path, *extra: str) -> tuple[int, str, str]:
    from harness.cli import main

    capsys_out, capsys_err = io.StringIO(), io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(capsys_out), contextlib.redirect_stderr(capsys_err):
        code = main(["run", str(folder), "--adapters", ",".join(ADAPTERS),
                     "--out", str(folder / "report"), *extra])
    return code, capsys_out.getvalue(), capsys_err.getvalue()


@pytest.fixture(scope="module")
def folder(cases, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    for name, text in CASES.items():
        (root / name).write_text(text)
    return root


def test_the_default_display_shows_only_what_did_not_pass(folder):
    """Not a terminal: no line per pair, only the pair that diverged, then the last line."""
    code, out, err = _cli(folder)
    assert code == 1
    lines = [x for x in err.splitlines() if not x.startswith("report: writing")]
    assert len(lines) == 1 and lines[0].startswith("tight::torch-cpu  DIVERGED first at"), err
    assert len(out.splitlines()) == 1 and "1 DIVERGED" in out


def test_verbose_gives_a_line_per_pair(folder):
    code, _, err = _cli(folder, "--verbose")
    pairs = [x for x in err.splitlines() if LINE.match(x)]
    assert code == 1 and len(pairs) == 3 * len(ADAPTERS)


def test_the_display_on_a_terminal_is_one_bar_with_the_diverged_pair_above(cases):
    stream = Terminal()
    runner.run(cases, registry.select(ADAPTERS), on_event=progress.RunDisplay(stream))
    text = stream.getvalue()
    assert "tight::torch-cpu  DIVERGED" in text
    assert f"/{3 * len(ADAPTERS)} pairs, " in text  # the bar: done of total, the pair running
    kept = [x for x in text.replace("\r", "\n").splitlines() if "::" in x and "%|" not in x]
    assert kept == [x for x in kept if "DIVERGED" in x]  # no pass line kept on screen


def test_the_time_left_weighs_the_pairs_that_run(monkeypatch):
    """Not-applicable pairs are settled at once: 40 of them done in no time must not make the
    estimate say ~0s when the pairs that run take 10 s each."""
    from harness.results import PairResult
    from harness.run_events import PairFinished, RunStarted

    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    display = progress.RunDisplay(io.StringIO())
    display(RunStarted(100))
    for k in range(50):  # every fifth pair runs, for 10 s; the others are not applicable
        runs = k % 5 == 0
        now[0] += 10.0 if runs else 0.0
        status = compare.PASS if runs else compare.NOT_APPLICABLE
        display(PairFinished(PairResult("c", f"a{k}", status)))
    # 50 pairs left, a fifth of them run, 10 s each: about 100 s
    assert display.time_left() == "~1m40s left"
