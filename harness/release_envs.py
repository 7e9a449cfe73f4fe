"""An environment per release of one package, for ``rnn-harness bisect``: a virtual environment
that sees the installed environment (``--system-site-packages``) with the release installed into
it by pip's resolver (``python -m pip install NAME==VERSION`` run by the environment's own
interpreter), so the release shadows the installed one and every other package stays as it is.

Environments are kept in a cache folder, one per interpreter, package and release, and reused
by later runs; one whose install did not finish is made again. Another interpreter than this
one (``bisect --python``, say a newer Python a release requires) sees its own site packages,
not this environment's: rnn-harness's own requirements are installed with the release there.
pip is the one from the installed environment where it has one (seen through the system site
packages: a new environment then costs a tenth of a second, not pip's own install); pip never
uninstalls what lies outside the environment it installs into, so the installed environment is
left as it is.

pip's own configuration applies (``pip.conf``, ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, a
constraints file): the index a bisect asks is the one ``pip install`` would.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
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


@dataclass(frozen=True)
class Interpreter:
    """The Python the release environments are made from."""

    path: Path  # its sys.executable
    version: str  # e.g. 3.12.1

    @property
    def own(self) -> bool:
        """Whether it is the interpreter running rnn-harness now."""
        return self.path == Path(sys.executable).resolve()

    @property
    def tag(self) -> str:
        """Its folder in the cache: ``py311`` for this one, ``py312-`` and a digest of its path
        for another (two Pythons 3.12 have different site packages)."""
        tag = "py" + "".join(self.version.split(".")[:2])
        return tag if self.own else f"{tag}-{hashlib.sha256(bytes(self.path)).hexdigest()[:8]}"


def this_interpreter() -> Interpreter:
    return Interpreter(Path(sys.executable).resolve(), sys.version.split()[0])


def interpreter(name: str) -> Interpreter:
    """``--python``: a path or a command on PATH (``python3.12``) of a Python 3.11 or newer,
    asked for its own executable and version; HarnessError (exit 2) otherwise."""
    found = shutil.which(name) if os.sep not in name else (name if Path(name).is_file() else None)
    if found is None:
        raise HarnessError(f"no such interpreter: {name[:200]!r}", field="--python")
    code = "import sys; print(sys.executable); print(sys.version.split()[0])"
    try:
        done = subprocess.run([found, "-c", code], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"{name[:200]!r} does not run as a Python: "
                           f"{printable(str(exc)[:200])}", field="--python") from None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        # a traceback's reason is its last line; a launcher's (pyenv's shim), its first
        why = said[-1] if said and said[0].startswith("Traceback") else said[0] if said else ""
        raise HarnessError(f"{name[:200]!r} does not run as a Python (exit {done.returncode}"
                           + (f": {printable(why[:200])})" if why else ")"),
                           field="--python")
    try:
        too_old = Version(lines[1]) < Version("3.11")
    except InvalidVersion:
        too_old = True
    if too_old:
        raise HarnessError(f"rnn-harness needs Python 3.11 or newer; {name[:200]!r} is "
                           f"{printable(lines[1][:40])}", field="--python")
    return Interpreter(Path(lines[0]).resolve(), lines[1])


def _pip(python: str | Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", *args, "--disable-pip-version-check",
                           "--no-input"], capture_output=True, text=True, timeout=timeout,
                          check=False)


def index_versions(package: str, python: Interpreter | None = None) -> list[str]:
    """The releases of ``package`` the index offers for ``python`` (this interpreter by
    default; ``pip index versions``), newest first; HarnessError when the index knows none."""
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", package):
        raise HarnessError(f"expected a package name, got {package[:60]!r}", field="--package")
    try:
        done = _pip((python or this_interpreter()).path, "index", "versions", package,
                    timeout=300)
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
    base: Interpreter | None = None  # the interpreter it is made from (None: this one)

    @property
    def python(self) -> Path:
        return self.folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def env_folder(cache: Path, package: str, version: str,
               python: Interpreter | None = None) -> Path:
    """The cache's folder for ``package`` at ``version`` under ``python`` (this interpreter by
    default): a release installed for Python 3.11 is no use to 3.12."""
    tag = (python or this_interpreter()).tag
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


def prepare(cache: Path, package: str, version: str,
            python: Interpreter | None = None) -> ReleaseEnv:
    """The environment of ``package`` at ``version`` made from ``python`` (this interpreter by
    default), from the cache or made now; InstallError when pip cannot install it or another
    version is imported afterwards (nothing is kept of it then, so the next bisect tries
    again)."""
    python = python or this_interpreter()
    env = ReleaseEnv(package, version, env_folder(cache, package, version, python), python)
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
    base = env.base or this_interpreter()
    if base.own:
        # pip from the installed environment where it has one: seen through the system site
        # packages
        with_pip = importlib.util.find_spec("pip") is None
        venv.EnvBuilder(system_site_packages=True, with_pip=with_pip,
                        symlinks=os.name != "nt").create(env.folder)
        own: list[str] = []
    else:
        _venv(base, env.folder)
        own = own_requirements()
    try:
        done = _pip(env.python, "install", f"{package}=={version}", *own,
                    timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise InstallError(f"pip install {package}=={version} still running after "
                           f"{INSTALL_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        output = done.stdout + done.stderr
        needs = re.search(rf"(?<![\w.]){re.escape(version)} Requires-Python ([^;\s]+)", output)
        if needs:  # what the index says of this release, not its list of every other one
            raise InstallError(f"{package} {version} requires Python {needs.group(1)}; this is "
                               f"Python {base.version}")
        raise InstallError(f"pip install {package}=={version}: {_last_error(output)}")
    found = installed_version(env.python, package)
    if found is None or not same_release(found, version):
        raise InstallError(f"pip installed {package}=={version}, but the environment imports "
                           f"{found or 'no ' + package}")
    return found


def _venv(base: Interpreter, folder: Path) -> None:
    """A virtual environment made by another interpreter (``python -m venv``), seeing its site
    packages, with pip of its own where that interpreter has none."""
    has_pip = subprocess.run([str(base.path), "-c", "import pip"], capture_output=True,
                             timeout=120, check=False).returncode == 0
    done = subprocess.run([str(base.path), "-m", "venv", "--system-site-packages",
                           *(["--without-pip"] if has_pip else []), str(folder)],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise InstallError(f"{base.path} -m venv: {_last_error(done.stdout + done.stderr)}")


def own_requirements() -> list[str]:
    """rnn-harness's own requirements (its extras left out), as its installed metadata lists
    them: what an environment of another interpreter needs to import it."""
    try:
        listed = importlib.metadata.requires("rnn-harness") or []
    except importlib.metadata.PackageNotFoundError:
        raise InstallError("rnn-harness is not installed here (pip install -e .), so its "
                           "requirements are not known to install for another Python") from None
    return [r.split(";")[0].strip() for r in listed if "extra ==" not in r]
