"""Known upstream bugs: what an adapter is known to get wrong because of a bug in its framework
(not in the harness), as data of the adapters.

The registry applies to every case, the bundled ones and a user's own: where an entry applies
(its adapter, its condition on the case and the weights, an installed version it was measured
on or later), a DIVERGED pair reads "known upstream bug" and does not fail the run, and a pair
that passes reads "looks fixed", which does, so that the entry is revisited. A case's own
``expected:`` entries (harness/spec.py, :class:`~harness.spec.Expected`) work the same way for
what a case declares of itself; they take precedence over the registry.

An entry with a ``crash`` is a bug that kills the adapter's framework (a converter's process
dying by a signal) before anything is compared: the adapter asks :func:`known_crash` where it
sees that death, and the pair is a known upstream bug's error row naming the signal, never a
dead run; where the entry applies and the death does not come, the pair "looks fixed".

Each entry's versions are a lower bound: the earliest release the divergence was measured on.
An older install is not claimed (its pair is judged plainly), and a fixed release shows up as
"looks fixed", naming the installed release, rather than being hidden behind a guessed upper
bound. Each entry also keeps what was measured: the releases it was seen on (``seen_on``), the
first release that fixes it where one was measured (``fixed_in``: a passing pair then reads
"looks fixed in" that release) and the releases ``rnn-harness bisect`` tried (``bisect_tried``,
printed for pasting by ``bisect --record``; docs/bisect.md). ``rnn-harness adapters`` and
docs/adapters.md show them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness import cpu_flags, params, versions
from harness.spec import Case

Weights = Mapping[str, np.ndarray]  # canonical parameters (harness/params.py keys)
Releases = Mapping[str, str]  # distribution -> release, e.g. {"flax": "0.12.8"}

NOT_RUN = "not installed or run"  # bisect's word for a release it could not install or run


@dataclass(frozen=True)
class Bisected:
    """One ``rnn-harness bisect`` of an entry's pair, as ``bisect --record`` prints it."""

    node: str  # the pair, FILE::CASE::ADAPTER
    package: str
    python: str  # the release environments' Python, e.g. "3.11"
    verdicts: Mapping[str, str]  # release -> the pair's verdict there, or NOT_RUN

    def text(self) -> str:
        """``flax on Python 3.11: 0.12.0 to 0.12.7 (8 releases) unavailable, 0.12.8 known
        upstream bug``: the releases oldest first, a run of one verdict in one group."""
        ordered = sorted(self.verdicts, key=versions.release)
        groups: list[list[str]] = []
        for release in ordered:
            if groups and self.verdicts[groups[-1][0]] == self.verdicts[release]:
                groups[-1].append(release)
            else:
                groups.append([release])
        said = [(f"{g[0]} to {g[-1]} ({len(g)} releases)" if len(g) > 3 else ", ".join(g))
                + f" {self.verdicts[g[0]]}" for g in groups]
        return f"{self.package} on Python {self.python}: {', '.join(said)}"


def releases_text(releases: Releases) -> str:
    """``executorch 1.5.1 + torch 2.13.0``."""
    return " + ".join(f"{d} {v}" for d, v in releases.items())


@dataclass(frozen=True)
class KnownBug:
    """One adapter's known divergence, where it shows and on which versions."""

    adapter: str
    upstream: str  # owner/repository#number
    summary: str  # what the bug does, in one clause
    since: dict[str, str]  # distribution -> earliest release the divergence was measured on
    shows: Callable[[Case, Weights], bool] = lambda case, weights: True
    # the part of the condition the case alone decides (its spec, no weights): checked with or
    # without the weights at hand, so that a recorded report read again (weights None) is not
    # claimed where the case itself rules the bug out
    on_case: Callable[[Case], bool] = lambda case: True
    where: str = "every case it runs"  # ``shows`` in words, for docs and the adapters table
    # the weights as the buggy framework reads them, where the bug is a misreading of the
    # weights: a DIVERGED pair is a known bug only where the reference on these weights
    # reproduces the adapter's outputs, so that the entry cannot hide another bug of the same
    # pair (a gate order, a state carried wrong). None: the entry cannot be checked this way,
    # and it covers any divergence of the pair (said in :attr:`where`).
    reading: Callable[[Case, Weights], dict[str, np.ndarray]] | None = None
    # where the bug is a crash rather than a divergence: the signal the process dies with
    # (e.g. SIGSEGV). The adapter asks the registry where it sees that crash (a known upstream
    # bug's error row, never a dead run) and where the crash does not come (looks fixed).
    crash: str | None = None
    # what was measured: the releases the divergence (or crash) was seen on, each a set of
    # releases measured together (:attr:`since` is the earliest of them); the first release
    # measured without it, where one was; the runs of ``rnn-harness bisect`` over its pair
    seen_on: tuple[Releases, ...] = ()
    fixed_in: Releases | None = None
    bisect_tried: tuple[Bisected, ...] = ()

    def seen_text(self) -> str:
        """:attr:`seen_on` in words: ``flax 0.12.8, flax 0.12.12``."""
        return ", ".join(releases_text(r) for r in self.seen_on) or "none recorded"

    def fixed_text(self) -> str:
        """:attr:`fixed_in` in words, or that no fixing release was measured."""
        return releases_text(self.fixed_in) if self.fixed_in else "none measured"

    def tried_text(self) -> str:
        """:attr:`bisect_tried` in words (:meth:`Bisected.text`), or ``none``."""
        return "; ".join(b.text() for b in self.bisect_tried) or "none"

    def measured(self) -> dict[str, Any]:
        """What the entry records, for ``adapters --json``."""
        return {"upstream": self.upstream, "since": dict(self.since),
                "seen_on": [dict(r) for r in self.seen_on],
                "fixed_in": dict(self.fixed_in) if self.fixed_in else None,
                "bisect_tried": [{"node": b.node, "package": b.package, "python": b.python,
                                  "verdicts": dict(b.verdicts)} for b in self.bisect_tried]}

    def installed_versions(self) -> str:
        """The installed releases of :attr:`since`'s distributions, e.g. ``flax 0.12.8``."""
        return ", ".join(f"{d} {versions.installed(d)}" for d in self.since)

    def fixed_installed(self) -> bool:
        """Whether :attr:`fixed_in` is recorded and every distribution of it is installed at
        that release or later."""
        return self.fixed_in is not None and all(
            (found := versions.installed(d)) is not None
            and versions.release(found) >= versions.release(v) for d, v in self.fixed_in.items())

    def looks_fixed(self) -> str:
        """What a pair the entry applies to and that passes (or converts) says of it: ``looks
        fixed in flax 0.12.13 (flax 0.12.14 installed), as its entry ...`` where the installed
        release is at or past :attr:`fixed_in`, else ``looks fixed (flax 0.12.13); revisit its
        entry ...``: the installed release it was seen fixed on, either way."""
        installed = self.installed_versions()
        entry = "its entry in harness/known_bugs.py"
        fixed_in = self.fixed_in if self.fixed_installed() else None
        if fixed_in:
            same = all(versions.installed(d) == v for d, v in fixed_in.items())
            return (f"the bug looks fixed in {releases_text(fixed_in)}"
                    f"{'' if same else f' ({installed} installed)'}, as {entry} records "
                    "(fixed_in); remove the entry once the adapter needs that release")
        return (f"the bug looks fixed ({installed}); revisit {entry} (seen on "
                f"{self.seen_text()}): record fixed_in where this release is the first without it")

    def installed_applies(self) -> bool:
        """Whether every distribution of :attr:`since` is installed at that release or later
        (read from the installed metadata: no framework import)."""
        for dist, first in self.since.items():
            found = versions.installed(dist)
            if found is None or versions.release(found) < versions.release(first):
                return False
        return True

    def applies(self, case: Case, adapter: str, weights: Weights | None) -> bool:
        """Whether this entry speaks for ``adapter`` on ``case`` with these weights (None: the
        weights are not at hand, as when a recorded report is read again: the condition on the
        case alone)."""
        if adapter != self.adapter or not self.installed_applies() or not self.on_case(case):
            return False
        return weights is None or self.shows(case, weights)


def _reset_gate(case: Case) -> bool:
    """The case's cell has a reset gate (the GRU): TFLite has no fused op for it, so its
    quantizing converter works on the cell's loop."""
    return case.cell_kind.reset_gate is not None


GRU_INT8_CRASH = ("the full-integer (and 16x8) converter's process dies with SIGSEGV "
                  "quantizing a GRU (its WHILE loop: TFLite has no fused GRU op)")
GRU_INT8_WHERE = "GRU cases (the cell with a reset gate), at their conversion"


def _separate_bias_keys(case: Case) -> set[str]:
    """The recurrent biases that cannot be summed into the input bias, in every layer and
    direction (a GRU's candidate with ``reset_after``; none otherwise)."""
    gates = case.cell_kind.separate_biases(case.reset_after)
    return {params.key(layer, d, f"bR_{g}") for layer, d in params.layer_dirs(case) for g in gates}


def _separate_bias_set(case: Case, weights: Weights) -> bool:
    """Some layer and direction has one of :func:`_separate_bias_keys` non-zero."""
    return any(np.any(np.asarray(weights[k]) != 0) for k in _separate_bias_keys(case))


def _without_separate_biases(case: Case, weights: Weights) -> dict[str, np.ndarray]:
    """The weights with :func:`_separate_bias_keys` at zero."""
    dropped = _separate_bias_keys(case)
    return {k: np.zeros_like(v) if k in dropped else v for k, v in weights.items()}


def _exported_at_another_length(case: Case) -> bool:
    """The case converts its model at one sequence length and runs it at another."""
    return case.export_seq_len is not None and case.export_seq_len != case.seq_len


# pytorch/executorch#8468 and #12344 report it; the failure itself is torch.export's, so torch's
# version is the one that fixes it as much as ExecuTorch's
_EXECUTORCH_FIXED_LENGTH = dict(
    upstream="pytorch/executorch#8468",
    summary="an nn.LSTM/nn.GRU cannot be exported with a dynamic sequence length (also "
            "pytorch/executorch#12344): torch.export's decomposition of the recurrent op fixes "
            "the time axis at the example's length",
    since={"executorch": "1.5.1", "torch": "2.13.0"},
    seen_on=({"executorch": "1.5.1", "torch": "2.13.0"},),  # docs/deployment.md
    on_case=_exported_at_another_length,
    where="cases with export_seq_len other than seq_len (an error row of the export, read as "
          "the known bug; a pass there looks fixed)")


KNOWN_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        adapter="flax-nnx", upstream="google/flax#5594",
        summary="nnx.GRUCell has no recurrent bias on the candidate (b_hn): r multiplies "
                "R_n h alone",
        since={"flax": "0.12.8"},
        # flax 0.12.9 and later need Python 3.12: measured there with `bisect --python`, where
        # pip resolves jax 0.12.1, which flax 0.12.8 and 0.12.9 fail to import (error rows:
        # jax.experimental.hijax has no HiPrimitive)
        seen_on=({"flax": "0.12.8"}, {"flax": "0.12.10"}, {"flax": "0.12.12"}),
        bisect_tried=(
            Bisected("cases/gru-reset.yaml::gru-reset_after::flax-nnx", "flax", "3.11",
                     {**{f"0.12.{n}": "unavailable" for n in range(8)},
                      "0.12.8": "known upstream bug",
                      **{v: NOT_RUN for v in ("0.12.9", "0.12.10", "0.12.12")}}),
            Bisected("cases/gru-reset.yaml::gru-reset_after::flax-nnx", "flax", "3.12",
                     {"0.12.8": "error", "0.12.9": "error", "0.12.10": "known upstream bug",
                      "0.12.12": "known upstream bug"})),
        shows=_separate_bias_set, reading=_without_separate_biases,
        where="GRU cases with reset_after whose recurrent candidate bias (bR_n) is not zero"),
    KnownBug(
        adapter="openvino-batch-major", upstream="openvinotoolkit/openvino#37820",
        summary="the ONNX frontend ignores the LSTM/GRU layout=1 attribute and reads "
                "batch-major tensors as time-major",
        since={"openvino": "2026.4.1"}, seen_on=({"openvino": "2026.4.1"},),
        where="every case it runs (sizes where batch, steps and directions agree; elsewhere "
              "OpenVINO refuses the model and the adapter is unavailable)"),
    KnownBug(
        adapter="onnxruntime-dynamic-int8-full-range", upstream="microsoft/onnxruntime#5849",
        summary="on a CPU without VNNI the u8 x s8 kernel sums pairs of products in saturating "
                "16-bit arithmetic (vpmaddubsw), so 8-bit weights give wrong gate "
                "pre-activations; quantize_dynamic's reduce_range avoids it",
        since={"onnxruntime": "1.32.0"}, seen_on=({"onnxruntime": "1.32.0"},),
        on_case=lambda case: cpu_flags.cpu_flags().get("vnni") is False,
        where="every case it runs on a CPU without VNNI (with VNNI the products are exact)"),
    # measured with TensorFlow 2.21.0 (tf_keras 2.21.0, ai-edge-litert 2.3.0); one entry per
    # adapter whose conversion it kills (litert-int8-ref runs the model litert-int8 converts)
    *(KnownBug(adapter=name, upstream="tensorflow/tensorflow#87468", summary=GRU_INT8_CRASH,
               since={"tensorflow": "2.21.0"}, on_case=_reset_gate, where=GRU_INT8_WHERE,
               crash="SIGSEGV", seen_on=({"tensorflow": "2.21.0", "tf-keras": "2.21.0",
                                          "ai-edge-litert": "2.3.0"},))
      for name in ("litert-int8", "litert-int8-ref", "litert-int16x8")),
    KnownBug(
        adapter="litert-torch", upstream="google-ai-edge/litert-torch#1062",
        summary="nn.LSTM/nn.GRU cannot be converted with a dynamic sequence length: "
                "torch.export specializes the time axis to the length converted at, and the "
                "fixed-shape model runs only that many steps",
        since={"litert-torch": "0.10.0"},
        seen_on=({"litert-torch": "0.10.0", "torch": "2.13.0"},),  # docs/deployment.md
        on_case=_exported_at_another_length,
        where="cases whose export_seq_len differs from seq_len (the row is the refused "
              "conversion, an error the adapter declares; a conversion that succeeds and "
              "passes looks fixed)"),
    KnownBug(adapter="executorch", **_EXECUTORCH_FIXED_LENGTH),
    KnownBug(adapter="executorch-portable", **_EXECUTORCH_FIXED_LENGTH),
)
"""Every known upstream bug, one entry each (docs/adapters.md, Known upstream bugs)."""


_GITHUB_ID = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,99})/([A-Za-z0-9][A-Za-z0-9_.-]{0,99})"
                        r"#([0-9]{1,9})$")


def link(upstream: str) -> str | None:
    """The address of an ``owner/repository#number`` id on GitHub; None for anything else (a
    URL given as the id is its own link)."""
    m = _GITHUB_ID.match(upstream)
    return f"https://github.com/{m[1]}/{m[2]}/issues/{m[3]}" if m else None


def known_bug(case: Case, adapter: str, weights: Weights | None) -> KnownBug | None:
    """The registry's entry for this pair, or None."""
    return next((b for b in KNOWN_BUGS if b.applies(case, adapter, weights)), None)


def known_crash(case: Case, adapter: str, signal: str | None) -> KnownBug | None:
    """The registry's crash entry for this pair and this signal (None: any signal), or None.
    A crash comes before any weights are read: its condition is on the case (``shows`` is
    asked with no weights)."""
    return next((b for b in KNOWN_BUGS if b.crash is not None and b.applies(case, adapter, {})
                 and (signal is None or b.crash == signal)), None)


def for_adapter(adapter: str) -> list[KnownBug]:
    """The registry's entries of one adapter (the ``adapters`` table, docs)."""
    return [b for b in KNOWN_BUGS if b.adapter == adapter]
