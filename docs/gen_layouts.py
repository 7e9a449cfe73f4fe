"""Regenerate the mapping tables in docs/layouts.md from the layout descriptions.

Every block between ``<!-- generated: NAME -->`` and ``<!-- end generated -->`` is replaced by
what ``rnn-harness layouts --layout NAME`` prints (``harness.report.layouts_md.mapping_markdown``)
for the small fixed cases in :data:`CASES`. Run from the repository root:

    python docs/gen_layouts.py          # rewrite docs/layouts.md
    python docs/gen_layouts.py --check  # exit 1 when docs/layouts.md is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "docs"):  # run from anywhere: this checkout's harness and _regenerate
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _regenerate import regenerate_docs  # noqa: E402

from harness.layouts import get_layout  # noqa: E402
from harness.report.layouts_md import mapping_markdown  # noqa: E402
from harness.spec import Case  # noqa: E402

DOC = ROOT / "docs" / "layouts.md"
BLOCK = re.compile(r"(?P<start><!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)"
                   r"(?P<end><!-- end generated -->)", re.S)

LSTM = {"cell": "lstm", "input_size": 3, "hidden_size": 4}
GRU = {"cell": "gru", "input_size": 3, "hidden_size": 4}

# layout -> the cases its tables are shown for: a plain LSTM and GRU, plus the options for which
# the layout has tensors or run-time behaviour of its own (projection, peepholes, forget bias).
CASES: dict[str, list[dict]] = {
    "torch": [{"name": "lstm", **LSTM}, {"name": "lstm-proj", **LSTM, "proj_size": 2},
              {"name": "gru", **GRU}],
    "keras": [{"name": "lstm", **LSTM}, {"name": "gru-reset-after", **GRU},
              {"name": "gru-reset-before", **GRU, "reset_after": False}],
    "keras-cudnn": [{"name": "lstm", **LSTM}, {"name": "gru", **GRU}],
    "tf-block": [{"name": "lstm-peepholes-fb1", **LSTM, "peepholes": True, "forget_bias": 1.0}],
    "tf-block-v2": [{"name": "lstm-peepholes-fb1", **LSTM, "peepholes": True,
                     "forget_bias": 1.0}],
    "tf-legacy": [{"name": "lstm-peepholes-proj", **LSTM, "peepholes": True, "proj_size": 2,
                   "forget_bias": 1.0},
                  {"name": "gru", **GRU, "reset_after": False}],
    "tf-cudnn": [{"name": "lstm-proj", **LSTM, "proj_size": 2}, {"name": "gru", **GRU}],
    "tf-cudnn-params": [{"name": "lstm", **LSTM}, {"name": "gru", **GRU}],
    "onnx": [{"name": "lstm-bidirectional-peepholes", **LSTM, "hidden_size": 2,
              "bidirectional": True, "peepholes": True},
             {"name": "gru", **GRU}],
    "flax": [{"name": "lstm-fb1", **LSTM, "forget_bias": 1.0}, {"name": "gru", **GRU}],
    "flax-nnx": [{"name": "lstm", **LSTM}, {"name": "gru", **GRU}],
    "mlx": [{"name": "lstm-fb1", **LSTM, "forget_bias": 1.0}, {"name": "gru", **GRU}],
}


def tables(name: str) -> str:
    """The generated text of block ``name``: the layout's tables for its cases."""
    layout = get_layout(name)
    parts = [mapping_markdown(layout, Case(**kw)) for kw in CASES[name]]
    return "\n".join(parts)


def regenerate(text: str) -> str:
    """``text`` with every generated block replaced by what the code gives now."""
    def fill(m: re.Match) -> str:
        return m["start"] + "\n" + tables(m["name"]) + "\n" + m["end"]

    return BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    return regenerate_docs(argv, description=__doc__.splitlines()[0], docs=[DOC],
                           regenerate=regenerate, script="docs/gen_layouts.py")


if __name__ == "__main__":
    raise SystemExit(main())
