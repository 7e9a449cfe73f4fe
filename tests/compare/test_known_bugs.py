"""Known upstream bugs as data of the adapters (harness/known_bugs.py), applied to every case,
a user's own included: a DIVERGED pair the registry explains is a known upstream bug (exit 0),
a pair the registry expects to diverge that passes "looks fixed" (exit 1), and an entry cannot
hide a second bug of the same pair."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.runnable import runnable

from harness import compare, known_bugs
from harness.adapters.flax_nnx import FlaxNnx
from harness.cli import main
from harness.npz import load_npz, save_npz
from harness.params import Canonical

USER_GRU = """name: my-gru
cell: gru
input_size: 3
hidden_size: 4
batch: 2
seq_len: 5
dtype: float32
weights: {{file: {weights}, layout: canonical}}
"""


def _users_gru_weights(tmp_path: Path) -> Path:
    """A torch nn.GRU saved as users save it and converted as the README shows, with weights
    of a trained model's magnitudes (several units)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    gru = torch.nn.GRU(3, 4, batch_first=True)
    with torch.no_grad():
        for p in gru.parameters():
            p.mul_(4.0)
    torch.save(gru.state_dict(), tmp_path / "model.pt")
    assert main(["convert", str(tmp_path / "model.pt"), str(tmp_path / "w.npz"),
                 "--to", "canonical"]) == 0
    return tmp_path / "w.npz"


def _run(tmp_path: Path, weights: Path, name: str) -> tuple[int, dict]:
    case = tmp_path / f"{name}.yaml"
    case.write_text(USER_GRU.format(weights=weights.name).replace("my-gru", name))
    out = tmp_path / f"report-{name}"
    code = main(["run", str(case), "--adapters", "reference,flax-nnx", "--out", str(out),
                 "--quiet"])
    pair = next(p for p in json.loads((out / "run.json").read_text())["pairs"]
                if p["adapter"] == "flax-nnx")
    return code, pair


@pytest.mark.jax
def test_a_users_gru_through_flax_nnx_is_the_known_bug_and_passes_without_b_hn(tmp_path):
    runnable("flax-nnx")
    weights = _users_gru_weights(tmp_path)
    code, pair = _run(tmp_path, weights, "my-gru")
    assert code == 0 and pair["status"] == compare.KNOWN_BUG, pair["reason"]
    assert "google/flax#5594 (https://github.com/google/flax/issues/5594)" in pair["reason"]
    # the same model with its recurrent candidate bias zero: nothing for the bug to show
    tensors = load_npz(weights)
    save_npz(tmp_path / "zero.npz", {k: np.zeros_like(v) if k.endswith("/bR_n") else v
                                     for k, v in tensors.items()})
    code, pair = _run(tmp_path, tmp_path / "zero.npz", "no-b-hn")
    assert code == 0 and pair["status"] == compare.PASS, pair["reason"]
    assert "5594" not in pair["reason"]


@pytest.mark.jax
def test_the_entry_does_not_hide_a_gate_order_bug_of_the_same_pair(tmp_path, monkeypatch):
    """A planted second bug (r and z swapped in layer 0's W, as a hand port might) is DIVERGED,
    not a known upstream bug: the reference on the weights as flax reads them (b_hn dropped)
    does not reproduce the outputs."""
    runnable("flax-nnx")
    weights = _users_gru_weights(tmp_path)
    run = FlaxNnx.run

    def swapped(self, case, canonical, inputs, **kw):
        t = dict(canonical.tensors)
        t["layer0/forward/W_r"], t["layer0/forward/W_z"] = t["layer0/forward/W_z"], \
            t["layer0/forward/W_r"]
        return run(self, case, Canonical(t), inputs, **kw)

    monkeypatch.setattr(FlaxNnx, "run", swapped)
    code, pair = _run(tmp_path, weights, "two-bugs")
    assert code == 1 and pair["status"] == compare.DIVERGED, pair["reason"]
    assert "applies here but does not explain the divergence" in pair["reason"]


def test_a_registry_entry_on_a_passing_pair_looks_fixed_and_fails(tmp_path, monkeypatch):
    """An entry that applies to a pair that passes: "looks fixed", exit 1, naming the entry to
    revisit (here an entry planted for torch-cpu, which has no such bug)."""
    runnable("torch-cpu")
    planted = known_bugs.KnownBug(adapter="torch-cpu", upstream="example/fw#7",
                                  summary="planted", since={"numpy": "1.0"})
    monkeypatch.setattr(known_bugs, "KNOWN_BUGS", (planted,))
    case = tmp_path / "c.yaml"
    case.write_text("name: c\ncell: lstm\ninput_size: 2\nhidden_size: 3\nseq_len: 4\n")
    out = tmp_path / "r"
    code = main(["run", str(case), "--adapters", "reference,torch-cpu", "--out", str(out),
                 "--quiet"])
    pair = next(p for p in json.loads((out / "run.json").read_text())["pairs"]
                if p["adapter"] == "torch-cpu")
    assert code == 1 and pair["status"] == compare.LOOKS_FIXED, pair["reason"]
    numpy = f"numpy {np.__version__}"
    assert f"the bug looks fixed ({numpy}); revisit its entry in harness/known_bugs.py (seen " \
           "on none recorded): record fixed_in" in pair["reason"]


def test_looks_fixed_names_the_release_and_in_which_release_where_the_entry_records_it(
        monkeypatch):
    """A passing pair under an entry: "looks fixed (numpy X)", the installed release; where the
    entry records the first release that fixes it and that release (or a later one) is
    installed, "looks fixed in" it. Still "looks fixed": the run fails, so the entry goes."""
    from harness.judges import known
    from harness.judges.verdict import KnownBugReading
    from harness.spec import Case

    case = Case(name="c", cell="lstm", input_size=2, hidden_size=3)
    numpy = f"numpy {np.__version__}"
    said = {}
    for fixed_in in (None, {"numpy": "1.0"}, {"numpy": np.__version__}, {"numpy": "999.0"}):
        entry = known_bugs.KnownBug(adapter="torch-cpu", upstream="example/fw#7", summary="s",
                                    since={"numpy": "0.1"}, seen_on=({"numpy": "0.1"},),
                                    fixed_in=fixed_in)
        monkeypatch.setattr(known_bugs, "KNOWN_BUGS", (entry,))
        status, reason = known.apply(compare.PASS, "", case, "torch-cpu",
                                     KnownBugReading("example/fw#7", False, ""))
        assert status == compare.LOOKS_FIXED
        said[str(fixed_in)] = reason.split("but passes: ")[1]
    assert len(said) == 4
    revisit = ("revisit its entry in harness/known_bugs.py (seen on numpy 0.1): record fixed_in "
               "where this release is the first without it")
    assert said["None"] == f"the bug looks fixed ({numpy}); {revisit}"
    assert said[str({"numpy": "999.0"})] == said["None"]  # not reached: as without it
    recorded = ("as its entry in harness/known_bugs.py records (fixed_in); remove the entry "
                "once the adapter needs that release")
    assert said[str({"numpy": "1.0"})] == f"the bug looks fixed in numpy 1.0 ({numpy} " \
                                          f"installed), {recorded}"
    assert said[str({"numpy": np.__version__})] == f"the bug looks fixed in {numpy}, {recorded}"


def test_every_entry_records_what_was_measured():
    """Each entry was seen on some release, its lower bound the earliest of them; a recorded
    fix is newer than every release it was seen on; bisect's runs name releases and verdicts."""
    from packaging.version import Version

    checked = 0
    for bug in known_bugs.KNOWN_BUGS:
        assert bug.seen_on, bug.upstream
        for dist, first in bug.since.items():
            seen = [r[dist] for r in bug.seen_on if dist in r]
            assert seen and min(seen, key=Version) == first, (bug.upstream, dist)
        for dist, fixed in (bug.fixed_in or {}).items():
            assert all(Version(fixed) > Version(r[dist]) for r in bug.seen_on if dist in r), \
                (bug.upstream, dist)
        for run in bug.bisect_tried:
            assert run.verdicts and run.node.endswith(f"::{bug.adapter}"), bug.upstream
            assert all(Version(v) for v in run.verdicts)
            assert set(run.verdicts.values()) <= {*compare.COMPARED, compare.NOT_APPLICABLE,
                                                  compare.UNAVAILABLE, compare.ERROR,
                                                  known_bugs.NOT_RUN}
        checked += 1
    assert checked == len(known_bugs.KNOWN_BUGS) >= 8


def test_an_entry_applies_only_from_the_release_it_was_measured_on():
    from harness.spec import Case

    case = Case(name="c", cell="gru", input_size=2, hidden_size=3)
    later = known_bugs.KnownBug(adapter="a", upstream="o/r#1", summary="s", since={"numpy": "1.0"})
    future = known_bugs.KnownBug(adapter="a", upstream="o/r#1", summary="s",
                                 since={"numpy": "999.0"})
    absent = known_bugs.KnownBug(adapter="a", upstream="o/r#1", summary="s",
                                 since={"no-such-distribution-xyz": "1.0"})
    assert later.applies(case, "a", None) and not later.applies(case, "b", None)
    assert not future.applies(case, "a", None)
    assert not absent.applies(case, "a", None)
    # the part of the condition the case decides holds with the weights not at hand too
    longer = known_bugs.KnownBug(adapter="a", upstream="o/r#1", summary="s", since={"numpy": "1.0"},
                                 on_case=lambda c: c.export_seq_len is not None)
    assert not longer.applies(case, "a", None)
    assert longer.applies(case.model_copy(update={"export_seq_len": 2}), "a", None)


def test_the_flax_entry_shows_only_where_the_candidate_bias_is_separate_and_set():
    from harness.params import generate
    from harness.spec import Case

    entry = next(b for b in known_bugs.KNOWN_BUGS if b.upstream == "google/flax#5594")
    gru = Case(name="g", cell="gru", input_size=2, hidden_size=3, bidirectional=True)
    weights = generate(gru).tensors
    assert entry.shows(gru, weights)
    one_set = {k: np.zeros_like(v) if k.endswith("/bR_n") else v for k, v in weights.items()}
    one_set["layer0/backward/bR_n"] = weights["layer0/backward/bR_n"]
    assert entry.shows(gru, one_set)  # any layer or direction
    none_set = {k: np.zeros_like(v) if k.endswith("/bR_n") else v for k, v in weights.items()}
    assert not entry.shows(gru, none_set)
    before = gru.model_copy(update={"reset_after": False})  # bR_n sums into bW_n
    assert not entry.shows(before, weights)
    lstm = Case(name="l", cell="lstm", input_size=2, hidden_size=3)
    assert not entry.shows(lstm, generate(lstm).tensors)


@pytest.mark.parametrize("upstream, url", [
    ("google/flax#5594", "https://github.com/google/flax/issues/5594"),
    ("https://example.org/bug/1", None),
    ("not an id", None),
    ("o/r#1\x1b[2J", None),
])
def test_links_are_made_only_from_plain_ids(upstream, url):
    assert known_bugs.link(upstream) == url


def test_every_known_bug_names_a_registered_adapter() -> None:
    """An entry under a misspelt or renamed adapter would never apply: its bug would fail runs
    as a plain divergence, its "looks fixed" never show."""
    from harness.adapters import ADAPTERS

    names = [bug.adapter for bug in known_bugs.KNOWN_BUGS]
    assert len(names) >= 8
    assert [name for name in names if name not in ADAPTERS] == []
