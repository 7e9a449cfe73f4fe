"""Worker processes: the one loop every process the harness starts runs (``--isolate``'s
adapter workers, ``--jobs``'s case workers), and the parent's handle on such a process.

A worker is spawned, never forked (TensorFlow is not fork-safe once imported). In the worker,
a picklable factory builds its :class:`Job`; the job's ``ready()`` is sent back, then each
message from the parent is answered with the job's replies to it, until the parent says stop
or goes away. A worker ignores Ctrl-C (the parent's to handle) and dies with its parent.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
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


class Worker:
    """A worker process running ``make_job(*args)`` (both pickled to it), as its parent sees it.
    ``daemon``: ended with the parent by multiprocessing too; a daemon cannot start processes
    of its own. ``env``: environment variables set in the worker before its job is built
    (the parent's environment is left alone)."""

    def __init__(self, make_job: Callable[..., Job], args: tuple, *, name: str,
                 daemon: bool = True, context: Any = None,
                 env: dict[str, str] | None = None) -> None:
        context = context or multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_main,
                                       args=(child, os.getpid(), make_job, args, env),
                                       name=name, daemon=daemon)
        # A Ctrl-C or SIGTERM handled between the spawn and the end of what the parent writes
        # to the new process would leave it reading half its start-up data ("EOFError: Ran out
        # of input" with a traceback on the terminal): held until the start is whole.
        try:
            with _interrupts_held():
                self.process.start()
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
        self.conn.close()
