"""XLA_FLAGS, checked before a JAX adapter's first computation.

XLA reads ``XLA_FLAGS`` when JAX first starts a backend (the first computation, ``jax.devices``,
``jax.default_backend``) and ends the process on a flag it does not know, with one fatal log
line ("Unknown flag in XLA_FLAGS: --x") and no Python exception: a run would end with no
report, and an own-process worker would die without a word on why. So where ``XLA_FLAGS`` is
set, a throw-away interpreter starts a JAX CPU backend with it first (once per process and
value; about two seconds); when that one dies, the JAX adapters' pairs are error rows naming
XLA_FLAGS and XLA's line, and the run goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys

from harness.errors import printable

_PROBE = ("import os; os.environ.setdefault('JAX_PLATFORMS', 'cpu'); "
          "import jax.numpy as jnp; (jnp.ones(1) + 1).block_until_ready()")
_CHECKED: dict[str, str | None] = {}  # XLA_FLAGS value -> why XLA refuses it (None: accepted)


class XlaFlagsError(RuntimeError):
    """XLA would end this process on the XLA_FLAGS it was given."""


def check_xla_flags() -> None:
    """Raise :class:`XlaFlagsError` when a JAX backend started with this process's
    ``XLA_FLAGS`` ends its process; nothing when the variable is unset or empty."""
    flags = os.environ.get("XLA_FLAGS", "")
    if not flags.strip():
        return
    if flags not in _CHECKED:
        _CHECKED[flags] = _refused(flags)
    why = _CHECKED[flags]
    if why is not None:
        raise XlaFlagsError(f"XLA_FLAGS={flags[:200]!r} is refused by XLA ({why}); a JAX "
                            "process would end at its first computation: fix or unset XLA_FLAGS")


def _refused(flags: str) -> str | None:
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                              timeout=300, env=dict(os.environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"a JAX process with them could not be checked: {type(exc).__name__}"
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    said = next((line for line in lines if "XLA_FLAGS" in line), lines[-1] if lines else "")
    said = said.split("] ", 1)[-1]  # XLA's log prefix: level, time, thread, source line
    return printable(f"a JAX process with them ended with exit code {proc.returncode}: "
                     f"{said[:300]}")
