"""A reproducer's folder, ``repro/<case>/<adapter>/`` in a report folder (or ``repro --out``):

- ``repro.py`` (:func:`harness.repro.render.script`) and, unless its data are small enough to
  be written into it, ``data.npz`` beside it (plain arrays, read with ``allow_pickle=False``);
- ``model.tflite`` (LiteRT) or ``model.pte`` (ExecuTorch): the converted model the adapter ran;
- ``model.onnx`` and the ONNX backend-test folder ``test_data_set_0/`` (``input_N.pb``,
  ``output_N.pb``: the graph's inputs as fed, its outputs from the float64 reference in the
  model's type) for an adapter that runs an ONNX graph;
- ``README.md``, ready to paste into the framework's tracker; where no script can be written
  (the adapter records nothing, a feature the equations lack, too large) it says so and why.

Names come from case and adapter names: reduced to ``[A-Za-z0-9._-]``, never starting with a
dot, at most :data:`MAX_NAME` characters; every path is checked to lie inside the folder it is
written to. A reproducer is at most :data:`~harness.repro.record.MAX_BYTES` (larger: a README
saying so), a report's reproducers :data:`MAX_TOTAL`. Writes files only: the ONNX test data
are encoded here (TensorProto's wire format), no framework is imported.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from harness import known_bugs, safe_files
from harness.families import FAMILIES, TITLE_PREFIX, TRACKERS
from harness.npz import save_npz, write_text
from harness.repro import questions, render
from harness.repro.quote import md_code, md_text
from harness.repro.record import MAX_BYTES, ReproRecord

MAX_NAME = 80
MAX_TOTAL = 256 * 2**20  # every reproducer of one report

def safe_name(text: str, limit: int = MAX_NAME) -> str:
    """A file name from ``text``: ``[A-Za-z0-9._-]`` only, no leading dot, at most ``limit``."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.")[:limit].rstrip("_.")
    return name or "x"


def inside(root: Path, path: Path) -> Path:
    """``path``, asserted to lie inside ``root`` (neither a name nor a link takes it out)."""
    resolved, top = path.resolve(), root.resolve()
    if resolved != top and top not in resolved.parents:
        raise ValueError(f"{path} lies outside {root}")
    return path


def issue_url(upstream: str) -> str:
    """owner/repo#N -> its GitHub URL (harness.known_bugs.link); anything else as it is."""
    return known_bugs.link(upstream.strip()) or upstream.strip()


# a URL given as the upstream id, linked only where it can end no Markdown link it sits in
_PLAIN_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+")


def upstream_markdown(upstream: str) -> str:
    """The case's ``upstream:`` text as one line of Markdown: a link where it is an
    owner/repo#N id or a plain URL, else the text escaped (it may hold anything)."""
    url = issue_url(upstream)
    if _PLAIN_URL.fullmatch(url):
        return f"[{md_text(upstream.strip())}]({url})"
    return md_text(upstream.strip())


# ONNX backend-test data ------------------------------------------------------------------------

# TensorProto.DataType numbers (onnx.proto)
_ONNX_TYPES = {np.dtype(np.float32): 1, np.dtype(np.int32): 6, np.dtype(np.int64): 7,
               np.dtype(np.float16): 10, np.dtype(np.float64): 11}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tensor_proto(array: np.ndarray, name: str) -> bytes:
    """A serialized onnx TensorProto (dims 1, data_type 2, name 8, raw_data 9; little-endian
    raw data) of ``array``: what ``onnx.numpy_helper.from_array(array, name)`` writes."""
    a = np.ascontiguousarray(array)
    out = bytearray()
    for d in a.shape:
        out += b"\x08" + _varint(int(d))
    out += b"\x10" + _varint(_ONNX_TYPES[a.dtype])
    encoded = name.encode()
    out += b"\x42" + _varint(len(encoded)) + encoded
    raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    out += b"\x4a" + _varint(len(raw)) + raw
    return bytes(out)


def _axes(a: np.ndarray, src: str, dst: str) -> np.ndarray:
    return np.transpose(a, [src.index(letter) for letter in dst])


def onnx_expected(record: ReproRecord) -> dict[str, np.ndarray]:
    """The graph's outputs by name from the float64 reference, in the model's type and the
    handed layout's axis order: ``Y{k}``, ``Y_h{k}`` (``Y_c{k}``)."""
    call, spec = record.handed.call, record.spec
    N, T, H = spec["batch"], spec["seq_len"], spec["hidden_size"]
    D = len(spec["directions"])
    dtype = np.dtype(call["dtype"])
    if call.get("read") == "module":  # an exported nn.LSTM / nn.GRU: y, h_n (, c_n)
        L = spec["num_layers"]
        values = [record.reference[f"y{L - 1}"], record.reference["h_n"]]
        if "c_n" in record.reference:
            values.append(record.reference["c_n"])
        return {name: v.astype(dtype) for name, v in zip(call["outputs"], values, strict=True)}
    out = {}
    for k in range(spec["num_layers"]):
        y = record.reference[f"y{k}"].reshape(N, T, D, H)
        out[f"Y{k}"] = _axes(y, "NTDH", call["y_axes"]).astype(dtype)
        for state in ("h", "c"):
            full = record.reference.get(f"{state}_n")
            if full is not None:
                out[f"Y_{state}{k}"] = _axes(full[k * D:(k + 1) * D], "DNH",
                                              call["state_axes"]).astype(dtype)
    return out


def _onnx_test_set(folder: Path, record: ReproRecord) -> None:
    call = record.handed.call
    feeds = {name[len("feed/"):]: v for name, v in record.handed.arrays.items()
             if name.startswith("feed/")}
    data = safe_files.folder(folder / "test_data_set_0", top=folder)
    for n, name in enumerate(call["inputs"]):
        safe_files.write_bytes(data / f"input_{n}.pb", tensor_proto(feeds[name], name), folder)
    expected = onnx_expected(record)
    for n, name in enumerate(call["outputs"]):
        safe_files.write_bytes(data / f"output_{n}.pb", tensor_proto(expected[name], name),
                               folder)


# README --------------------------------------------------------------------------------------

def _framework(record: ReproRecord) -> str:
    call = record.handed.call if record.handed is not None else {}
    return str(call.get("framework") or call.get("runtime") or record.adapter)


def _finding(record: ReproRecord, agreeing: list[str]) -> list[str]:
    f = record.first
    if f is not None:
        where = f"{md_code(f['output'])} layer {f['layer']}"
        where += "" if f["direction"] is None else f", direction {f['direction']}"
        where += "" if f["t"] is None else f", step t={f['t']}"
        lines = [f"- first diverging: {where}"]
    elif record.status == "unavailable":
        lines = ["- the harness did not run this pair (unavailable, reason below): the "
                 "reproducer runs what the adapter would hand the framework"]
    else:
        lines = [f"- verdict: {md_text(record.status)}"
                 + (f" ({md_text(record.detail)})" if record.detail else "")]
    lines += [f"- step-local reading: {md_text(record.step_reading)}",
              "- adapters that agree with float64 on this case: "
              + (", ".join(md_code(a) for a in agreeing) if agreeing else "none in this run"),
              _question(record).judged(record)]
    if record.reason:
        lines.append(f"- the harness's reason: {md_text(record.reason)}")
    return lines


def _question(record: ReproRecord) -> questions.Question:
    """The question the README describes: the record's, or the tolerance question's words
    where this harness has no script for its key (no script is written then: :func:`why_not`)."""
    return questions.of(record) or questions.QUESTIONS["tolerance"]


def readme(record: ReproRecord, agreeing: list[str], written: bool, why_not: str = "") -> str:
    spec = record.spec
    cell = spec["cell"].upper()
    what = (f"{cell}, {spec['dir_mode']}, {spec['num_layers']} layer(s), input {spec['input_size']}"
            f", hidden {spec['hidden_size']}, batch {spec['batch']}, {spec['seq_len']} steps, "
            f"{spec['dtype']}")
    framework = _framework(record)
    verb = "agrees with" if record.status in ("pass", "looks fixed") else "diverges from"
    title = (f"{record.title}: {cell} output {verb} the float64 equations "
             f"({spec['dir_mode']}, {spec['dtype']})")
    title = _question(record).readme_title(record, title)
    lines = [f"# {TITLE_PREFIX.get(framework, '')}{md_text(title)}", ""]
    if record.upstream:
        lines += [f"Known upstream bug: {upstream_markdown(record.upstream)}.", ""]
    if not written:
        lines += [f"A reproducer is not available for {md_code(record.adapter)} on case "
                  f"{md_code(record.case)}: {md_text(why_not)}.", ""]
    else:
        tracker = TRACKERS.get(framework)
        lines += [f"Case {md_code(record.case)} ({md_text(what)}), adapter "
                  f"{md_code(record.adapter)}" + (f"; tracker: {tracker}" if tracker else "")
                  + ".", "",
                  "## Reproduce", "",
                  f"Needs Python with NumPy and {md_text(render.needs(record))}; nothing is "
                  "downloaded.",
                  "", "```", "python repro.py", "```", ""]
        lines += [_question(record).readme_text(record), ""]
        converted = FAMILIES[record.handed.family].converted
        if converted is not None:
            lines += [f"`{converted[0]}` is {converted[1]}: the script runs it again as the "
                      "harness ran it (the same inputs, op resolver or kernels, and reading of "
                      "its outputs); it does not convert the model again.", ""]
        if record.handed.call.get("exporter"):
            lines += [f"`model.onnx` is the graph `torch.onnx.export` "
                      f"({md_text(record.handed.call['exporter'])}) wrote for the module and "
                      "ONNX Runtime ran; the script runs it again (it does not export it "
                      "again).", ""]
        if record.handed.family == "onnx":
            lines += ["`model.onnx` with `test_data_set_0/` is an ONNX backend-test folder "
                      "(inputs as fed, outputs from the float64 equations in the model's type): "
                      "`onnx_test_runner` and ONNX's backend test runner read it.", ""]
    lines += ["## What the harness found", "", *_finding(record, agreeing), "", "## Versions", ""]
    lines += ([f"- {md_text(k)}: {md_text(v)}" for k, v in sorted(record.versions.items())]
              or ["- (not recorded: the pair did not run; repro.py prints them)"])
    return "\n".join(lines) + "\n"


# The folder ----------------------------------------------------------------------------------

def why_not(record: ReproRecord) -> str:
    """Why no script is written for ``record``, or ""."""
    if record.unsupported:
        return record.unsupported
    if record.handed is None:
        return ("this adapter does not record what it hands its framework (the reproducers "
                "cover the Flax, PyTorch, eager Keras (on TensorFlow, torch, OpenVINO), "
                "ONNX-graph, LiteRT, ExecuTorch and MLX adapters; the TensorFlow, Keras-on-JAX "
                "and Keras-cuDNN ones record nothing yet), or it raised before its framework "
                "ran, so there is nothing to run again")
    if record.handed.family not in FAMILIES:
        return f"no renderer for the framework family {record.handed.family!r}"
    if questions.of(record) is None:
        return f"no script answers its judge's question {record.question.key[:80]!r}"
    if record.nbytes > MAX_BYTES:
        return (f"its data would be {record.nbytes / 2**20:.1f} MiB, more than the "
                f"{MAX_BYTES // 2**20} MiB a reproducer may hold; a smaller case shows the same")
    return ""


def write_one(root: Path, record: ReproRecord, agreeing: list[str] = (),
              folder_name: tuple[str, str] | None = None) -> Path:
    """Write ``record``'s folder under ``root`` (``root/<case>/<adapter>``, or the names given)
    and return it."""
    case_dir, adapter_dir = folder_name or (safe_name(record.case), safe_name(record.adapter))
    folder = inside(root, root / case_dir / adapter_dir)
    safe_files.folder(folder, top=root)
    why = why_not(record)
    if not why:
        text = render.script(record)
        arrays = render.data_arrays(record)
        if not render.inline(arrays):
            save_npz(folder / "data.npz", arrays, root)
        write_text(folder / "repro.py", text, root)
        for name, data in record.handed.files.items():
            safe_files.write_bytes(inside(root, folder / safe_name(name)), data, root)
        if record.handed.family == "onnx":
            _onnx_test_set(folder, record)
    write_text(folder / "README.md", readme(record, list(agreeing), not why, why), root)
    return folder


def write_all(root: Path, records: list[tuple[ReproRecord, list[str]]]) -> list[Path]:
    """Every record's folder under ``root`` (``repro/`` of a report), distinct names for case
    names that reduce to the same one; past :data:`MAX_TOTAL` bytes in all, README-only
    folders saying so."""
    written: list[Path] = []
    used: set[tuple[str, str]] = set()
    total = 0
    for record, agreeing in records:
        case_dir, adapter_dir = safe_name(record.case), safe_name(record.adapter)
        n = 1
        while (case_dir, adapter_dir) in used:
            n += 1
            case_dir = f"{safe_name(record.case, MAX_NAME - 4)}-{n}"
        used.add((case_dir, adapter_dir))
        size = record.nbytes
        if total + size > MAX_TOTAL:
            record.handed = None  # README only, with the reason
            record.unsupported = (f"the report's reproducers reached {MAX_TOTAL // 2**20} MiB; "
                                  "rnn-harness repro writes this one on its own")
        total += size
        written.append(write_one(root, record, agreeing, (case_dir, adapter_dir)))
    return written
