"""Is LiteRT's full-integer LSTM bit-exact against the harness's integer reference
(harness/reference/litert_int8_lstm.py, docs/quantization.md "The integer reference")?

For each bundled quantized LSTM case (``cases-quantized/*.yaml``, ``cell: lstm``): the
``litert-int8`` adapter's conversion, run by the interpreter under each op resolver
(``BUILTIN_REF``: ``litert-int8-ref``'s; ``BUILTIN``: ``litert-int8``'s) on the case's own
input and on its calibration batches (inputs the grids were made from), every tensor every op
writes compared with the reference's to the bit. A row per case, resolver and tensor: the
values that differ at each step (``-`` where none does).

    PYTHONPATH=. python benchmarks/litert_int8_exactness.py
    python benchmarks/litert_int8_exactness.py --smoke      # one tiny LSTM
"""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

from _common import print_facts, table

from harness.adapters import get_adapter
from harness.cases import load_cases
from harness.prepare import prepare
from harness.quantization import calibration_inputs
from harness.reference.litert_int8_exact import compare
from harness.spec import Case

ROOT = Path(__file__).resolve().parents[1]
RESOLVERS = ("BUILTIN_REF", "BUILTIN")
SMOKE = Case(name="tiny", cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5,
             dtype="float32", quantization={"calibration_batches": 2})


def bundled_lstm_cases() -> list[Case]:
    """Every case of ``cases-quantized/`` with ``cell: lstm``."""
    return [c for f in sorted((ROOT / "cases-quantized").glob("*.yaml"))
            for c in load_cases(f) if c.cell == "lstm"]


def exactness(case: Case, resolvers: tuple[str, ...] = RESOLVERS) -> list[dict]:
    """One row per op resolver and tensor an op writes, over the case's input and its
    calibration batches: ``differing``, per step, summed over the inputs."""
    prep = prepare(case)
    adapter = get_adapter("litert-int8")
    model = adapter.convert(case, adapter.layout.to_native(prep.canonical, case,
                                                            adapter.native_dtype(case)))
    inputs = [prep.inputs.x, *calibration_inputs(case)]
    rows = []
    for resolver in resolvers:
        summed: dict[int, dict] = {}
        for x in inputs:
            differences, _ = compare(model, x, resolver)
            for d in differences:
                row = summed.setdefault(d.tensor, {
                    "case": case.name, "resolver": resolver, "op": f"{d.op} {d.op_name}",
                    "tensor": d.tensor, "differing": [0] * len(d.differing), "values": 0,
                    "max_steps": 0})
                row["differing"] = [a + b for a, b in zip(row["differing"], d.differing,
                                                          strict=True)]
                row["values"] += d.per_step * len(d.differing)
                row["max_steps"] = max(row["max_steps"], d.max_steps)
        for row in summed.values():
            row["exact"] = not any(row["differing"])
            row["inputs"] = len(inputs)
        rows += summed.values()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one tiny LSTM")
    args = parser.parse_args()
    print_facts([(d, importlib.metadata.version(d)) for d in ("tensorflow", "ai-edge-litert")])
    cases = [SMOKE] if args.smoke else bundled_lstm_cases()
    rows = [row for case in cases for row in exactness(case)]
    print(table([[r["case"], r["resolver"], r["op"], r["tensor"], r["inputs"], r["values"],
                  " ".join(map(str, r["differing"])) if not r["exact"] else "-",
                  r["max_steps"]] for r in rows],
                ["case", "op resolver", "op", "tensor", "inputs", "values compared",
                 "differing per step", "max steps apart"]))
    exact = sum(r["exact"] for r in rows)
    print(f"\nbit-exact: {exact} of {len(rows)} tensors over {len(cases)} case(s)")


if __name__ == "__main__":
    main()
