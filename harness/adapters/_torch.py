"""What the PyTorch adapters share: importing torch, and running ``nn.LSTM`` / ``nn.GRU`` (layout
``torch``) on a device, packed sequences for lengths.

Gradient cases run the backward pass with autograd: x, h0, c0 are leaf tensors in the case
dtype, the loss is the one in :mod:`harness.data` and ``params`` are the ``.grad`` of the module's
``state_dict`` tensors (native names; the adapter base maps them to canonical blocks).
"""

from __future__ import annotations

import warnings

import numpy as np

from harness.adapters.base import Adapter
from harness.data import Gradients, Inputs, Outputs
from harness.errors import Unavailable
from harness.families.torch import build_rnn, call_rnn
from harness.frameworks.torch import torch_precision_flags
from harness.handed import Handed
from harness.spec import Case

TORCH_DTYPES = {"float64": "float64", "float32": "float32", "float16": "float16",
                "bfloat16": "bfloat16"}


def import_torch():
    try:
        import torch
    except ImportError as exc:
        raise Unavailable(f"torch is not installed ({exc}); pip install torch==2.13.0") from None
    return torch


# what nn.LSTM / nn.GRU cannot do, on any device
NN_REASONS = {
    "peepholes": "PyTorch nn.LSTM has no peephole connections",
    "gru_reset_after": "PyTorch nn.GRU is reset-after only "
                       "(reset_after=false needs reset-before)",
    "directions": "PyTorch has no reverse-only direction",
    "cell_clip": "PyTorch nn.LSTM has no cell clipping",
    "gate_clip": "PyTorch nn.LSTM/nn.GRU have no gate pre-activation clipping",
    "input_forget": "PyTorch nn.LSTM has no coupled input-forget gate",
    "recurrent_activations": "PyTorch recurrent activations are fixed to sigmoid",
}


class TorchRNN(Adapter):
    """``nn.LSTM`` / ``nn.GRU`` on ``torch_device``; an adapter adds its name, capabilities and
    availability check."""

    framework = "torch"
    requires = ("torch",)
    layout_name = "torch"
    native_in_case_dtype = True
    torch_device = "cpu"

    def precision_flags(self) -> dict[str, object]:
        return torch_precision_flags(import_torch())

    def build(self, case: Case, native: dict[str, np.ndarray]):
        """The nn.LSTM / nn.GRU module holding ``native`` (the torch state_dict), case dtype."""
        torch = import_torch()
        dtype = getattr(torch, TORCH_DTYPES[case.dtype])
        # built in the case dtype: load_state_dict copies into it (build_rnn, which a
        # reproducer runs too)
        name = "LSTM" if case.cell_kind.has_cell_state else "GRU"
        with warnings.catch_warnings():  # a read-only native: only read (copied in) here
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            return build_rnn(torch, name, self.module_kwargs(case), native, dtype,
                             self.torch_device)

    def module_kwargs(self, case: Case) -> dict:
        """nn.LSTM / nn.GRU's constructor arguments, but dtype and device (JSON values)."""
        kwargs = dict(input_size=case.input_size, hidden_size=case.hidden_size,
                      num_layers=case.num_layers, bias=True, batch_first=True,
                      bidirectional=case.num_directions == 2)
        if case.cell_kind.has_cell_state:
            kwargs["proj_size"] = case.proj_size
        return kwargs

    def run_settings(self) -> dict:
        """Process settings ``_run`` holds while it runs (a reproducer sets them too)."""
        return {}

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        """The module's class and constructor arguments, its state_dict as loaded, the call
        (packed sequences for lengths, inputs cast to the case dtype on the device)."""
        return Handed("torch", {"framework": "torch",
                                "module": "LSTM" if case.cell_kind.has_cell_state else "GRU",
                                "kwargs": self.module_kwargs(case), "dtype": case.dtype,
                                "device": self.torch_device,
                                "lengths": inputs.seq_lengths is not None,
                                **self.run_settings()},
                      arrays={k: np.asarray(v) for k, v in native.items()})

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        out = self._forward(case, native, inputs)
        out.handed = self.hand(case, native, inputs)
        return out

    def _forward(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        torch = import_torch()
        dtype = getattr(torch, TORCH_DTYPES[case.dtype])
        grads = self.computes_gradients(case)
        # train mode for a backward pass: cuDNN refuses RNN backward in eval mode ("cudnn RNN
        # backward can only be called in training mode"); dropout is 0, so nothing else changes
        module = self.build(case, native).train(grads)

        def t(a, leaf: bool = False):
            # leaves: x, h0, c0 get .grad = dL/d(that input) when the case asks for gradients
            return torch.from_numpy(np.ascontiguousarray(a)).to(
                device=self.torch_device, dtype=dtype).requires_grad_(leaf and grads)

        def n(a):
            return a.detach().to(device="cpu", dtype=torch.float64).numpy()

        x, h0 = t(inputs.x, True), t(inputs.h0, True)
        c0 = t(inputs.c0, True) if case.cell_kind.has_cell_state else None
        with torch.enable_grad() if grads else torch.no_grad(), warnings.catch_warnings():
            # forward only: no graph. oneDNN's note that it leaves projections to the plain
            # kernel is about speed, not results: not for the user's terminal
            warnings.filterwarnings("ignore", "LSTM with projections is not supported with oneDNN")
            # padded steps come back as zeros (dy is zero there too: nothing flows back)
            y, hc = call_rnn(torch, module, x, (h0, c0) if c0 is not None else h0,
                             inputs.seq_lengths, case.seq_len)
            h_n, c_n = hc if case.cell_kind.has_cell_state else (hc, None)
            if grads:  # the loss of harness.data
                loss = (y * t(inputs.dy)).sum() + (h_n * t(inputs.dh_n)).sum()
                if c_n is not None:
                    loss = loss + (c_n * t(inputs.dc_n)).sum()
                loss.backward()
        out = Outputs(y=n(y), h_n=n(h_n), c_n=None if c_n is None else n(c_n))
        if grads:
            params = dict(module.named_parameters())  # named as the state_dict (native names)
            out.grads = Gradients(
                dx=n(x.grad), dh0=n(h0.grad), dc0=None if c0 is None else n(c0.grad),
                params={k: n(params[k].grad) for k in native})
        return out
