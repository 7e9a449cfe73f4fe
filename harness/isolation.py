"""Running an adapter's pairs under a time limit, in this process or in a worker process.

Both executors offer ``unavailable_reason(adapter)`` and ``call(adapter, case, canonical,
inputs, *, check_finite) -> (Outputs, seconds)`` (``Adapter.run``'s arguments); a pair that
cannot finish raises :class:`PairFailure`, which the runner turns into an error row while the
rest of the run goes on.

- :class:`InProcess` (the default). Without a timeout the adapter runs right here, in the main
  thread. With one, each adapter runs in a daemon thread of its own (its "lane"), and a pair
  still running after ``timeout`` seconds is a failure. Python cannot stop a thread, so the
  hung one is abandoned, and the adapter's later pairs are refused rather than queued behind it
  (it may hold a framework lock); ``--isolate`` restarts the adapter instead. A process left
  with an abandoned call ends with ``os._exit`` once its report and output are written
  (:func:`abandoned_calls`): interpreter shutdown under a running framework call can abort
  (SIGABRT). Isolating every timed pair instead would start a worker per adapter in every run
  (the default timeout is 600 s), for a failure only a hang can cause.
- :class:`Isolated` (``--isolate``). One worker process per adapter (:mod:`harness.workers`),
  started at the adapter's first pair and kept for the rest of the run, so its framework is
  imported once per worker, not once per pair. A timeout kills the worker; a worker that dies
  (a segfault, ``os._exit``, SIGKILL, the OOM killer) becomes an error row naming its exit code
  or signal; the adapter's next pair starts a fresh worker. The adapter object is pickled to
  the worker (by reference to its class), so adapters must be importable by module name.

An adapter with ``own_process`` (:attr:`Adapter.own_process`: a framework that fixes its
configuration once per process, at import, from the environment) never runs in the process
that asks for it. Its worker is started with those environment variables, set before the job
is built, and with scratch folders of its own (:func:`harness.scratch.make_folders`: the
framework's config and caches, removed when the worker goes); the parent's environment is not
touched. :class:`InProcess` sends such an adapter's availability check, environment and calls
to one worker per process (:func:`own_workers`), started at its first use and kept until the
executor closes or the process exits, so a pytest session that runs its pairs one
``run_pair`` at a time starts it once; a timeout or a crash there is an error row and the next
pair starts a fresh worker, as with ``--isolate`` (which applies the same environment).
:func:`unavailable_reason` and :func:`run_native` do the same for callers outside a run (the
``adapters`` command, the probe).
"""

from __future__ import annotations

import atexit
import math
import queue
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from harness.adapters.base import Adapter
from harness.data import Inputs, Outputs
from harness.errors import KnownCrashGone, KnownUpstreamCrash, NotApplicable, Unavailable
from harness.params import Canonical
from harness.scratch import make_folders
from harness.spec import Case
from harness.workers import NoReply, Worker

STARTUP_SECONDS = 120.0  # least time a worker gets to start and import its framework

# seconds an adapter call may take unless the user says otherwise (``run --timeout``): a
# failure only a hang can cause
DEFAULT_TIMEOUT = 600.0  # the same as run --timeout's default (harness/cli.py)


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

_BUSY: set[_Lane] = set()  # lanes inside an adapter call now


def abandoned_calls() -> int:
    """How many adapter calls are still running in lane threads (a timed-out pair, or one left
    by Ctrl-C). A process must not go through interpreter shutdown with one: a framework's C++
    code running in a thread while the interpreter is torn down aborts ("terminate called
    without an active exception", SIGABRT); the CLI ends such a process with ``os._exit`` after
    flushing its output (:func:`harness.cli.entry`)."""
    return len(_BUSY)


class _Lane:
    """A daemon thread running one adapter's calls, one at a time."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"rnn-harness-{name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            fn, box, done = self.jobs.get()
            _BUSY.add(self)
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed to the caller, which re-raises it
                box["error"] = exc
            finally:
                _BUSY.discard(self)
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
        self._environments: dict[str, dict] = {}
        self._used_own = False  # an own-process adapter was called: close() stops its worker

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
        if (own := own_process_of(adapter)) is not None:
            return own.unavailable_reason(adapter)
        # in the main thread, untimed: a framework's import may install signal handlers,
        # which only the main thread can do
        return adapter.unavailable_reason()

    def environment(self, adapter: Adapter) -> dict:
        """The adapter's environment (:meth:`Adapter.environment`), here, where it runs."""
        if (own := own_process_of(adapter)) is not None:
            return own.environment(adapter)
        if adapter.name not in self._environments:
            self._environments[adapter.name] = adapter.environment()
        return self._environments[adapter.name]

    def call(self, adapter: Adapter, case: Case, canonical: Canonical, inputs: Inputs, *,
             check_finite: bool = True) -> tuple[Outputs, float]:
        if (own := own_process_of(adapter)) is not None:
            self._used_own = True
            return own.call(adapter, case, canonical, inputs, check_finite=check_finite,
                            timeout=self.timeout)
        return self._run(adapter, f"case {case.name}",
                         lambda: adapter.run(case, canonical, inputs, check_finite=check_finite))

    def close(self) -> None:
        """Stop the own-process workers this executor called (they are started again at the
        next use); a hung lane is a daemon thread and ends with the process."""
        if self._used_own and _OWN is not None:
            _OWN.close()

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Worker processes ---------------------------------------------------------------------------

class _AdapterJob:
    """A worker's job under ``--isolate``: run one adapter's pairs (:mod:`harness.workers`)."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter

    def ready(self) -> tuple:
        self.adapter._availability = False  # check here, in the process that will run it
        try:
            environment = self.adapter.environment()
            reason = environment["reason"]
        except BaseException as exc:
            reason = f"{type(exc).__name__}: {exc}"
            environment = {"available": False, "reason": reason}
        return ("ready", reason, environment)

    def handle(self, message: tuple) -> Iterator[tuple]:
        try:
            if message[0] == "native":  # run_native: the adapter's own tensors, checked
                _, case, native, inputs = message
                start = time.perf_counter()
                out = self.adapter._run(case, native, inputs)
                self.adapter._check(case, out)
                reply: tuple = ("ok", out, time.perf_counter() - start)
            else:
                _, case, canonical, inputs, check_finite = message
                out, seconds = self.adapter.run(case, canonical, inputs,
                                                check_finite=check_finite)
                reply = ("ok", out, seconds)
        except NotApplicable as exc:
            reply = ("raised", "not applicable", type(exc).__name__, str(exc), "")
        except KnownUpstreamCrash as exc:  # the upstream bug travels in the message
            gone = isinstance(exc, KnownCrashGone)
            reply = ("raised", "looks fixed" if gone else "known upstream bug", exc.upstream,
                     str(exc), "")
        except Unavailable as exc:
            reply = ("raised", "unavailable", type(exc).__name__, str(exc), "")
        except BaseException as exc:  # SystemExit too: a worker runs until the parent says stop
            reply = ("raised", "error", type(exc).__name__, str(exc), traceback.format_exc())
        yield reply

    def unsendable(self, reply: tuple, error: Exception) -> tuple:
        return ("raised", "error", type(error).__name__,
                f"cannot send the outputs back: {error}", traceback.format_exc())

    def close(self) -> None:
        """Nothing to release: the adapter's framework goes with the process."""


class Isolated:
    """One worker process per adapter, restarted after a crash or a timeout."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = _limit(timeout)
        self._workers: dict[str, Worker] = {}
        self._reasons: dict[str, str | None] = {}
        self._environments: dict[str, dict] = {}  # as the adapter's worker process saw it
        self._scratch: dict[str, str] = {}  # adapter -> its own-process worker's scratch folder
        self.started = 0  # worker processes started so far

    def _worker(self, adapter: Adapter, timeout: float | None = None) -> Worker:
        w = self._workers.get(adapter.name)
        if w is not None and w.alive():
            return w
        self._workers.pop(adapter.name, None)
        self._drop_scratch(adapter.name)
        try:
            w = Worker(_AdapterJob, (adapter,), name=f"rnn-harness-{adapter.name}",
                       env=self._own_env(adapter))
        except Exception as exc:  # e.g. the adapter does not pickle
            self._drop_scratch(adapter.name)
            raise PairFailure(f"cannot start a worker process for {adapter.name}: "
                              f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None
        self.started += 1
        timeout = self.timeout if timeout is None else timeout
        startup = max(timeout, STARTUP_SECONDS) if timeout else None
        _, reason, environment = self._request(adapter, w, None, startup)
        self._workers[adapter.name] = w
        self._reasons[adapter.name] = reason
        self._environments.setdefault(adapter.name, environment)
        return w

    def _own_env(self, adapter: Adapter) -> dict[str, str] | None:
        """An own-process adapter's worker environment: its variables over scratch folders
        made for this worker (its framework's config and caches stay out of the home)."""
        if adapter.own_process is None:
            return None
        top = tempfile.mkdtemp(prefix=f"rnn-harness-{adapter.name}-")
        self._scratch[adapter.name] = top
        return make_folders(top) | dict(adapter.own_process)

    def _drop_scratch(self, name: str) -> None:
        top = self._scratch.pop(name, None)
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)

    @staticmethod
    def _request(adapter: Adapter, w: Worker, message: tuple | None,
                 timeout: float | None) -> tuple:
        """Send ``message`` (None: only wait) and return the reply; PairFailure on a timeout
        (the worker is killed) or a dead worker."""
        try:
            if message is not None:
                w.send(message)
            return w.receive(timeout)
        except NoReply:
            w.kill()
            raise PairFailure(f"timed out after {_seconds(timeout)}; the worker process was "
                              "killed (it is restarted for the next pair)") from None
        except (EOFError, OSError):
            raise PairFailure(f"the worker process of {adapter.name} {w.how_it_ended()} "
                              "(it is restarted for the next pair)") from None

    def unavailable_reason(self, adapter: Adapter) -> str | None:
        if adapter.name not in self._reasons:
            self._worker(adapter)
        return self._reasons[adapter.name]

    def environment(self, adapter: Adapter) -> dict:
        """The adapter's environment as its worker process took it when it started."""
        if adapter.name not in self._environments:
            self._worker(adapter)
        return self._environments[adapter.name]

    def call(self, adapter: Adapter, case: Case, canonical: Canonical, inputs: Inputs, *,
             check_finite: bool = True, timeout: float | None = None) -> tuple[Outputs, float]:
        """``timeout``: this call's, instead of the executor's (an :class:`InProcess`'s own)."""
        return self._call(adapter, ("run", case, canonical, inputs, check_finite), timeout)

    def run_native(self, adapter: Adapter, case: Case, native: dict, inputs: Inputs
                   ) -> Outputs:
        """``adapter._run`` on its own native tensors, checked (:func:`run_native`)."""
        return self._call(adapter, ("native", case, native, inputs), None)[0]

    def _call(self, adapter: Adapter, message: tuple, timeout: float | None
              ) -> tuple[Outputs, float]:
        timeout = self.timeout if timeout is None else _limit(timeout)
        worker = self._worker(adapter, timeout)
        start = time.perf_counter()
        reply = self._request(adapter, worker, message, timeout)
        if reply[0] == "ok":
            return reply[1], reply[2]
        _, kind, type_name, message, detail = reply
        if kind == "not applicable":
            raise NotApplicable(message)
        if kind == "unavailable":
            raise Unavailable(message)
        if kind == "known upstream bug":
            raise KnownUpstreamCrash(message, type_name)
        if kind == "looks fixed":
            raise KnownCrashGone(message, type_name)
        reason = f"{type_name}: {message}".splitlines()[0][:500] if message else type_name
        raise PairFailure(reason, detail or f"{reason} (after {time.perf_counter() - start:.2f} s)")

    def close(self) -> None:
        for w in self._workers.values():
            w.stop()
        self._workers.clear()
        for name in list(self._scratch):
            self._drop_scratch(name)

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_OWN: Isolated | None = None


def own_workers() -> Isolated:
    """The workers of this process's own-process adapters (:attr:`Adapter.own_process`), one
    per adapter, shared by every :class:`InProcess` here and stopped at exit. Timeouts are
    each call's."""
    global _OWN
    if _OWN is None:
        _OWN = Isolated()
        atexit.register(_OWN.close)
    return _OWN


def own_process_of(adapter: Adapter) -> Isolated | None:
    """Where ``adapter`` runs outside ``--isolate``: the shared workers of the own-process
    adapters (:func:`own_workers`) for a framework that fixes its configuration at import
    (:attr:`Adapter.own_process`), else None (this process). The one place that decides it,
    for the run, probe and doctor alike; under ``--isolate`` every adapter has a worker."""
    return own_workers() if adapter.own_process is not None else None


def unavailable_reason(adapter: Adapter) -> str | None:
    """Why ``adapter`` cannot run, asked where it runs: here, or in its own process. A worker
    that cannot start or answer is a reason too."""
    if (own := own_process_of(adapter)) is None:
        return adapter.unavailable_reason()
    try:
        return own.unavailable_reason(adapter)
    except PairFailure as exc:
        return str(exc)


def run_native(adapter: Adapter, case: Case, native: dict, inputs: Inputs) -> Outputs:
    """``adapter._run`` on native tensors (the probe's runs), checked as :meth:`Adapter.run`
    checks them, here or in the adapter's own process."""
    if (own := own_process_of(adapter)) is None:
        out = adapter._run(case, native, inputs)
        adapter._check(case, out)
        return out
    return own.run_native(adapter, case, native, inputs)


Executor = InProcess | Isolated


def executor(timeout: float | None = None, isolate: bool = False) -> Executor:
    """The executor for ``run``: worker processes with ``isolate``, else this process."""
    return Isolated(timeout) if isolate else InProcess(timeout)
