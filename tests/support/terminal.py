"""A command run as a user runs it at a terminal: stderr on a pseudo-terminal (so the harness
draws its progress bar and keeps attention lines above it), stdout a pipe."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKTREE = Path(__file__).resolve().parents[2]


def harness_on_a_terminal(args: list[str], cwd: Path, timeout: float = 300.0
                          ) -> tuple[int, str, str]:
    """``python -m harness ARGS`` with stderr on a pty: (exit code, stdout, what the terminal
    showed). The pty is read until the command closes it, so a full pty buffer cannot stall it;
    stdout goes to a file for the same reason."""
    main, side = pty.openpty()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(WORKTREE), os.environ.get("PYTHONPATH", "")) if p))
    stdout = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=stdout, stderr=side)
    os.close(side)
    shown = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            if not select.select([main], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError(f"harness {' '.join(args)} ran past {timeout:g} s")
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: every holder of the pty's other side has closed it
                break
            if not chunk:
                break
            shown += chunk
        code = proc.wait(max(1.0, deadline - time.monotonic()))
        stdout.seek(0)
        out = stdout.read()
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stdout.close()
    return code, out.decode(errors="replace"), shown.decode(errors="replace")
