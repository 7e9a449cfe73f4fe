"""``torch-dynamic-int8``: ``nn.LSTM`` / ``nn.GRU`` through
``torch.ao.quantization.quantize_dynamic`` (qint8) into ``torch.ao.nn.quantized.dynamic.LSTM`` /
``GRU``, run on CPU.

The module must really be quantized. On torch 2.13 ``quantize_dynamic`` called on a bare
``nn.LSTM`` returns it unchanged, a float module (it swaps submodules, and a bare module has
none): so the layer is quantized inside a container and taken out again, and its weights are
checked to be packed qint8 (else the pair is an error row, "nothing was quantized").

The kernel (aten/src/ATen/native/RNN.cpp, ``QuantizedCellParamsDynamic``): each weight matrix
qint8, per tensor, symmetric (the default ``MinMaxObserver``); on CPU the input product runs once
over all steps and the recurrent product once per step, each through fbgemm's dynamic linear,
which quantizes its input to uint8 from the input's own range with ``reduce_range`` (0..127:
the quantized RNN modules of version 2 ask for it), float biases and gate arithmetic.

``torch.ao.quantization`` is deprecated (pytorch/pytorch#153892) and ``quantize_dynamic`` is
slated for removal in favour of torchao (pytorch/ao#2259): the adapter is kept while the
installed torch has it, and says so in its reason.
"""

from __future__ import annotations

import warnings

import numpy as np

from harness.adapters._torch import NN_REASONS, TorchRNN, import_torch
from harness.adapters.base import AdapterFault, Capabilities
from harness.data import Inputs, Outputs
from harness.grids import DynamicActivation, QuantizedModel
from harness.layouts import get_layout
from harness.spec import Case

DEPRECATED = ("torch.ao.quantization is deprecated (pytorch/pytorch#153892) and quantize_dynamic "
              "is slated for removal (pytorch/ao#2259)")
# fbgemm's dynamic linear (qlinear_dynamic.cpp): the input's min and max over the whole tensor,
# ChooseQuantizationParams(min, max, 0, 255, reduce_range) -> affine 0..127
TORCH_ACTIVATIONS = DynamicActivation(qmin=0, qmax=127)


def quantized_module(torch, module):
    """``module`` (an ``nn.LSTM`` / ``nn.GRU``) through ``quantize_dynamic`` to qint8, inside a
    container so that it is swapped (a bare module comes back unchanged)."""
    with warnings.catch_warnings():  # its deprecation warning: the adapter's reason says it
        warnings.simplefilter("ignore")
        wrapped = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(module), {type(module)}, dtype=torch.qint8)
    return wrapped[0]


def stored_weights(module) -> dict[str, np.ndarray]:
    """The weights packed in the quantized ``module`` (state_dict names), dequantized;
    AdapterFault where any is not qint8 (nothing, or not all, was quantized)."""
    torch = import_torch()
    try:
        weights = module._weight_bias()["weight"]
    except AttributeError:
        raise AdapterFault(f"nothing was quantized: quantize_dynamic returned "
                           f"{type(module).__module__}.{type(module).__name__}") from None
    out = {}
    for name, w in weights.items():
        if not w.is_quantized or w.dtype != torch.qint8:
            raise AdapterFault(f"nothing was quantized: {name} is {w.dtype}, not packed qint8")
        out[name] = w.dequantize().to(torch.float64).numpy()
    return out


class TorchDynamicInt8(TorchRNN):
    name = "torch-dynamic-int8"
    title = "PyTorch quantize_dynamic qint8 LSTM/GRU (torch.ao.nn.quantized.dynamic, CPU)"
    # cheap (well under a second a pair), but it runs only the cases with a quantization: key,
    # all in cases-quantized/, whose adapters: list names it: in the default selection it would
    # add a not-applicable row to every other case
    named_only = "runs only cases with a quantization: key (cases-quantized/ names it)"
    quantized = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        gru_reset_after=frozenset({True}),
        variable_lengths=False,
        reasons=NN_REASONS | {
            "dtypes": "quantize_dynamic quantizes a float32 module",
            "variable_lengths": "with packed sequences the products' ranges cover the valid "
                                "rows only, which the harness's integer-aware reference does "
                                "not follow yet",
            "gradients": "a dynamically quantized module is inference only",
        },
    )

    def check_available(self) -> None:
        torch = import_torch()
        if not hasattr(torch.ao, "quantization") or not hasattr(torch.ao.quantization,
                                                               "quantize_dynamic"):
            from harness.errors import Unavailable

            raise Unavailable(f"this torch has no torch.ao.quantization.quantize_dynamic "
                              f"({DEPRECATED})")

    def versions(self) -> dict[str, str]:
        torch = import_torch()
        return {"torch": torch.__version__, "torch_threads": str(torch.get_num_threads()),
                "quantized_engine": str(torch.backends.quantized.engine),
                "deprecation": DEPRECATED}

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs):
        handed = super().hand(case, native, inputs)
        handed.call["quantize_dynamic"] = "torch.qint8, the module inside a container"
        return handed

    def build(self, case: Case, native: dict[str, np.ndarray]):
        return quantized_module(import_torch(), super().build(case, native))

    def _forward(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        out = super()._forward(case, native, inputs)
        module = self.build(case, native)  # the same quantization (deterministic), read back
        stored = dict(native) | stored_weights(module)
        canonical = get_layout("torch").from_native(stored, case)
        out.quantized = QuantizedModel("dynamic", canonical.tensors,
                                       activations=TORCH_ACTIVATIONS)
        torch = import_torch()
        out.note = (f"ran {type(module).__module__}.{type(module).__name__} (weights packed "
                    f"qint8, engine {torch.backends.quantized.engine}); "
                    f"{TORCH_ACTIVATIONS.describe()}; {DEPRECATED}")
        return out
