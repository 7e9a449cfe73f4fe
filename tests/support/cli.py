"""The command line called in-process, and the one-line bad-input check."""

from __future__ import annotations

from harness.cli import main


def cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.splitlines()


def one_line(code: int, err: list[str], *words: str, absent: tuple[str, ...] = ()) -> str:
    """The error line of a bad input: exit 2, one line, holding ``words`` and none of
    ``absent`` (a secret of the file that must not be echoed)."""
    __tracebackhide__ = True
    assert code == 2 and len(err) == 1, f"got exit {code} and {err}, but should be 2 and one line"
    assert err[0].startswith("rnn-harness: error: ") and "Traceback" not in err[0], err
    for w in words:
        assert w in err[0], f"got {err[0]!r}, but should hold {w!r}"
    for w in absent:
        assert w not in err[0], err[0]
    return err[0]
