"""PyTorch's process-wide precision settings, as run.json records them for every torch adapter
(``Adapter.precision_flags``) and the environment of a run reads them."""

from __future__ import annotations


def torch_precision_flags(torch) -> dict[str, object]:
    """TF32 and determinism settings of this process. torch >= 2.9 has the per-backend
    ``fp32_precision``, and once one is set, reading the legacy ``allow_tf32`` raises
    (RuntimeError): the legacy flag is read only where the new one does not exist."""
    flags: dict[str, object] = {
        "torch.deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}
    for where, backend in (("torch.backends.cudnn.rnn", getattr(torch.backends.cudnn, "rnn",
                                                                  None)),
                           ("torch.backends.cuda.matmul", torch.backends.cuda.matmul)):
        if backend is not None and hasattr(backend, "fp32_precision"):
            flags[f"{where}.fp32_precision"] = backend.fp32_precision
    if "torch.backends.cudnn.rnn.fp32_precision" not in flags:
        flags["torch.backends.cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
    if "torch.backends.cuda.matmul.fp32_precision" not in flags:
        flags["torch.backends.cuda.matmul.allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    return flags
