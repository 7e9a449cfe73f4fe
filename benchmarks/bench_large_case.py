"""A large case as a user waits for it: ``rnn-harness run`` of seed 000's model in float64 with
only the reference, as a whole process, against a process running PyTorch's ``nn.LSTM`` (or
``nn.GRU``) in float64 on the same shapes (imports, weights and the forward included).

    python benchmarks/bench_large_case.py                  # B=8, T=1000, 3 rounds
    python benchmarks/bench_large_case.py --threads 1 --repeat 5
    python benchmarks/bench_large_case.py --smoke          # a tiny model, one round

The two commands run alternately, ``--repeat`` rounds, each in a fresh process; the table
gives each one's minimum and median wall time and the harness's ratio to torch (minimum to
minimum, median to median). The harness run writes its whole report (plots of passing pairs
are not drawn by default).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import measured, print_facts, table, thread_env

MODEL = {"input_size": 120, "hidden_size": 320, "num_layers": 5, "bidirectional": True}
SMOKE = {"input_size": 8, "hidden_size": 16, "num_layers": 2, "bidirectional": True}

TORCH = """
import sys, torch
cell, I, H, L, B, T = sys.argv[1], *map(int, sys.argv[2:7])
torch.manual_seed(0)
rnn = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](
    I, H, L, batch_first=True, bidirectional=True).double()
with torch.no_grad():
    y, _ = rnn(torch.randn(B, T, I, dtype=torch.float64))
print(float(y.abs().max()))
"""


def case_yaml(cell: str, model: dict, batch: int, seq_len: int) -> str:
    lines = [f"name: large-{cell}", f"cell: {cell}", "dtype: float64", "seed: 0",
             f"batch: {batch}", f"seq_len: {seq_len}"]
    lines += [f"{k}: {str(v).lower()}" for k, v in model.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cell", choices=("lstm", "gru"), default="lstm")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for BLAS and torch in both processes (default: inherited)")
    ap.add_argument("--smoke", action="store_true", help="a tiny model, one round")
    args = ap.parse_args()
    model = SMOKE if args.smoke else MODEL
    repeat = 1 if args.smoke else args.repeat
    batch, seq_len = (2, 5) if args.smoke else (args.batch, args.seq_len)
    print_facts([("threads", str(args.threads or "inherited")),
                 ("shapes", f"{args.cell} B={batch} T={seq_len} I={model['input_size']} "
                            f"H={model['hidden_size']} L={model['num_layers']} bidirectional")])
    env = thread_env(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        case = Path(tmp) / "large.yaml"
        case.write_text(case_yaml(args.cell, model, batch, seq_len))
        commands = {
            "rnn-harness run (reference)": [sys.executable, "-m", "harness", "run", str(case),
                                            "--adapters", "reference", "--quiet",
                                            "--out", str(Path(tmp) / "report")],
            "torch nn.LSTM/GRU float64": [sys.executable, "-c", TORCH, args.cell,
                                          *(str(v) for v in (model["input_size"],
                                                             model["hidden_size"],
                                                             model["num_layers"], batch,
                                                             seq_len))],
        }
        walls: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeat):
            for name, cmd in commands.items():
                m = measured(cmd, env)
                if m["rc"] not in (0, 1):
                    sys.exit(f"{name} failed (exit {m['rc']}): {m['stderr_tail']}")
                walls[name].append(m["wall"])
    harness, torch = (walls[n] for n in commands)
    rows = [[name, min(w), statistics.median(w)] for name, w in walls.items()]
    rows.append(["ratio harness / torch", min(harness) / min(torch),
                 statistics.median(harness) / statistics.median(torch)])
    print(table(rows, ["process", "min s", "median s"]))


if __name__ == "__main__":
    main()
