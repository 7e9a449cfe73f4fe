"""Blind spots (``harness.blind``): which layout mistakes a case's data could not reveal.

A case proves a layout only if every plausible mistake moves the outputs past 10x tolerance.
Constant weights hide gate orders and transposes, zero biases hide bias bookkeeping, a hidden
size of 1 makes every transpose a no-op; the generated weights (distinct per gate, both biases
nonzero) hide nothing. summary.md carries the note per case.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness import blind, params, runner
from harness.adapters import get_adapter
from harness.blind import blind_note, blind_spots
from harness.cases import load_cases
from harness.npz import save_npz
from harness.params import Canonical
from harness.report.summary import summary_markdown

CASE_DEFAULTS = dict(name="b", batch=2, initial_state="random")  # for make_case


def ids(spots) -> set[str]:
    return {s.mistake for s in spots}


def test_generated_weights_hide_nothing(make_case) -> None:
    for case in (make_case(), make_case(cell="gru"), make_case(bidirectional=True, num_layers=2),
                 make_case(peepholes=True)):
        assert blind_spots(case) == [], case


def test_constant_weights_hide_gate_orders_and_transposes(make_case) -> None:
    case = make_case()
    canonical = Canonical({k: np.full(v.shape, 0.3)
                           for k, v in params.generate(case).tensors.items()})
    found = ids(blind_spots(case, canonical=canonical))
    orders = {i for i in found if i.startswith("order:")}
    assert len(orders) == 4 * 23  # every order of every kind
    assert "reading:R:TC" in found  # R transposed (square blocks)
    assert "forget:+1" not in found  # an offset still shows


def test_zero_biases_hide_the_bias_bookkeeping(make_case) -> None:
    case = make_case()
    canonical = Canonical({k: (np.zeros_like(v) if k.rsplit("/", 1)[1].startswith("b") else v)
                           for k, v in params.generate(case).tensors.items()})
    found = ids(blind_spots(case, canonical=canonical))
    assert {"bias:drop-bR", "bias:drop-bW", "bias:none", "bias:twice", "bias:half"} <= found
    assert {i for i in found if i.startswith("order:b:")} == {
        f"order:b:{''.join(p)}" for p in __import__("itertools").permutations("ifgo")
        if p != tuple("ifgo")}
    assert not any(i.startswith(("order:W", "order:R", "reading")) for i in found)


def test_hidden_size_one_hides_transposes(make_case) -> None:
    spots = blind_spots(make_case(hidden_size=1, input_size=1, initial_state="zeros"))
    noops = [s for s in spots if not s.mistake]
    assert any("transposed" in s.text and "1x1" in s.why for s in noops)
    assert any("(h0, c0) swapped" in s.text for s in noops)  # zero initial states


def test_seed001_cases_are_blind_where_the_seed_was(tmp_path: Path) -> None:
    """At I=1 the CuDNN input-kernel reading is invisible; at H=1 every transpose is."""
    cases = {c.name: c for c in load_cases("cases/seed001-cudnnlstm-units.yaml")}
    h1 = blind_note(cases["seed001-cudnnlstm-h1"])
    h2 = blind_note(cases["seed001-cudnnlstm-h2"])
    assert "R blocks" not in h2 and "R blocks read transposed" in h1
    assert "C-order reshaped" in h2 and "each W slice is 2x1" in h2


def test_a_big_stack_is_probed_on_its_bottom_layers_and_says_so(make_case, monkeypatch) -> None:
    """Nothing is skipped for its size: a stack beyond the budget is probed on as many bottom
    layers as fit (at least one), and the note says what was probed."""
    case = make_case(num_layers=3, hidden_size=4, input_size=3)
    assert "Probed on 6 of 6 steps" in blind_note(case)
    monkeypatch.setattr(blind, "BUDGET", 1.0)
    assert blind.probe_layers(case, 100) == 1
    note = blind_note(case)
    assert "Probed on layer 0 of 3, 6 of 6 steps" in note and note.startswith("Blind to")


def test_summary_md_has_a_blind_note_per_case(tmp_path: Path, make_case) -> None:
    good = make_case(name="good")
    constant = make_case(name="constant", weights={"file": "w.npz", "layout": "canonical"},
                    source=str(tmp_path / "c.yaml"))
    save_npz(tmp_path / "w.npz", {k: np.full(v.shape, 0.2) for k, v in
                                  params.generate(constant).tensors.items()})
    result = runner.run([good, constant],
                        [get_adapter("reference"), get_adapter("noise-floor")])
    text = summary_markdown(result)
    sections = text.split("\n## ")[1:]
    assert "Blind to: nothing" in sections[0]
    # constant weights: blind to every gate order, a warning (or, blind to everything, an error)
    constant_text = "\n## ".join(sections[1:])
    assert ("**Warning**: Blind to (mistakes that move the outputs by less than 10x tolerance)"
            in constant_text and "gate orders" in constant_text) or "vacuous" in constant_text


def test_the_check_is_bounded_whatever_seq_len_and_batch():
    """Probed on a truncated copy (T <= 16, B <= 2): a long case costs what a short one does,
    and shows the same blind spots as its own first steps."""
    import time

    from harness.blind import MAX_BATCH, MAX_STEPS, truncated
    from harness.prepare import load_inputs, load_weights
    from harness.spec import Case

    long = Case(name="long", cell="lstm", input_size=2, hidden_size=3, seq_len=100_000, batch=64)
    start = time.perf_counter()
    assert blind_note(long).startswith("Blind to")
    assert time.perf_counter() - start < 20
    canonical, inputs = load_weights(long), load_inputs(long)
    small, cut = truncated(long, inputs)
    assert (small.seq_len, small.batch) == (MAX_STEPS, MAX_BATCH) and cut.x.shape[:2] == (2, 16)
    assert blind_spots(long, canonical, inputs) == blind_spots(small, canonical, cut)


def test_the_report_phase_says_what_it_does(tmp_path, capsys):
    from harness.cli import main

    case = tmp_path / "c.yaml"
    case.write_text("name: c\ncell: gru\ninput_size: 2\nhidden_size: 3\n")
    # the noise floor alone tests no framework: vacuous, exit 1
    assert main(["run", str(case), "--adapters", "reference,noise-floor", "--out",
                 str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "report: writing divergence.csv, summary.md, layouts.md, run.json" in err
    assert "report: writing index.html" in err
