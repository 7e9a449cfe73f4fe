"""``rnn-harness bisect``: node ids, the table and the first change, exit codes, and the
environment of a release, made by pip from a stand-in index of tiny wheels built here (a folder
of wheels, ``--find-links DIR --no-index``): the default run needs no network. The real bisect
(flax from the package index) is marked ``roads``."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

from harness import bisect, release_envs
from harness.bisect import Change, PairOutcome, ReleaseOutcome
from harness.release_envs import InstallError, ReleaseEnv
from tests.support.cli import cli, one_line

ROOT = Path(__file__).resolve().parents[2]
GRU = ROOT / "cases" / "gru-reset.yaml"
STANDIN = "rnnh-standin"


def _wheel(folder: Path, version: str) -> None:
    """A pure-Python wheel of the stand-in package at ``version`` (a module holding it)."""
    module, info = STANDIN.replace("-", "_"), f"{STANDIN.replace('-', '_')}-{version}.dist-info"
    files = {f"{module}/__init__.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {STANDIN}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    with zipfile.ZipFile(folder / f"{module}-{version}-py3-none-any.whl", "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
        whl.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"]))


@pytest.fixture
def standin_index(tmp_path, monkeypatch) -> Path:
    """pip sees only a folder with the stand-in at 1.0 and 2.0: no configuration file, no
    index, no cache."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        _wheel(wheels, version)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    return wheels


# Node ids and bad input ---------------------------------------------------------------------

def test_node_ids_name_a_file_an_optional_case_and_an_adapter():
    whole = bisect.parse_node(f"{GRU}::flax-nnx")
    assert (whole.case, whole.adapter) == (None, "flax-nnx")
    assert whole.cases == ("gru-reset_after", "gru-no_reset_after")
    one = bisect.parse_node(f"{GRU}::gru-reset_after::flax-nnx")
    assert (one.file, one.case, one.cases) == (GRU, "gru-reset_after", ("gru-reset_after",))


@pytest.mark.parametrize(("node_id", "words"), [
    ("cases/gru-reset.yaml", ["NODE_ID", "expected FILE[::CASE]::ADAPTER"]),
    ("a::b::c::d", ["expected FILE[::CASE]::ADAPTER"]),
    (f"{GRU}::::flax-nnx", ["expected FILE[::CASE]::ADAPTER"]),
    (f"{GRU}::flax-nxx", ["unknown adapter 'flax-nxx'", "did you mean 'flax-nnx'"]),
    (f"{GRU}::gru-reset-after::flax-nnx", ["no case 'gru-reset-after'",
                                           "did you mean 'gru-reset_after'"]),
    ("no/such.yaml::flax-nnx", ["no/such.yaml", "case file not found"]),
    (f"{ROOT / 'pyproject.toml'}::flax-nnx", ["pyproject.toml"]),
])
def test_a_node_id_not_of_the_form_is_one_line_and_exit_2(node_id, words, capsys):
    one_line(*cli(["bisect", node_id, "--package", "flax", "--versions", "1.0"], capsys), *words)


@pytest.mark.parametrize(("extra", "words"), [
    (["--versions", "1.0,,2.0"], ["--versions", "separated by commas"]),
    (["--versions", "1.x"], ["--versions", "expected a release such as"]),
    (["--versions", "1.0,1.0"], ["--versions", "named twice"]),
    (["--limit", "0"], ["--limit", "expected a number >= 1"]),
])
def test_bad_releases_are_one_line_and_exit_2(extra, words, capsys):
    one_line(*cli(["bisect", f"{GRU}::flax-nnx", "--package", "flax", *extra], capsys), *words)


@pytest.mark.parametrize(("python", "words"), [
    ("/no/such/python3.12", ["--python", "no such interpreter: '/no/such/python3.12'"]),
    ("rnnh-no-such-python", ["--python", "no such interpreter"]),
    (str(ROOT / "pyproject.toml"), ["--python", "pyproject.toml", "does not run as a Python"]),
])
def test_an_interpreter_that_is_not_there_is_one_line_and_exit_2(python, words, tmp_path,
                                                                  capsys):
    one_line(*cli(["bisect", f"{GRU}::flax-nnx", "--package", "flax", "--versions", "1.0",
                   "--python", python, "--cache", str(tmp_path / "cache")], capsys), *words)
    assert not (tmp_path / "cache").exists()


def test_an_interpreter_that_fails_says_why_in_one_line(tmp_path, capsys):
    """A launcher that cannot find its Python (as pyenv's shim says, on several lines): its
    first line, exit 2; a Python too old for rnn-harness: named."""
    shim = tmp_path / "python3.99"
    shim.write_text("#!/bin/sh\necho 'shim: python3.99: command not found' >&2\necho >&2\n"
                    "echo 'see the shim help' >&2\nexit 127\n")
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\necho /opt/python3.9; echo 3.9.18\n")
    for script in (shim, old):
        script.chmod(0o755)
    one_line(*cli(["bisect", f"{GRU}::flax-nnx", "--package", "flax", "--python", str(shim)],
                  capsys), "--python", "does not run as a Python (exit 127: shim: python3.99: "
                           "command not found)")
    one_line(*cli(["bisect", f"{GRU}::flax-nnx", "--package", "flax", "--python", str(old)],
                  capsys), "--python", "needs Python 3.11 or newer", "is 3.9.18")


def test_another_interpreter_gets_environments_of_its_own():
    """This interpreter's environments are ``py311/...``; another's are keyed by its version
    and its path (two Pythons 3.12 see different site packages)."""
    own = release_envs.interpreter(sys.executable)
    assert own == release_envs.this_interpreter() and own.own
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    assert release_envs.env_folder(Path("c"), "flax", "0.12.8") == Path("c", tag, "flax-0.12.8")
    other = release_envs.Interpreter(Path("/opt/python3.12/bin/python3.12"), "3.12.1")
    again = release_envs.Interpreter(Path("/usr/bin/python3.12"), "3.12.1")
    folders = {release_envs.env_folder(Path("c"), "flax", "0.12.8", i).parent.name
               for i in (other, again)}
    assert len(folders) == 2 and all(f.startswith("py312-") for f in folders), folders


def test_a_package_the_index_does_not_know_is_exit_2(standin_index, tmp_path, capsys):
    one_line(*cli(["bisect", f"{GRU}::flax-nnx", "--package", "rnnh-no-such",
                   "--cache", str(tmp_path / "cache")], capsys),
             "--package", "the package index has no release of rnnh-no-such")
    assert not (tmp_path / "cache").exists()


# The table and the first change ---------------------------------------------------------------

def _release(version: str, *verdicts: tuple[str, str]) -> ReleaseOutcome:
    return ReleaseOutcome(version, tuple(PairOutcome(c, v) for c, v in verdicts))


def test_the_first_change_is_per_case_and_passes_over_releases_that_did_not_run():
    outcomes = [_release("0.1", ("a", "DIVERGED"), ("b", "pass")),
                ReleaseOutcome("0.2", problem="no wheel"),
                _release("0.3", ("a", "DIVERGED"), ("b", "DIVERGED")),
                _release("0.4", ("a", "pass"), ("b", "pass"))]
    assert bisect.first_change(outcomes) == [Change("b", "0.1", "0.3", "pass", "DIVERGED"),
                                             Change("a", "0.3", "0.4", "DIVERGED", "pass")]
    same = [_release("1.0", ("a", "pass")), _release("2.0", ("a", "pass"))]
    assert bisect.first_change(same) == []
    assert bisect.change_lines(same, "pkg") == [
        "first change: none: the same verdict on every release of pkg that ran (1.0 to 2.0)"]
    assert bisect.change_lines(outcomes[1:2], "pkg") == [
        "first change: none to tell: 0 release(s) of pkg ran"]


def test_the_table_has_a_row_per_release_oldest_first(tmp_path):
    node = bisect.parse_node(f"{GRU}::gru-reset_after::flax-nnx")
    ran = {"0.12.8": PairOutcome("gru-reset_after", "known upstream bug",
                                 "1.24e-01 (1.16e+04x tol)", "y L0 d0 t=0"),
           "0.12.10": PairOutcome("gru-reset_after", "pass", "3.0e-07 (0.03x tol)")}

    def run(env: ReleaseEnv, node) -> ReleaseOutcome:
        return ReleaseOutcome(env.version, (ran[env.version],))

    def prepare(version: str) -> ReleaseEnv:
        if version == "0.12.9":
            raise InstallError("flax 0.12.9 requires Python >=3.12")
        return ReleaseEnv("flax", version, tmp_path)

    seen = []
    outcomes = bisect.bisect(node, "flax", ["0.12.10", "0.12.8", "0.12.9"], prepare, run,
                             progress=seen.append)
    assert [o.version for o in outcomes] == ["0.12.8", "0.12.9", "0.12.10"]  # as releases sort
    assert seen[:2] == ["flax 0.12.8: installing ...", "flax 0.12.8: running flax-nnx ..."]
    lines = bisect.table(outcomes, "flax").splitlines()
    assert lines[0].split() == ["flax", "verdict", "worst", "error", "first", "diverging", "step"]
    assert [line.split()[0] for line in lines[2:]] == ["0.12.8", "0.12.9", "0.12.10"]
    assert " ".join(lines[2].split()) == \
        "0.12.8 known upstream bug 1.24e-01 (1.16e+04x tol) y L0 d0 t=0"
    assert "not installed or run" in lines[3]
    assert lines[4].split()[1:] == ["pass", "3.0e-07", "(0.03x", "tol)", "-"]
    assert bisect.change_lines(outcomes, "flax") == [
        "first change: flax 0.12.10 (gru-reset_after: known upstream bug on 0.12.8, pass on "
        "0.12.10)"]
    assert bisect.problem_lines(outcomes, "flax") == [
        "flax 0.12.9: could not be installed or run: flax 0.12.9 requires Python >=3.12"]


def test_record_prints_the_registry_fields_to_paste():
    """``--record``: a Bisected per case that ran somewhere, the releases that showed the known
    bug, and the first that looks fixed after the last of them."""
    node = bisect.parse_node("cases/gru-reset.yaml::flax-nnx")
    outcomes = [_release("0.12.7", ("gru-reset_after", "unavailable"),
                         ("gru-no_reset_after", "not applicable")),
                _release("0.12.8", ("gru-reset_after", "known upstream bug"),
                         ("gru-no_reset_after", "not applicable")),
                ReleaseOutcome("0.12.9", problem="flax 0.12.9 requires Python >=3.12"),
                _release("0.12.10", ("gru-reset_after", "known upstream bug"),
                         ("gru-no_reset_after", "not applicable")),
                _release("0.12.13", ("gru-reset_after", "looks fixed"),
                         ("gru-no_reset_after", "not applicable"))]
    lines = bisect.record_lines(outcomes, node, "flax", "3.12")
    assert lines == [
        "to record in harness/known_bugs.py (the entry of flax-nnx: google/flax#5594):",
        "    Bisected('cases/gru-reset.yaml::gru-reset_after::flax-nnx', 'flax', '3.12', "
        "{'0.12.7': 'unavailable', '0.12.8': 'known upstream bug', '0.12.9': 'not installed "
        "or run', '0.12.10': 'known upstream bug', '0.12.13': 'looks fixed'}),",
        "    seen_on: {'flax': '0.12.8'}, {'flax': '0.12.10'}",
        "    fixed_in: {'flax': '0.12.13'}"]
    still = bisect.record_lines(outcomes[:4], node, "flax", "3.12")
    assert still[-1] == "    fixed_in: none: no release after the last that showed it looks fixed"


# Exit codes, through the command line with the runs stood in for ---------------------------

@pytest.fixture
def stood_in(monkeypatch, tmp_path):
    """The command with each release's install and run replaced: ``broken`` names releases
    whose install fails. Returns the versions prepared."""
    prepared: list[str] = []
    broken: set[str] = set()

    def prepare(cache, package, version, python=None):
        prepared.append(version)
        if version in broken:
            raise InstallError(f"pip install {package}=={version}: no wheel for this platform")
        return ReleaseEnv(package, version, tmp_path)

    def run(env, node):
        verdict = "pass" if env.version >= "3" else "DIVERGED"
        return ReleaseOutcome(env.version, (PairOutcome(node.cases[0], verdict),))

    monkeypatch.setattr(release_envs, "prepare", prepare)
    monkeypatch.setattr(release_envs, "index_versions",
                        lambda package, python=None: ["5.0", "4.0", "3.0", "2.0", "1.0"])
    monkeypatch.setattr(bisect, "run_release", run)
    return prepared, broken


def bisect_main(extra: list[str], capsys,
                node_id: str = f"{GRU}::gru-reset_after::flax-nnx") -> tuple[int, list[str],
                                                                             list[str]]:
    """The command's exit code, standard output and error lines."""
    from harness.cli import main

    code = main(["bisect", node_id, *extra])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def test_exit_0_when_every_release_ran_and_the_newest_are_taken_up_to_the_limit(stood_in,
                                                                                   capsys):
    prepared, _ = stood_in
    code, out, err = bisect_main(["--package", "flax", "--limit", "3"], capsys)
    assert (code, err) == (0, [])
    assert prepared == ["3.0", "4.0", "5.0"]
    assert [line.split()[:2] for line in out[2:5]] == [["3.0", "pass"], ["4.0", "pass"],
                                                       ["5.0", "pass"]]
    code, out, err = bisect_main(["--package", "flax", "--versions", "1.0,2.0,3.0"], capsys)
    assert (code, err) == (0, [])
    assert out[-1] == "first change: flax 3.0 (gru-reset_after: DIVERGED on 2.0, pass on 3.0)"
    # --record: the registry's fields follow, for this interpreter's Python
    code, out, err = bisect_main(["--package", "flax", "--versions", "1.0,3.0", "--record",
                                  "--python", sys.executable], capsys)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (code, err) == (0, [])
    assert out[-1] == (f"    Bisected('{GRU.as_posix()}::gru-reset_after::flax-nnx', 'flax', "
                       f"'{python}', {{'1.0': 'DIVERGED', '3.0': 'pass'}}),")


def test_exit_1_names_each_release_that_could_not_be_installed(stood_in, capsys):
    _, broken = stood_in
    broken.add("2.0")
    code, out, err = bisect_main(["--package", "flax", "--versions", "1.0,2.0,3.0"], capsys)
    assert code == 1
    assert err == ["rnn-harness: flax 2.0: could not be installed or run: pip install flax==2.0: "
                   "no wheel for this platform"]
    assert len(out) == 2 + 3 + 1  # heading, rule, a row per release, the first change
    assert out[-1] == "first change: flax 3.0 (gru-reset_after: DIVERGED on 1.0, pass on 3.0)"


# The environment of a release, from the stand-in index --------------------------------------

def test_a_release_gets_an_environment_of_its_own_cached_between_runs(standin_index, tmp_path,
                                                                      monkeypatch):
    assert release_envs.index_versions(STANDIN) == ["2.0", "1.0"]
    cache = tmp_path / "cache"
    env = release_envs.prepare(cache, STANDIN, "1.0")
    assert env.folder.parent.parent == cache
    assert release_envs.installed_version(env.python, STANDIN) == "1.0"
    # the installed environment is seen (the harness's own dependencies), and left as it was
    assert release_envs.installed_version(env.python, "pandas") is not None
    assert release_envs.installed_version(sys.executable, STANDIN) is None

    def no_pip(*args, **kwargs):
        raise AssertionError("pip was asked again for a cached release")

    monkeypatch.setattr(release_envs, "_pip", no_pip)
    assert release_envs.prepare(cache, STANDIN, "1.0") == env


def test_a_release_the_index_lacks_is_an_install_error_and_nothing_is_kept(standin_index,
                                                                           tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(InstallError, match=r"pip install rnnh-standin==3\.0: .*No matching "
                                           r"distribution found for rnnh-standin==3\.0"):
        release_envs.prepare(cache, STANDIN, "3.0")
    assert not release_envs.env_folder(cache, STANDIN, "3.0").exists()


def test_same_release_takes_a_local_label_as_pip_does():
    assert release_envs.same_release("2.13.0+cpu", "2.13.0")
    assert release_envs.same_release("0.12.8", "0.12.8.0")
    assert not release_envs.same_release("2.13.0+cpu", "2.13.0+cu128")
    assert not release_envs.same_release("0.12.7", "0.12.8")


# The real runs: an environment per release, the pair run by its interpreter ----------------

@pytest.mark.roads
def test_the_stand_in_releases_run_the_pair_with_this_harness(standin_index, tmp_path, capsys):
    code, out, err = bisect_main(["--package", STANDIN, "--cache", str(tmp_path / "cache")],
                                 capsys, node_id=f"{GRU}::gru-reset_after::noise-floor")
    assert (code, err) == (0, [])
    assert [line.split()[:2] for line in out[2:4]] == [["1.0", "pass"], ["2.0", "pass"]]
    assert out[-1] == f"first change: none: the same verdict on every release of {STANDIN} " \
                      "that ran (1.0 to 2.0)"


@pytest.mark.roads
def test_flax_5594_on_the_flax_releases_from_the_index(tmp_path, capsys):
    """google/flax#5594 (nnx.GRUCell has no b_hn) on 0.12.8, the lower bound, and 0.12.12,
    the newest: 0.12.9 and later require Python >= 3.12, so on an older Python 0.12.12 is
    named as a release that could not be installed (exit 1)."""
    code, out, err = bisect_main(["--package", "flax", "--versions", "0.12.8,0.12.12",
                                  "--cache", str(tmp_path / "cache")], capsys,
                                 node_id=f"{GRU}::flax-nnx")
    assert [line.split()[0] for line in out[2:]][:3] == ["0.12.8", "0.12.8", "0.12.12"]
    known = [line for line in out if line.startswith("0.12.8") and "gru-reset_after" in line]
    assert len(known) == 1 and "known upstream bug" in known[0] and "y L0 d0 t=0" in known[0]
    if sys.version_info >= (3, 12):
        assert (code, err) == (0, [])
    else:
        assert code == 1
        assert err == ["rnn-harness: flax 0.12.12: could not be installed or run: flax 0.12.12 "
                       "requires Python >=3.12; this is Python " + sys.version.split()[0]]
