"""An environment per release of one package, for ``rnn-harness bisect``: a virtual environment
that sees the installed environment (``--system-site-packages``) with the release installed into
it by pip's resolver (``python -m pip install NAME==VERSION`` run by the environment's own
interpreter), so the release shadows the installed one and every other package stays as it is.

Environments are kept in a cache folder, one per interpreter, package and release, and reused
by later runs; one whose install did not finish is made again. pip is the one from the
installed environment where it has one (seen through the system site packages: a new
environment then costs a tenth of a second, not pip's own install); pip never uninstalls what
lies outside the environment it installs into, so the installed environment is left as it is.

pip's own configuration applies (``pip.conf``, ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, a
constraints file): the index a bisect asks is the one ``pip install`` would.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.errors import HarnessError, printable

READY = ".rnn-harness-ready"  # written last: an environment without it is made again
INSTALL_TIMEOUT = 3600.0  # seconds: a CUDA build of torch is several GB


class InstallError(Exception):
    """A release that pip could not install (or that is not the one imported afterwards);
    ``str(err)`` is one line saying why, pip's own words where it gave them."""


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/rnn-harness/bisect``, else ``~/.cache/rnn-harness/bisect``. Read when
    the command line is parsed, before the command's scratch folder replaces XDG_CACHE_HOME."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rnn-harness" / "bisect"


def parse_version(text: str, field: str = "--versions") -> Version:
    """A release as PEP 440 reads it, or HarnessError naming the field."""
    try:
        return Version(text)
    except InvalidVersion:
        raise HarnessError(f"expected a release such as 0.12.8, got {text[:40]!r}",
                           field=field) from None


def same_release(found: str, wanted: str) -> bool:
    """Whether the version ``found`` installed is the release ``wanted``: equal as PEP 440 reads
    them, a local label (``2.13.0+cpu``) matching a request without one, as ``pip install
    torch==2.13.0`` takes it."""
    try:
        f, w = Version(found), Version(wanted)
    except InvalidVersion:
        return found == wanted
    return f == w or (not w.local and f.public == w.public)


def _last_error(output: str) -> str:
    """pip's reason for a failure: its ERROR lines, else its last line, as one line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    # "(from versions: ...)" lists every release: the reason is before it
    errors = [re.sub(r" \(from versions: [^)]*\)", "", line) for line in errors
              if not line.startswith("Ignored the following versions")] or errors
    text = "; ".join(errors) if errors else (lines[-1] if lines else "no output")
    return printable(text[:400])


def _pip(python: str | Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", *args, "--disable-pip-version-check",
                           "--no-input"], capture_output=True, text=True, timeout=timeout,
                          check=False)


def index_versions(package: str) -> list[str]:
    """The releases of ``package`` the index offers for this interpreter (``pip index
    versions``), newest first; HarnessError when the index knows none."""
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", package):
        raise HarnessError(f"expected a package name, got {package[:60]!r}", field="--package")
    try:
        done = _pip(sys.executable, "index", "versions", package, timeout=300)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"the package index did not answer in 300 s about {package}",
                           field="--package") from None
    found = re.search(r"^Available versions: (.*)$", done.stdout, re.M)
    if done.returncode != 0 or not found:
        raise HarnessError(f"the package index has no release of {package} that installs "
                           f"here ({_last_error(done.stdout + done.stderr)})", field="--package")
    versions = [v.strip() for v in found.group(1).split(",") if v.strip()]
    return sorted(versions, key=Version, reverse=True)


@dataclass(frozen=True)
class ReleaseEnv:
    """A virtual environment with one release of one package installed."""

    package: str
    version: str
    folder: Path

    @property
    def python(self) -> Path:
        return self.folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def env_folder(cache: Path, package: str, version: str) -> Path:
    """The cache's folder for ``package`` at ``version`` under this interpreter: a release
    installed for Python 3.11 is no use to 3.12."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(cache) / tag / f"{canonicalize_name(package)}-{version}"


def installed_version(python: str | Path, package: str) -> str | None:
    """The version of ``package`` that ``python`` imports, or None."""
    code = ("import importlib.metadata as m, sys\n"
            "try:\n    print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError:\n    pass\n")
    done = subprocess.run([str(python), "-c", code, package], capture_output=True, text=True,
                          timeout=120, check=False)
    return done.stdout.strip() or None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Held while ``folder`` is made or checked: two bisects of one release wait for each other
    rather than one removing what the other installs."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "a") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; one bisect at a time
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare(cache: Path, package: str, version: str) -> ReleaseEnv:
    """The environment of ``package`` at ``version``, from the cache or made now; InstallError
    when pip cannot install it or another version is imported afterwards (nothing is kept of
    it then, so the next bisect tries again)."""
    env = ReleaseEnv(package, version, env_folder(cache, package, version))
    with _locked(env.folder):
        if (env.folder / READY).is_file():
            return env
        if env.folder.exists():  # an install that did not finish (interrupted)
            shutil.rmtree(env.folder)
        try:
            found = _install(env)
        except BaseException:
            shutil.rmtree(env.folder, ignore_errors=True)
            raise
        (env.folder / READY).write_text(f"{package}=={found}\n", encoding="utf-8")
    return env


def _install(env: ReleaseEnv) -> str:
    """Make ``env``'s folder and install its release; the version imported there."""
    package, version = env.package, env.version
    # pip from the installed environment where it has one: seen through the system site packages
    with_pip = importlib.util.find_spec("pip") is None
    venv.EnvBuilder(system_site_packages=True, with_pip=with_pip,
                    symlinks=os.name != "nt").create(env.folder)
    try:
        done = _pip(env.python, "install", f"{package}=={version}", timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise InstallError(f"pip install {package}=={version} still running after "
                           f"{INSTALL_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        output = done.stdout + done.stderr
        needs = re.search(rf"(?<![\w.]){re.escape(version)} Requires-Python ([^;\s]+)", output)
        if needs:  # what the index says of this release, not its list of every other one
            raise InstallError(f"{package} {version} requires Python {needs.group(1)}; this is "
                               f"Python {sys.version.split()[0]}")
        raise InstallError(f"pip install {package}=={version}: {_last_error(output)}")
    found = installed_version(env.python, package)
    if found is None or not same_release(found, version):
        raise InstallError(f"pip installed {package}=={version}, but the environment imports "
                           f"{found or 'no ' + package}")
    return found
