"""Keras 3 ``LSTM`` / ``GRU`` / ``Bidirectional`` on the torch backend, CPU (layout ``keras``).

A code path of its own, apart from the TensorFlow and JAX ones: on the CPU the torch backend's
``lstm``/``gru`` compute an unmasked sequence as a Python loop of torch ops over the steps,
the input projections precomputed in one matmul (``_fallback_lstm``/``_fallback_gru``; cuDNN
only on a CUDA device, never here: ``KERAS_TORCH_DEVICE=cpu``); a masked batch and a
``Bidirectional``'s fused call are declined and run Keras's generic ``rnn`` loop. The pair's
reason says which ran (:class:`harness.adapters._keras3_backends.PathSpy`).

Runs in a worker process of its own (``KERAS_BACKEND=torch``), as ``keras3-jax`` does; the
user's ``keras.json`` or ``KERAS_BACKEND`` cannot change it. Forward only.

Speed (keras#22275 reports a very slow LSTM on this backend): measured in the worker, eager,
on 2 shared cores, the bundled cases' layer runs are milliseconds to a few tenths of a second
(docs/deployment.md has the figures); its worker's start costs more than its pairs, so it runs
when named.
"""

from __future__ import annotations

from harness.adapters._keras3_backends import (
    Keras3BackendAdapter,
)


class Keras3Torch(Keras3BackendAdapter):
    name = "keras3-torch"
    named_only = ("runs in a Keras-on-torch worker process of its own, which takes 5-40 s to "
                  "start, more than its pairs")
    title = "Keras 3 LSTM/GRU, torch backend (CPU)"
    framework = "torch"
    requires = ("torch", "keras")
    backend = "torch"
    own_process = {"KERAS_BACKEND": "torch", "KERAS_TORCH_DEVICE": "cpu"}
    fused_form = "a loop of torch ops over the steps (input projections precomputed)"

    def versions(self) -> dict[str, str]:
        keras = self.import_keras()
        import torch

        return {"keras": keras.__version__, "keras_backend": keras.backend.backend(),
                "torch": torch.__version__, "torch_threads": str(torch.get_num_threads())}
