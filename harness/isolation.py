"""Running an adapter's pairs under a time limit, in this process or in a worker process.

Both executors offer ``unavailable_reason(adapter)`` and ``call(adapter, case, canonical,
inputs, *, check_finite) -> (Outputs, seconds)`` (``Adapter.run``'s arguments); a pair that
cannot finish raises :class:`PairFailure`, which the runner turns into an error row while the
rest of the run goes on.

- :class:`InProcess` (the default). Without a timeout the adapter runs right here, in the main
  thread. With one, each adapter runs in a daemon thread of its own (its "lane"), and a pair
  still running after ``timeout`` seconds is a failure. Python cannot stop a thread, so the
  hung one is abandoned, and the adapter's later pairs are refused rather than queued behind it
  (it may hold a framework lock); ``--isolate`` restarts the adapter instead.
- :class:`Isolated` (``--isolate``). One worker process per adapter (multiprocessing ``spawn``),
  started at the adapter's first pair and kept for the rest of the run, so its framework is
  imported once per worker, not once per pair. A timeout kills the worker; a worker that dies
  (a segfault, ``os._exit``, SIGKILL, the OOM killer) becomes an error row naming its exit code
  or signal; the adapter's next pair starts a fresh worker. The adapter object is pickled to
  the worker (by reference to its class), so adapters must be importable by module name.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from harness.adapters.base import Adapter
from harness.data import Inputs, Outputs
from harness.errors import NotApplicable, Unavailable
from harness.params import Canonical
from harness.spec import Case

STARTUP_SECONDS = 120.0  # least time a worker gets to start and import its framework


class PairFailure(Exception):
    """A pair that could not finish: it timed out, its worker died, or it raised in a worker.
    ``str(err)`` is the reason for reports; ``detail`` the traceback or log, if any."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.detail = detail


def _limit(timeout: float | None) -> float | None:
    if timeout is None or timeout <= 0 or math.isinf(timeout):
        return None
    return float(timeout)


def _seconds(s: float) -> str:
    return f"{s:g} s"


# In process ---------------------------------------------------------------------------------

class _Lane:
    """A daemon thread running one adapter's calls, one at a time."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"rnn-harness-{name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            fn, box, done = self.jobs.get()
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed to the caller, which re-raises it
                box["error"] = exc
            done.set()

    def call(self, fn: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
        """(finished, value); a failure of ``fn`` is re-raised here."""
        box: dict[str, Any] = {}
        done = threading.Event()
        self.jobs.put((fn, box, done))
        if not done.wait(timeout):
            return False, None
        if "error" in box:
            raise box["error"]
        return True, box["value"]


class InProcess:
    """Adapters run in this process; with ``timeout``, each in a thread of its own."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = _limit(timeout)
        self._lanes: dict[str, _Lane] = {}
        self._hung: dict[str, str] = {}  # adapter -> the case it was running when it timed out

    def _run(self, adapter: Adapter, what: str, fn: Callable[[], Any]) -> Any:
        if adapter.name in self._hung:
            raise PairFailure(f"not run: {adapter.name} timed out earlier "
                              f"({self._hung[adapter.name]}) and may still be running in this "
                              "process; use --isolate to restart it")
        if self.timeout is None:
            return fn()
        if adapter.name not in self._lanes:
            self._lanes[adapter.name] = _Lane(adapter.name)
        lane = self._lanes[adapter.name]
        finished, value = lane.call(fn, self.timeout)
        if not finished:
            self._hung[adapter.name] = what
            del self._lanes[adapter.name]
            raise PairFailure(f"timed out after {_seconds(self.timeout)} (still running in a "
                              "background thread; use --isolate to kill hung adapters)")
        return value

    def unavailable_reason(self, adapter: Adapter) -> str | None:
        # in the main thread, untimed: a framework's import may install signal handlers,
        # which only the main thread can do
        return adapter.unavailable_reason()

    def call(self, adapter: Adapter, case: Case, canonical: Canonical, inputs: Inputs, *,
             check_finite: bool = True) -> tuple[Outputs, float]:
        return self._run(adapter, f"case {case.name}",
                         lambda: adapter.run(case, canonical, inputs, check_finite=check_finite))

    def close(self) -> None:
        """Nothing to stop: a hung lane is a daemon thread and ends with the process."""

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Worker processes ---------------------------------------------------------------------------

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


def _worker_main(conn: Any, adapter: Adapter, parent: int) -> None:
    """The worker loop: report availability, then run pairs until told to stop or orphaned."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    adapter._availability = False  # check here, in the process that will run it
    try:
        reason = adapter.unavailable_reason()
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}"
    conn.send(("ready", reason))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, case, canonical, inputs, check_finite = message
        try:
            out, seconds = adapter.run(case, canonical, inputs, check_finite=check_finite)
            reply: tuple = ("ok", out, seconds)
        except NotApplicable as exc:
            reply = ("raised", "not applicable", type(exc).__name__, str(exc), "")
        except Unavailable as exc:
            reply = ("raised", "unavailable", type(exc).__name__, str(exc), "")
        except BaseException as exc:  # SystemExit too: a worker runs until the parent says stop
            reply = ("raised", "error", type(exc).__name__, str(exc), traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # outputs that do not pickle
            conn.send(("raised", "error", type(exc).__name__,
                       f"cannot send the outputs back: {exc}", traceback.format_exc()))


class _Worker:
    def __init__(self, adapter: Adapter, context: Any) -> None:
        self.name = adapter.name
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, adapter, os.getpid()),
                                       name=f"rnn-harness-{adapter.name}", daemon=True)
        try:
            self.process.start()
        except Exception as exc:  # e.g. the adapter does not pickle
            raise PairFailure(f"cannot start a worker process for {adapter.name}: "
                              f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None
        finally:
            child.close()

    def request(self, message: tuple | None, timeout: float | None) -> tuple:
        """Send ``message`` (None: only wait) and return the reply; PairFailure on a timeout
        (the worker is killed) or a dead worker."""
        try:
            if message is not None:
                self.conn.send(message)
            if not self.conn.poll(timeout):
                self.kill()
                raise PairFailure(f"timed out after {_seconds(timeout)}; the worker process was "
                                  "killed (it is restarted for the next pair)")
            return self.conn.recv()
        except (EOFError, OSError):
            raise PairFailure(self.death()) from None

    def death(self) -> str:
        self.process.join(5)
        code = self.process.exitcode
        if code is None:
            self.kill()
            return f"the worker process of {self.name} stopped answering"
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            how = f"was killed by {sig}"
        else:
            how = f"exited with code {code}"
        return f"the worker process of {self.name} {how} (it is restarted for the next pair)"

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except OSError:
            pass
        self.process.join(5)
        self.kill()


class Isolated:
    """One worker process per adapter, restarted after a crash or a timeout."""

    def __init__(self, timeout: float | None = None, context: str = "spawn") -> None:
        self.timeout = _limit(timeout)
        self.context = multiprocessing.get_context(context)
        self._workers: dict[str, _Worker] = {}
        self._reasons: dict[str, str | None] = {}

    def _worker(self, adapter: Adapter) -> _Worker:
        w = self._workers.get(adapter.name)
        if w is not None and w.alive():
            return w
        self._workers.pop(adapter.name, None)
        w = _Worker(adapter, self.context)
        startup = max(self.timeout, STARTUP_SECONDS) if self.timeout else None
        _, reason = w.request(None, startup)
        self._workers[adapter.name] = w
        self._reasons[adapter.name] = reason
        # the report asks the parent's adapter; answer from the worker without importing here
        adapter._availability = reason
        return w

    def unavailable_reason(self, adapter: Adapter) -> str | None:
        if adapter.name not in self._reasons:
            self._worker(adapter)
        return self._reasons[adapter.name]

    def call(self, adapter: Adapter, case: Case, canonical: Canonical, inputs: Inputs, *,
             check_finite: bool = True) -> tuple[Outputs, float]:
        worker = self._worker(adapter)
        start = time.perf_counter()
        reply = worker.request(("run", case, canonical, inputs, check_finite), self.timeout)
        if reply[0] == "ok":
            return reply[1], reply[2]
        _, kind, type_name, message, detail = reply
        if kind == "not applicable":
            raise NotApplicable(message)
        if kind == "unavailable":
            raise Unavailable(message)
        reason = f"{type_name}: {message}".splitlines()[0][:500] if message else type_name
        raise PairFailure(reason, detail or f"{reason} (after {time.perf_counter() - start:.2f} s)")

    def close(self) -> None:
        for w in self._workers.values():
            w.stop()
        self._workers.clear()

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Executor = InProcess | Isolated


def executor(timeout: float | None = None, isolate: bool = False) -> Executor:
    """The executor for ``run``: worker processes with ``isolate``, else this process."""
    return Isolated(timeout) if isolate else InProcess(timeout)
