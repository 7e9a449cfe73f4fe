"""Command line: ``python -m harness`` / ``rnn-harness``. One module per command
(:data:`COMMANDS`), each declaring its arguments (``add_parser``) and its handler (``handle``);
here the parser is built from them, and :func:`main` runs one with the exit codes below.

Exit codes: 0 all applicable pairs pass; 1 a pair diverged or errored; 2 bad input (one line
on stderr naming the file and field, never a traceback).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from harness import __version__
from harness.cli import (
    adapters,
    bisect,
    compare_cmd,
    convert,
    diff,
    doctor,
    init,
    layouts,
    merge,
    probe,
    repro,
    run,
    schema,
)
from harness.errors import HarnessError, printable

EXIT_CODES = ("0: every applicable pair passed (or the command succeeded); 1: a pair diverged "
              "or failed (run, merge), a regression (diff), no explanation found (doctor), a "
              "layer that differs (compare), a release that could not be installed or run "
              "(bisect); "
              "2: bad input, one line on stderr naming the file and field; 74: the output "
              "could not be written (standard output full or closed); 130: interrupted")

# in the order --help lists them
COMMANDS = (run, merge, init, adapters, schema, layouts, diff, convert, doctor, compare_cmd,
            probe, repro, bisect)


def _epilog() -> str:
    """What --help lists besides the options: adapters, layouts, devices, exit codes."""
    import textwrap

    from harness.adapters import ADAPTERS
    from harness.layouts import LAYOUTS

    def wrapped(title: str, text: str) -> str:
        return title + "\n" + textwrap.fill(text, 88, initial_indent="  ", subsequent_indent="  ",
                                             break_on_hyphens=False)

    return "\n\n".join([
        wrapped("adapters (`rnn-harness adapters` says which can run here):",
                ", ".join(f"{a.name} [{a.device}]" for a in ADAPTERS.values())),
        wrapped("layouts (docs/layouts.md):", ", ".join(LAYOUTS)),
        wrapped("devices (--device):", "cpu, gpu, all (default: the devices this machine "
                "has, cpu plus gpu where nvidia-smi sees a GPU; all with --require-gpu or named "
                "--adapters; a "
                "selected adapter that cannot run here is reported unavailable)"),
        wrapped("exit codes:", EXIT_CODES),
    ])


def build_parser() -> argparse.ArgumentParser:
    epilog = _epilog()
    p = argparse.ArgumentParser(prog="rnn-harness",
                                description="Cross-framework LSTM/GRU conformance harness",
                                epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands, epilog).set_defaults(func=command.handle)
    return p


class Terminated(BaseException):
    """SIGTERM or SIGHUP (a closed terminal), turned into an exception so that the command
    unwinds like Ctrl-C: worker processes stopped, the partial report folder and the scratch
    folder removed, the previous report left as it was."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


# the signals that end a command as Terminated (SIGHUP: not on Windows)
TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                    if hasattr(signal, name))


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated(signum)


class OutputError(Exception):
    """Standard output could not be written (a full disk, /dev/full): not bad input."""


class _Stdout:
    """``sys.stdout`` during a command: a failed write is an :class:`OutputError`, told apart
    from the OSErrors of the files the command reads and writes."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


_OUTPUT_FAILED = False  # standard output failed: entry() ends the process without flushing it


def main(argv: list[str] | None = None) -> int:
    from harness.scratch import scratch

    parser = build_parser()
    args = parser.parse_args(argv)
    previous = {}
    # an inherited "ignore" (nohup: SIGHUP; wrappers: SIGTERM) is kept, as Python keeps an
    # ignored SIGINT
    if threading.current_thread() is threading.main_thread():
        for sig in TERMINATING:
            if signal.getsignal(sig) != signal.SIG_IGN:
                previous[sig] = signal.signal(sig, _on_sigterm)
    stdout = sys.stdout
    sys.stdout = _Stdout(stdout)
    try:
        with scratch():  # the frameworks' config and caches: nothing written outside the paths
            return _main(args)
    finally:
        sys.stdout = stdout
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupted(how: str) -> str:
    """The last line of an interrupted command: what its report folder holds now."""
    swap = sys.modules.get("harness.report.swap")  # not imported: no report was begun
    note = swap.interrupted_note() if swap else "nothing of this run was written"
    return f"rnn-harness: interrupted ({how}): {note}"


def _main(args: argparse.Namespace) -> int:
    global _OUTPUT_FAILED
    swap = sys.modules.get("harness.report.swap")
    if swap:  # an earlier command in this process (tests call main repeatedly)
        swap.reset_state()
    try:
        code = args.func(args)
        sys.stdout.flush()
        return code
    except OutputError as exc:
        _OUTPUT_FAILED = True
        print(f"rnn-harness: error: cannot write to standard output: {exc} (files the command "
              "wrote are complete)", file=sys.stderr)
        return 74
    except HarnessError as exc:
        print(f"rnn-harness: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(_interrupted("SIGINT"), file=sys.stderr)
        return 130
    except Terminated as exc:
        print(_interrupted(signal.Signals(exc.signum).name), file=sys.stderr)
        return 128 + exc.signum
    except OSError as exc:  # a path that cannot be written (read-only, under a file, disk full)
        where = f"{exc.filename}: " if exc.filename else ""
        print(printable(f"rnn-harness: error: {where}{exc.strerror or exc}"), file=sys.stderr)
        return 2


def entry() -> None:
    """The console entry point (``rnn-harness``, ``python -m harness``): :func:`main`, then the
    exit. When an adapter call abandoned by a timeout or an interrupt is still running in a
    thread, the process ends with ``os._exit`` once its output is flushed: interpreter shutdown
    with framework code running in a thread can abort the process (SIGABRT, exit 134) after the
    report was written."""
    try:
        code = main()
    except KeyboardInterrupt:  # before the command began (its imports, the parser): no traceback
        print(_interrupted("SIGINT"), file=sys.stderr)
        code = 130
    # not imported: no adapter call was made, none abandoned
    isolation = sys.modules.get("harness.isolation")
    # a standard output that failed would fail again at interpreter shutdown ("Exception
    # ignored", exit 120): end without flushing it
    if (isolation is not None and isolation.abandoned_calls()) or _OUTPUT_FAILED:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    raise SystemExit(code)
