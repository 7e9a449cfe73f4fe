"""Worker processes: the one loop every process the harness starts runs (``--isolate``'s
adapter workers, ``--jobs``'s case workers), and the parent's handle on such a process.

A worker is a fresh interpreter, never a fork (TensorFlow is not fork-safe once imported). In
the worker, a picklable factory builds its :class:`Job`; the job's ``ready()`` is sent back,
then each message from the parent is answered with the job's replies to it, until the parent
says stop or goes away. A worker ignores Ctrl-C (the parent's to handle) and dies with its
parent.

The worker starts from the harness's own entry point (:func:`_child`), not from
multiprocessing's spawn: spawn runs the parent's main module again in every child (as
``__mp_main__``) whenever that module has a file, so that objects defined there unpickle. The
harness's jobs are harness classes, pickled by reference, and need nothing from ``__main__``;
a user's script without an ``if __name__ == "__main__":`` guard that calls
``harness.check`` would instead run its whole check again in each worker, where starting a
worker of its own fails ("An attempt has been made to start a new process before the current
process has finished its bootstrapping phase"). So the worker is ``python -c`` with a fixed
line that imports this module from where the parent has it and calls :func:`_child`, which
takes the parent's ``sys.path`` and ``sys.argv``, then the job, over a socket it inherits by
file descriptor (``pass_fds``: POSIX): the user's main module is never imported there, whether
it is a script, a notebook or ``python -c``.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

STOP = ("stop",)
INTERRUPTS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                   if hasattr(signal, name))


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """A Ctrl-C or SIGTERM that comes in the block is handled when it ends (by the handler
    there was before). Python runs signal handlers in the main thread only, whichever thread
    the signal reached, so the main thread's handlers are swapped for ones that note the signal;
    elsewhere (where handlers cannot be set) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {}
    for sig in INTERRUPTS:
        handler = signal.getsignal(sig)
        if handler is not None:  # None: a handler not set from Python, left alone
            previous[sig] = signal.signal(sig, lambda s, _frame: caught.append(s))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            handler = previous[sig]
            if callable(handler):
                handler(sig, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), sig)  # the default action, now that it is back


class Job(Protocol):
    """What a worker does: built in the worker by the factory given to :class:`Worker`."""

    def ready(self) -> Any:
        """The first reply, sent once the job is built."""

    def handle(self, message: Any) -> Iterable[Any]:
        """The replies to one message from the parent, sent as they come."""

    def unsendable(self, reply: Any, error: Exception) -> Any:
        """What to send instead of a reply that cannot be pickled."""

    def close(self) -> None:
        """Called when the worker stops."""


class NoReply(Exception):
    """The worker sent nothing within the time given."""


def _die_with_parent(parent: int) -> None:
    """A worker must not outlive a killed run (Linux: ask the kernel; elsewhere the pipe's EOF)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)


# The worker's command line after the interpreter and its flags: Ctrl-C is ignored from the
# first line on (the terminal sends it to the whole process group; the parent handles it), the
# harness is imported from the folder the parent imported it from, and _child takes over.
_BOOT = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "sys.path.insert(0, sys.argv[2]); from harness.workers import _child; "
         "_child(int(sys.argv[1]))")
_HARNESS_ROOT = str(Path(__file__).resolve().parent.parent)  # the folder holding harness/


def _child(fd: int) -> None:
    """A worker's entry point: the start-up message on the inherited socket ``fd`` (the
    parent's ``sys.path`` and ``sys.argv``, then the pickled job, unpickled only once that path
    is in place), then the worker loop. A parent gone before the start was whole: exit 1."""
    conn = multiprocessing.connection.Connection(fd)
    try:
        path, argv, start = conn.recv()
    except (EOFError, OSError):
        os._exit(1)
    sys.path[:], sys.argv[:] = path, argv
    _main(conn, *pickle.loads(start))


def _main(conn: Any, parent: int, make_job: Callable[..., Job], args: tuple,
          env: dict[str, str] | None = None) -> None:
    """The worker loop. ``env`` is applied first, before the job is built: by then the child
    has imported only the modules that unpickling ``make_job`` and ``args`` needed (the
    harness's, which import no framework at import time)."""
    if env:
        os.environ.update(env)
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = make_job(*args)
    try:
        conn.send(job.ready())
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message == STOP:
                return
            for reply in job.handle(message):
                try:
                    conn.send(reply)
                except OSError:  # the parent is gone
                    return
                except Exception as exc:  # pickling failed before anything was written
                    conn.send(job.unsendable(reply, exc))
    finally:
        job.close()
        # no interpreter shutdown: a framework call abandoned in a thread by a timeout would
        # make it abort (SIGABRT) while the worker exits; there is nothing left to clean up
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(0)


class _Process:
    """A worker's process as :class:`Worker` uses it (the calls of ``multiprocessing.Process``
    it had): ``exitcode`` None while it runs, ``-N`` when signal N ended it."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self.pid = popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)

    def kill(self) -> None:
        self.popen.kill()  # a no-op once it has been waited for


_RUNNING: set[_Process] = set()  # the workers not yet stopped, killed when the parent exits


@atexit.register
def _end_workers() -> None:
    for process in list(_RUNNING):
        process.kill()
        process.join(5)


class Worker:
    """A worker process running ``make_job(*args)`` (both pickled to it), as its parent sees it.
    ``env``: environment variables set in the worker before its job is built (the parent's
    environment is left alone). ``name``: the worker's name. A worker still running when the
    parent exits is killed (one whose parent is killed dies with it: :func:`_die_with_parent`).
    """

    def __init__(self, make_job: Callable[..., Job], args: tuple, *, name: str,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        # pickled before anything starts: an object that does not pickle starts no process
        start = (sys.path, sys.argv, pickle.dumps((os.getpid(), make_job, args, env)))
        self.conn, child = multiprocessing.Pipe()
        # A Ctrl-C or SIGTERM handled between the start and the end of what the parent writes
        # to the new process would leave it reading half its start-up data: held until the
        # start is whole.
        try:
            with _interrupts_held():
                popen = subprocess.Popen(
                    [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", _BOOT,
                     str(child.fileno()), _HARNESS_ROOT],
                    stdin=subprocess.DEVNULL, pass_fds=(child.fileno(),))
                self.process = _Process(popen)
                _RUNNING.add(self.process)
                self.conn.send(start)
        finally:
            child.close()

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def receive(self, timeout: float | None = None) -> Any:
        """The next reply: :class:`NoReply` after ``timeout`` seconds (None: no limit),
        ``EOFError`` or ``OSError`` if the worker is dead."""
        if not self.conn.poll(timeout):
            raise NoReply
        return self.conn.recv()

    def alive(self) -> bool:
        return self.process.is_alive()

    def how_it_ended(self) -> str:
        """"was killed by SIGKILL", "exited with code 1", or "stopped answering" (a worker
        that has closed its pipe but not ended in 5 s: it is killed)."""
        self.process.join(5)
        code = self.process.exitcode
        if code is None:
            self.kill()
            return "stopped answering"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def retire(self) -> None:
        """Ask the worker to stop (its job closes first)."""
        try:
            self.conn.send(STOP)
        except OSError:
            pass

    def stop(self, wait: float = 5.0) -> None:
        """Retire the worker and kill it if it has not ended after ``wait`` seconds."""
        self.retire()
        self.process.join(wait)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        _RUNNING.discard(self.process)
        self.conn.close()
