"""Routes to a float64 GPU reference, timed on seed 000's model (5 bidirectional LSTM layers,
input 120, hidden 320; B=32, T=1000; float64; the case's generated weights, seed 0), and checked
against the generic reference (issue 35):

1. ``generic (torch)``: ``harness.reference`` on torch CUDA tensors, the code the NumPy
   reference is (~20 small kernels a step);
2. ``cuDNN``: ``torch.nn.LSTM`` in float64, the peer (the ratio column divides by it);
3. ``fused ...``: ``harness.reference.fast_cuda``: a step is one cuBLAS product and one fused
   element-wise kernel, the two directions on their own streams; ``eager`` queues every step
   from Python, ``graphs`` captures each direction's step loop as a CUDA graph at every call
   (capture counted: a run captures once) and replays it for every layer, ``graphs replayed``
   replays graphs captured at the first call (what a second run of the same shapes would cost);
4. ``check ...``: the fused routes on small cases (LSTM, GRU reset after and before, two
   bidirectional layers, variable lengths, forward and backward) against the NumPy reference;
5. the same model as a GRU (``--no-gru``: not);
6. ``reference-cuda adapter``: the adapter as a run calls it, on the model's float32 case
   (transfers included); ``prepare, --device gpu``: a GPU run's float64 reference and float32
   noise floor on the model's float32 case (the generic code on torch CUDA tensors).

Every time: torch and CuPy synchronised before and after; ``first`` is the first call (NVRTC
compilation, cuDNN plans, capture), ``steady`` the minimum of ``--repeat`` more. ``max|diff|``:
against the generic reference's outputs (big model) or the NumPy reference's (small cases),
every output and gradient; ``ok`` says max |diff| / (1 + |reference|) <= 1e-12. A route that
fails prints its traceback's last lines and the others go on.

    PYTHONPATH=. python benchmarks/gpu_reference_routes.py --out /tmp/routes.json
    python benchmarks/gpu_reference_routes.py --smoke    # tiny shapes; no GPU: CPU stand-ins

Without a GPU (``--smoke`` on CPU) the generic and nn.LSTM routes run on torch CPU tensors and
the fused routes on the NumPy twin of their kernels (``tests/support/fast_cuda_twin.py``): the
script's own bookkeeping, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (puts the repository on sys.path)
import numpy as np
from _common import ROOT, print_facts, table

from harness import data, params, reference
from harness.data import Inputs, Outputs
from harness.params import Canonical
from harness.reference import cuda_device, fast_cuda
from harness.spec import Case

TOL = 1e-12
MODEL = dict(name="seed000-float64", cell="lstm", input_size=120, hidden_size=320,
             num_layers=5, bidirectional=True, dtype="float64", seed=0)
SMALL_CHECKS = {  # name: case fields over B=8, T=40, H=24, I=16, 2 bidirectional layers
    "lstm": dict(cell="lstm"),
    "gru reset_after": dict(cell="gru", reset_after=True),
    "gru reset_before": dict(cell="gru", reset_after=False),
}


class Bench:
    """The rows of the table, the time budget, and the devices."""

    def __init__(self, budget: float, repeat: int, smoke: bool) -> None:
        import torch

        self.torch = torch
        self.start, self.budget, self.repeat = time.perf_counter(), budget, repeat
        self.rows: list[dict[str, Any]] = []
        self.cuda = torch.cuda.is_available()
        self.torch_device = "cuda" if self.cuda else "cpu"
        self.cupy = None
        if self.cuda:
            import cupy

            self.cupy = cupy
        elif not smoke:
            raise SystemExit("no CUDA GPU visible to torch: run with --smoke for the CPU stand-ins")

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.cupy.cuda.Device().synchronize()

    def timed(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        self.sync()
        t = time.perf_counter()
        result = fn()
        self.sync()
        return time.perf_counter() - t, result

    def measure(self, route: str, what: str, fn: Callable[[], Any], repeat: int | None = None,
                reference_out: dict[str, np.ndarray] | None = None,
                to_numpy: Callable[[Any], dict[str, np.ndarray]] | None = None,
                min_left: float = 5.0) -> Any:
        """One row: first call, min of ``repeat`` more (fewer when the budget runs out), and
        the difference of the first call's outputs from ``reference_out``."""
        row: dict[str, Any] = {"route": route, "what": what}
        self.rows.append(row)
        if self.left() < min_left:
            row["note"] = "skipped: time budget spent"
            return None
        try:
            row["first_s"], out = self.timed(fn)
            steady = []
            for _ in range(self.repeat if repeat is None else repeat):
                if self.left() < min_left + 2 * row["first_s"]:
                    row["note"] = "fewer repeats: time budget"
                    break
                steady.append(self.timed(fn)[0])
            row["steady_s"] = min(steady) if steady else None
            row["repeats"] = len(steady)
            if reference_out is not None and to_numpy is not None:
                row.update(differences(to_numpy(out), reference_out))
            return out
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
            print(f"--- {route} / {what} failed:", file=sys.stderr)
            print("".join(traceback.format_exc().splitlines(keepends=True)[-12:]),
                  file=sys.stderr)
            return None


def differences(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> dict[str, Any]:
    """max |diff| over every output both have, the name where it is, and the scaled test."""
    worst, where, scaled = 0.0, None, 0.0
    for k in sorted(set(got) & set(want)):
        d = np.abs(np.asarray(got[k], dtype=np.float64) - want[k])
        m = float(d.max(initial=0.0))
        if m >= worst:
            worst, where = m, k
        scaled = max(scaled, float((d / (1.0 + np.abs(want[k]))).max(initial=0.0)))
    missing = sorted(set(want) - set(got))
    return {"max_abs_diff": worst, "at": where, "max_scaled_diff": scaled,
            "ok": scaled <= TOL if not missing else None,  # None: some outputs not compared
            "compared": len(set(got) & set(want)),
            **({"missing": missing} if missing else {})}


def named(out: Outputs, convert: Callable[[Any], np.ndarray]) -> dict[str, np.ndarray]:
    arrays = dict(out.named())
    for layer, y in enumerate(out.y_layers or []):
        arrays[f"y_layers[{layer}]"] = y
    if out.grads is not None:
        arrays |= out.grads.named()
    return {k: convert(v) for k, v in arrays.items()}


def moved(case: Case, canonical: Canonical, inputs: Inputs, to: Callable[[np.ndarray], Any]
          ) -> tuple[Canonical, Inputs]:
    def dev(a: np.ndarray | None) -> Any:
        return None if a is None else to(np.ascontiguousarray(a, dtype=np.float64))

    return Canonical({k: dev(v) for k, v in canonical.tensors.items()}), inputs.mapped(dev)


# The routes ------------------------------------------------------------------------------------

def generic_route(bench: Bench, case: Case, canonical: Canonical, inputs: Inputs
                  ) -> tuple[dict | None, dict | None]:
    """harness.reference on torch tensors: forward twice, forward+backward once. Returns both
    results as NumPy arrays (the big model's baseline)."""
    torch = bench.torch
    can, inp = moved(case, canonical, inputs,
                     lambda a: torch.from_numpy(a).to(bench.torch_device))

    def to_numpy(out: Outputs) -> dict[str, np.ndarray]:
        return named(out, lambda a: a.detach().cpu().numpy())

    fwd_case = case.model_copy(update={"gradients": False})
    out = bench.measure("generic (torch)", "forward",
                        lambda: reference.run(fwd_case, can, inp), repeat=0, min_left=30)
    forward = to_numpy(out) if out is not None else None

    def both() -> Outputs:
        o = reference.run(case, can, inp)
        o.grads = reference.gradients(case, can, inp)
        return o

    out, first = None, bench.rows[-1].get("first_s")
    if first is not None and first < bench.left() / 4:  # the backward costs ~3 forwards
        out = bench.measure("generic (torch)", "forward+backward", both, repeat=0, min_left=30)
    else:
        bench.rows.append({"route": "generic (torch)", "what": "forward+backward",
                           "note": "skipped: " + ("time budget" if first else "forward failed")})
    return forward, (to_numpy(out) if out is not None else None)


def cudnn_route(bench: Bench, case: Case, canonical: Canonical, inputs: Inputs,
                forward: dict | None, full: dict | None) -> None:
    """nn.LSTM / nn.GRU in float64 (cuDNN on a GPU) holding the case's weights."""
    torch = bench.torch
    from harness.layouts import get_layout

    native = get_layout("torch").to_native(canonical, case)
    cls = torch.nn.LSTM if case.cell == "lstm" else torch.nn.GRU
    module = cls(case.input_size, case.hidden_size, num_layers=case.num_layers,
                 bidirectional=case.num_directions == 2, batch_first=True,
                 dtype=torch.float64, device=bench.torch_device)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in native.items()}, strict=True)
    dev = {k: None if v is None else torch.from_numpy(np.asarray(v)).to(bench.torch_device)
           for k, v in vars(inputs).items() if k != "seq_lengths"}
    state = (dev["h0"], dev["c0"]) if case.cell == "lstm" else dev["h0"]
    label = f"cuDNN nn.{cls.__name__}" if bench.cuda else f"torch CPU nn.{cls.__name__}"

    def outputs(y: Any, h: Any) -> dict[str, np.ndarray]:
        got = {"y": y.detach().cpu().numpy()}
        if case.cell == "lstm":
            got |= {"h_n": h[0].detach().cpu().numpy(), "c_n": h[1].detach().cpu().numpy()}
        else:
            got["h_n"] = h.detach().cpu().numpy()
        return got

    def fwd() -> dict[str, np.ndarray]:
        with torch.no_grad():
            y, h = module(dev["x"], state)
        bench.sync()
        return y, h

    bench.measure(label, "forward", fwd, reference_out=forward,
                  to_numpy=lambda r: outputs(*r))

    x = dev["x"].clone().requires_grad_(True)

    def both() -> None:
        module.zero_grad(set_to_none=True)
        x.grad = None
        y, h = module(x, state)
        loss = (y * dev["dy"]).sum()
        if case.cell == "lstm":
            loss = loss + (h[0] * dev["dh_n"]).sum() + (h[1] * dev["dc_n"]).sum()
        else:
            loss = loss + (h * dev["dh_n"]).sum()
        loss.backward()
        return {"dx": x.grad.detach().cpu().numpy()}

    bench.measure(label, "forward+backward", both, reference_out=full, to_numpy=lambda r: r)


def fused_routes(bench: Bench, device: Any, case: Case, canonical: Canonical, inputs: Inputs,
                 forward: dict | None, full: dict | None, to: Callable, to_numpy: Callable,
                 label: str = "") -> None:
    """The fused-step routes: eager, graphs captured at every call, graphs replayed."""
    can, inp = moved(case, canonical, inputs, to)
    fwd_case = case.model_copy(update={"gradients": False})

    def convert(out: Outputs) -> dict[str, np.ndarray]:
        return named(out, to_numpy)

    for graphs, route in ((False, "fused eager"), (True, "fused graphs")):
        bench.measure(f"{route}{label}", "forward",
                      lambda g=graphs: fast_cuda.run(device, fwd_case, can, inp, graphs=g),
                      reference_out=forward, to_numpy=convert)
        bench.measure(f"{route}{label}", "forward+backward",
                      lambda g=graphs: fast_cuda.run(device, case, can, inp, graphs=g),
                      reference_out=full, to_numpy=convert)

    # captured once (at the first call), replayed at every later one
    fast = fast_cuda.FastReference(device, case, inp, graphs=True)
    bench.measure(f"fused graphs replayed{label}", "forward",
                  lambda: fast.forward(can, inp), reference_out=forward, to_numpy=convert)

    def both() -> Outputs:
        tapes: list = []
        out = fast.forward(can, inp, tapes)
        out.grads = fast.gradients(can, inp, tapes)
        return out

    bench.measure(f"fused graphs replayed{label}", "forward+backward", both,
                  reference_out=full, to_numpy=convert)


def small_checks(bench: Bench, device: Any, to: Callable, to_numpy: Callable) -> None:
    """Each fused route on small cases against the NumPy reference."""
    for name, fields in SMALL_CHECKS.items():
        case = Case(name="check", input_size=16, hidden_size=24, num_layers=2,
                    bidirectional=True, batch=8, seq_len=40, dtype="float64", seed=3,
                    initial_state="random", gradients=True,
                    seq_lengths=[40, 17, 1, 33, 40, 8, 25, 39], **fields)
        canonical, inputs = params.generate(case), data.generate(case)
        want = reference.run(case, canonical, inputs)
        want.grads = reference.gradients(case, canonical, inputs)
        want = named(want, np.asarray)
        can, inp = moved(case, canonical, inputs, to)
        for graphs, route in ((False, "eager"), (True, "graphs")):
            bench.measure(f"check {name}: fused {route}", "forward+backward vs NumPy",
                          lambda g=graphs, c=case, w=can, i=inp: fast_cuda.run(device, c, w, i,
                                                                               graphs=g),
                          repeat=0, reference_out=want,
                          to_numpy=lambda out: named(out, to_numpy))


def prepare_route(bench: Bench, model: dict) -> None:
    """What a GPU run's ``prepare`` costs on the model as its case has it (float32: the float64
    reference and the float32 noise floor, the generic code on torch tensors of the GPU)."""
    from harness import prepare

    case = Case(**model | {"dtype": "float32", "gradients": False})
    device = "gpu" if bench.cuda else "cpu"
    prep = bench.measure(f"prepare, --device {device} (float32 case)", "reference + noise floor",
                         lambda: prepare.prepare(case, limit=2**40, device=device), repeat=0,
                         min_left=45)
    if prep is not None:
        bench.rows[-1]["note"] = (f"on {prep.baseline_on}: reference "
                                  f"{prep.reference_seconds:.2f} s, noise floor "
                                  f"{prep.noise_floor_seconds:.2f} s")


def adapter_route(bench: Bench, model: dict) -> None:
    """The reference-cuda adapter as a GPU run calls it, on the model's float32 case (weights
    and inputs rounded to float32, computed in float64; moved to the GPU and back)."""
    if not bench.cuda:
        return
    from harness.adapters import get_adapter

    case = Case(**model | {"dtype": "float32", "gradients": False})
    adapter = get_adapter("reference-cuda")
    canonical, inputs = params.generate(case), data.generate(case)
    out = bench.measure("reference-cuda adapter (float32 case)", "forward",
                        lambda: adapter.run(case, canonical, inputs)[0], repeat=1)
    if out is not None:
        bench.rows[-1]["note"] = adapter.route_note(case) or "fused CUDA steps"


def fast_device(bench: Bench) -> tuple[Any, Callable, Callable]:
    """The fused routes' device, and the moves of arrays to it and back."""
    if bench.cuda:
        cupy = bench.cupy
        device = bench.measure("fused: its kernels", "NVRTC compile and load",
                               cuda_device.CupyDevice, repeat=0)
        if device is None:
            raise RuntimeError("the kernels did not compile (see above)")
        return device, cupy.asarray, cupy.asnumpy
    sys.path.insert(0, str(ROOT / "tests"))
    from support.fast_cuda_twin import NumpyDevice  # the CPU stand-in (--smoke without a GPU)

    return NumpyDevice(), np.asarray, np.asarray


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the rows and machine facts here (JSON)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3, help="timed calls after the first")
    ap.add_argument("--budget", type=float, default=170.0,
                    help="seconds: routes stop repeating, then are skipped, past it")
    ap.add_argument("--no-gru", dest="gru", action="store_false",
                    help="time the model as an LSTM only (not also as a GRU)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, one repeat")
    args = ap.parse_args()
    if args.smoke:
        args.batch, args.seq_len, args.repeat = 3, 12, 1
    bench = Bench(args.budget, args.repeat, args.smoke)
    torch = bench.torch
    facts = [("torch", torch.__version__), ("device", bench.torch_device)]
    if bench.cuda:
        facts += [("gpu", torch.cuda.get_device_name(0)),
                  ("cuDNN", str(torch.backends.cudnn.version())),
                  ("cupy", bench.cupy.__version__)]
    print_facts(facts)

    model = dict(MODEL, batch=args.batch, seq_len=args.seq_len, gradients=True)
    if args.smoke:
        model |= dict(input_size=6, hidden_size=5, num_layers=2)
    cells = ["lstm", "gru"] if args.gru else ["lstm"]
    device = to = to_numpy = None
    try:
        device, to, to_numpy = fast_device(bench)
    except Exception:
        print("--- the fused routes' device failed:", file=sys.stderr)
        traceback.print_exc()
    for cell in cells:
        case = Case(**model | {"cell": cell})
        canonical, inputs = params.generate(case), data.generate(case)
        label = "" if cell == "lstm" else " (GRU)"
        forward = full = None
        if cell == "lstm":
            forward, full = generic_route(bench, case, canonical, inputs)
            if bench.cuda:  # its tapes' memory back to the GPU
                bench.torch.cuda.empty_cache()
        try:
            cudnn_route(bench, case, canonical, inputs, forward, full)
        except Exception:
            traceback.print_exc()
        if device is not None:
            fused_routes(bench, device, case, canonical, inputs, forward, full, to, to_numpy,
                         label)
        if cell == "lstm" and device is not None:
            small_checks(bench, device, to, to_numpy)
    adapter_route(bench, model)
    prepare_route(bench, model)

    peers = {(r["what"], "GRU" in r["route"]): r.get("steady_s") for r in bench.rows
             if r["route"].startswith(("cuDNN", "torch CPU nn."))}
    lines = []
    for r in bench.rows:
        peer = peers.get((r["what"], "GRU" in r["route"]))
        own = r.get("steady_s") or r.get("first_s")  # one call only: its first
        ratio = own / peer if own and peer else None
        r["ratio_to_cudnn"] = ratio
        lines.append([r["route"], r["what"], r.get("first_s"), r.get("steady_s"), ratio,
                      r.get("max_abs_diff"), r.get("at"), r.get("ok"),
                      r.get("error") or r.get("note") or ""])
    print(table(lines, ["route", "what", "first s", "steady s", "/cuDNN", "max|diff|", "at",
                        "ok", "note"]))
    print(f"\n{time.perf_counter() - bench.start:.1f} s in all")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"facts": dict(facts), "model": model,
                                        "rows": bench.rows}, indent=1, default=str))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
