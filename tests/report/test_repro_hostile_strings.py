"""Every string a generated file carries goes in as data (harness/repro/quote.py), never as
source text or markup: each script a reproducer or the doctor can write, rendered with hostile
strings (quotes, triple quotes, backslashes, ``\\N``, newlines, U+2028, NUL) in every name,
reason, version, path and recorded value, compiles to the same code as with plain strings; the
cheap ones run; README.md gains no heading, link or HTML.

The scripts are enumerated from the renderers' registries (harness.handed.FAMILIES,
harness.repro.render.RENDERERS and CHOICES), so a template added or moved is rendered here too.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import itertools
import json
import re
import sys
import types

import numpy as np
import pytest
from support.repro_run import run_repro

from harness import data, params
from harness.cli import main
from harness.doctor import Doctor
from harness.handed import FAMILIES, Handed
from harness.judges.verdict import ScriptQuestion
from harness.layouts import get_layout
from harness.mistakes import catalogue
from harness.npz import save_npz
from harness.prepare import prepare
from harness.repro import render
from harness.repro.doctor_script import write_doctor_repro
from harness.repro.record import COST_FAMILIES, ReproRecord, script_spec
from harness.repro.write import readme, write_one
from harness.spec import Case

PAYLOAD = 'x"""; __import__("pathlib").Path.home().joinpath("CANARY").touch(); """y'
HOSTILE = (PAYLOAD + " '''; PWNED(); ''' \\N{oops} a\\ \"\n# PWNED heading\r\n\u2028PWNED = 1"
           "\u2029\x00\t`code` [link](javascript:x) *em* <b>|\\")
PLAIN = "plain"
HEADINGS = ["## Reproduce", "## What the harness found", "## Versions"]  # below the title
CASE = Case(name="hostile", cell="lstm", bidirectional=True, input_size=2, hidden_size=3,
            batch=2, seq_len=3, seed=3)


def _code(text: str) -> tuple:
    """What the script runs, whatever its strings hold: its bytecode, names and constants but
    the strings, in every function."""
    def const(c: object) -> object:
        return (of(c) if isinstance(c, types.CodeType) else str if isinstance(c, str) else
                tuple(const(x) for x in c) if isinstance(c, (tuple, frozenset)) else c)

    def of(code: types.CodeType) -> tuple:
        return code.co_code, code.co_names, code.co_varnames, const(code.co_consts)

    return of(compile(text, "repro.py", "exec"))


def _assigned(tree: ast.Module, name: str):
    """The value the script's top-level ``name = ...`` evaluates to (its literal alone)."""
    [node] = [n for n in tree.body if isinstance(n, ast.Assign)
              and [ast.unparse(t) for t in n.targets] == [name]]
    return eval(compile(ast.Expression(node.value), name, "eval"), {"float": float, "np": np})


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN == NaN


@functools.cache
def _prepared():
    return prepare(CASE)


def _record(text: str, family: str, choice: dict[str, str], quantized: bool) -> ReproRecord:
    """A record of ``family`` with ``text`` in every string it carries but the call's keys that
    choose the template (``choice``)."""
    prep = _prepared()
    call = {key: text for key in ("framework", "runtime", "api", "module", "backend", "scheme",
                                  "exporter", "device", "dtype")}
    call |= {text: [text, float("nan"), float("inf"), None, True], **choice}
    handed = Handed(family, call, arrays={f"feed/{text}": np.arange(3.0)},
                    files={text: b"model bytes"})
    return ReproRecord(
        case=text, adapter=text, title=text, status=text, reason=text,
        spec=script_spec(CASE) | {text: text}, atol=1e-5, rtol=float("inf"),
        canonical={f"layer0/forward/{text}": np.ones(2)},
        inputs={"x": np.asarray(prep.inputs.x, np.float64),
                "h0": np.asarray(prep.inputs.h0, np.float64),
                "c0": np.asarray(prep.inputs.c0, np.float64),
                "lengths": np.asarray(prep.inputs.lengths, np.int64)},
        reference={}, handed=handed, first={"output": text, "layer": 0, "direction": 1, "t": 2},
        step_reading=text, upstream=text, versions={text: text}, detail=text,
        question=(ScriptQuestion("cost", {"sqnr_db": float("nan"), "ideal_sqnr_db": None,
                                          "margin_db": 6.0, "min_sqnr_db": float("-inf"),
                                          text: text})
                  if quantized else ScriptQuestion()))


def _variants() -> list[tuple[str, dict[str, str], bool]]:
    """Each family's script with each choice of its text (the tolerance question), and the
    cost question's of each family that has one."""
    assert set(render.RENDERERS) == set(FAMILIES)
    out = []
    for family in FAMILIES:
        keys = render.CHOICES.get(family, {})
        for values in itertools.product(*keys.values()):
            out.append((family, dict(zip(keys, values, strict=True)), False))
    return out + [(family, {}, True) for family in COST_FAMILIES]


def test_every_script_carries_hostile_strings_as_data():
    variants = _variants()
    assert {family for family, _, _ in variants} == set(FAMILIES)
    assert len(variants) >= len(FAMILIES) + len(render.RUNTIMES) + len(COST_FAMILIES)
    checked = 0
    for family, choice, quantized in variants:
        record = _record(HOSTILE, family, choice, quantized)
        text, plain = render.script(record), render.script(_record(PLAIN, family, choice,
                                                                   quantized))
        what = f"{family} {choice} quantized={quantized}"
        tree = ast.parse(text, what)  # it compiles
        assert len(text.splitlines()) == len(plain.splitlines()), what  # no line break added
        assert HOSTILE in ast.get_docstring(tree, clean=False), what
        assert _same(_assigned(tree, "SPEC"), script_spec(CASE) | {HOSTILE: HOSTILE}), what
        call = _assigned(tree, "CALL")
        assert call[HOSTILE][0] == HOSTILE and call.get("scheme") == HOSTILE, what
        if quantized:
            assert _same(_assigned(tree, "COST")[HOSTILE], HOSTILE), what
        else:
            assert _assigned(tree, "(ATOL, RTOL)") == (1e-5, float("inf")), what
        assert f"handed/feed/{HOSTILE}" in _assigned(tree, "DATA"), what
        assert _code(text) == _code(plain), what  # no code added
        lines = readme(record, [HOSTILE], True).split("\n")
        assert [line for line in lines if line.startswith("#")][1:] == HEADINGS, what
        checked += 1
    assert checked == len(variants)


def test_a_readme_gains_no_heading_link_or_markup(tmp_path):
    for n, handed in enumerate((True, False)):
        record = _record(HOSTILE, "tflite", {}, quantized=False)
        record.upstream = "google/flax#5594\n# An injected heading"
        if not handed:
            record.handed, record.unsupported = None, HOSTILE
        text = (write_one(tmp_path / str(n), record) / "README.md").read_text(encoding="utf-8")
        lines = text.split("\n")
        assert [line for line in lines if line.startswith("#")][1:] == (
            HEADINGS if handed else HEADINGS[1:])
        assert not set(text) & {"\x00", "\r", "\u2028", "\u2029", "\t"}
        prose = re.sub(r"(`+).*?(?<!`)\1(?!`)", "", text)  # code spans render as they are
        assert not [markup for markup in ("[link](", "<b>", "*em*") if markup in prose], prose
        assert "\\[link\\](javascript:x) \\*em\\* \\<b\\>" in prose
        assert r"Known upstream bug: google/flax#5594\n\# An injected heading." in lines


def test_a_plain_upstream_id_stays_a_link(tmp_path):
    record = _record(PLAIN, "tflite", {}, quantized=False)
    for upstream, link in (("google/flax#5594", "https://github.com/google/flax/issues/5594"),
                           ("https://example.org/b?id=1", "https://example.org/b?id=1")):
        record.upstream = upstream
        text = (write_one(tmp_path, record) / "README.md").read_text(encoding="utf-8")
        assert f"Known upstream bug: [{upstream}]({link})." in text.replace("\\", "")


def _stand_in(monkeypatch, y: np.ndarray) -> None:
    """``ai_edge_litert.interpreter`` whose one signature returns ``y`` as ``deployed_y``."""
    class Interpreter:
        def __init__(self, model_content, **kwargs):
            pass

        def get_signature_runner(self):
            return lambda **feeds: {"deployed_y": y.astype(np.float32)}

    module = types.ModuleType("ai_edge_litert.interpreter")
    module.Interpreter = Interpreter
    module.OpResolverType = types.SimpleNamespace()
    monkeypatch.setitem(sys.modules, "ai_edge_litert", types.ModuleType("ai_edge_litert"))
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", module)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "stand-in")


def test_the_cheap_scripts_run_with_hostile_strings(tmp_path, monkeypatch, capsys):
    """A LiteRT script (both questions) with a stand-in interpreter: hostile names everywhere,
    an input fed by a hostile name, and nothing of the payload runs."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    prep = _prepared()
    _stand_in(monkeypatch, np.asarray(prep.reference.y, np.float64))
    ran = 0
    for quantized in (False, True):
        record = _record(HOSTILE, "tflite", {}, quantized)
        record.canonical = {k: np.asarray(v, np.float64)
                            for k, v in prep.canonical.tensors.items()}
        record.atol = record.rtol = 1e-5
        record.handed.call |= {"runner": "signature", "inputs": [HOSTILE], "op_resolver": None,
                               "roles": {"deployed_y": "y"}, "h_n": "from_y",
                               "absent": {"c_n": HOSTILE}}
        record.handed.arrays = {f"feed/{HOSTILE}": np.asarray(prep.inputs.x, np.float32)}
        record.handed.files = {"model.tflite": b"TFL3 stand-in"}
        if quantized:
            record.question = ScriptQuestion("cost", {
                "sqnr_db": 50.0, "ideal_sqnr_db": 50.0, "margin_db": 6.0, "min_sqnr_db": None})
        folder = write_one(tmp_path / str(quantized), record)
        namespace = {"__name__": "repro", "__file__": str(folder / "repro.py")}
        exec(compile((folder / "repro.py").read_text(encoding="utf-8"), "repro.py", "exec"),
             namespace)
        assert namespace["main"]() == 0
        ran += 1
    assert ran == 2 and "no divergence" in capsys.readouterr().out
    assert not (tmp_path / "home" / "CANARY").exists()


def test_a_doctor_script_carries_hostile_strings_as_data(tmp_path):
    arrays = {"claimed": {"W_i": np.ones(2)}, "right": {"W_i": np.zeros(2)},
              "expected": {"y": np.ones(2)}}
    inputs = _prepared().inputs
    texts = {}
    for text in (HOSTILE, PLAIN):
        folder = tmp_path / ("hostile" if text == HOSTILE else "plain")
        line = write_doctor_repro(folder, case=CASE, fixed_case=CASE, layout=text,
                                  inputs=inputs, atol=1e-5, rtol=1e-5, mistakes=[text, text],
                                  source=text, **arrays)
        assert line.startswith("Wrote a reproducer"), line
        texts[text] = (folder / "repro.py").read_text(encoding="utf-8")
    tree = ast.parse(texts[HOSTILE])
    assert len(texts[HOSTILE].splitlines()) == len(texts[PLAIN].splitlines())
    assert HOSTILE in ast.get_docstring(tree, clean=False)
    assert _assigned(tree, "MISTAKES") == [HOSTILE, HOSTILE]
    assert _code(texts[HOSTILE]) == _code(texts[PLAIN])
    readme = (tmp_path / "hostile" / "README.md").read_text(encoding="utf-8")
    assert [line for line in readme.split("\n") if line.startswith("#")] == [readme.split("\n")[0]]
    assert not set(readme) & {"\x00", "\r", "\u2028", "\u2029"}


@pytest.mark.parametrize("folder", ["plain", "a\\N{x}"])
def test_doctor_repro_with_the_issues_expected_path_runs_no_injected_code(tmp_path, capsys,
                                                                         monkeypatch, folder):
    """The issue's attack: an expected-outputs file whose name closes the docstring and calls
    home; and a ``\\N`` in the path, which made the script not parse."""
    import yaml

    case = Case(name="planted", cell="gru", input_size=3, hidden_size=4, batch=2, seq_len=6,
                seed=7, dtype="float64")
    layout = get_layout("keras")
    native = layout.to_native(params.generate(case), case)
    inputs = data.generate(case)
    [mistake] = [m for m in catalogue(case, layout).mistakes if m.id == "order:all:zrn"]
    probe = Doctor(case, layout, native, inputs, {"y": np.zeros(1)}, tol=None)
    expected = probe.outputs(probe.trial((mistake,)))
    save_npz(tmp_path / "w.npz", native)
    folder = tmp_path / folder
    folder.mkdir()
    save_npz(folder / (PAYLOAD + ".npz"), expected)
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case.model_dump(
        exclude={"source", "weights", "inputs", "tolerance", "adapters", "exclude",
                 "description"}, exclude_none=True)))
    assert main(["doctor", "--case", str(tmp_path / "case.yaml"), "--weights",
                 str(tmp_path / "w.npz"), "--layout", "keras", "--expected",
                 str(folder / (PAYLOAD + ".npz")), "--repro", str(tmp_path / "repro")]) == 0
    assert "Wrote a reproducer of the mistake" in capsys.readouterr().out
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # the payload's Path.home()
    done = run_repro(tmp_path / "repro")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "corrected reading agrees" in done.stdout
    assert not (home / "CANARY").exists()
