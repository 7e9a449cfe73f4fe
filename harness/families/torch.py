"""The ``torch`` family: how the PyTorch adapters (harness/adapters/_torch.py, torch-cudnn)
build ``nn.LSTM`` / ``nn.GRU`` from a state_dict (:func:`build_rnn`), call it, packed for
lengths (:func:`call_rnn`), and hold cuDNN's TF32 switch for RNNs (:func:`set_cudnn_rnn_tf32`),
pasted into their reproducers (:func:`source`) so that a script runs PyTorch by the very code
the adapter ran. The pasted part takes ``torch`` as an argument: this module imports nothing
of a framework. :data:`FAMILY` is the script's framework part around it.
"""

from __future__ import annotations

from harness.families.paste import Family, below

MARKER = "# --- nn.LSTM / nn.GRU as the harness runs it (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


SCRIPT = '''import torch  # noqa: E402


def framework_versions():
    return {"torch": torch.__version__}


def device():
    if CALL["device"] == "cuda":
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, cuDNN " \\
               f"{torch.backends.cudnn.version()})"
    return "cpu, torch.compile (Inductor)" if "compile" in CALL else "cpu"


def run_framework():
    """The module built and called as the harness did (build_rnn, call_rnn, above)."""
    if "cudnn_rnn_tf32" in CALL:
        set_cudnn_rnn_tf32(torch, CALL["cudnn_rnn_tf32"])
    dtype, dev = getattr(torch, CALL["dtype"]), CALL["device"]
    module = build_rnn(torch, CALL["module"], CALL["kwargs"], HANDED, dtype, dev)
    if "compile" in CALL:  # as the torch-compile adapter ran it: dynamo with allow_rnn, Inductor
        from torch import _dynamo

        _dynamo.config.allow_rnn = CALL["compile"]["allow_rnn"]
        module = torch.compile(module)

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=dev, dtype=dtype)

    def n(a):
        return a.detach().to(device="cpu", dtype=torch.float64).numpy()

    state = (t(H0), t(C0)) if C0 is not None else t(H0)
    with torch.no_grad():
        y, hc = call_rnn(torch, module, t(X), state, LENGTHS if CALL["lengths"] else None,
                         SPEC["seq_len"])
    h_n, c_n = hc if C0 is not None else (hc, None)
    return {SPEC["num_layers"] - 1: n(y)}, n(h_n), (None if c_n is None else n(c_n))
'''

FAMILY = Family(
    "torch", framework=lambda call: SCRIPT, needs=lambda call: "PyTorch (pip install torch)",
    pasted=(source,), trackers={"torch": "https://github.com/pytorch/pytorch/issues"})


# --- nn.LSTM / nn.GRU as the harness runs it (pasted into repro.py) ---
import numpy as np  # noqa: E402


def build_rnn(torch, module_name, kwargs, state_dict, dtype, device):
    """``torch.nn.<module_name>(**kwargs)`` in ``dtype`` on ``device``, its ``state_dict`` loaded
    (strict) from NumPy arrays, in eval mode."""
    module = getattr(torch.nn, module_name)(**kwargs, dtype=dtype, device=device)
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v))
                            for k, v in state_dict.items()}, strict=True)
    return module.eval()


def call_rnn(torch, module, x, state, lengths, seq_len):
    """(y, final state) of ``module`` on ``x`` [B, T, I] (batch first) from ``state`` (h0, or
    (h0, c0)); with ``lengths`` (per sequence) as a packed sequence, y padded back to
    ``seq_len`` steps (zeros at padded steps)."""
    if lengths is None:
        return module(x, state)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        x, torch.as_tensor(lengths), batch_first=True, enforce_sorted=False)
    y, hc = module(packed, state)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=seq_len)
    return y, hc


def set_cudnn_rnn_tf32(torch, allow):
    """Allow or forbid TF32 in cuDNN RNNs (the per-op API of torch >= 2.9, else the legacy
    flag); returns a function that puts the previous setting back."""
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is not None and hasattr(rnn, "fp32_precision"):
        before = rnn.fp32_precision
        rnn.fp32_precision = "tf32" if allow else "ieee"

        def restore():
            rnn.fp32_precision = before
    else:
        before = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = allow

        def restore():
            torch.backends.cudnn.allow_tf32 = before
    return restore
