"""Keras 3 ``LSTM`` / ``GRU`` / ``Bidirectional`` on the OpenVINO backend, CPU (layout ``keras``):
inference only.

keras PR#22436 (2026-03) fixed a ``backend.rnn()`` shape bug that made every RNN layer fail or
give wrong results on this backend with the default implementation. With keras 3.15.1 the
backend's ``lstm``/``gru`` emit one OpenVINO ``LSTMSequence``/``GRUSequence`` node for an
unmasked sequence with tanh and sigmoid (fused); a masked batch, ``hard_sigmoid`` or a
``Bidirectional``'s fused call are declined and run Keras's generic ``rnn`` loop, the code
path of PR#22436. The pair's reason says which ran
(:class:`harness.adapters._keras3_backends.PathSpy`).

Runs in a worker process of its own (``KERAS_BACKEND=openvino``), as ``keras3-jax`` does; each
eager op is compiled by OpenVINO's CPU plugin when it runs, so a case costs seconds.
"""

from __future__ import annotations

from harness.adapters._keras3_backends import (
    Keras3BackendAdapter,
)


class Keras3OpenVINO(Keras3BackendAdapter):
    name = "keras3-openvino"
    title = "Keras 3 LSTM/GRU, OpenVINO backend (CPU, inference)"
    framework = "openvino"
    requires = ("openvino", "keras")
    backend = "openvino"
    own_process = {"KERAS_BACKEND": "openvino"}
    # `import openvino` imports its model converter, which sends a usage event and writes a
    # client id under ~/intel through openvino_telemetry where installed (as the openvino
    # adapter, harness/adapters/openvino.py): kept out, OpenVINO uses its no-op stub
    blocked_modules = ("openvino_telemetry",)
    named_only = ("each eager Keras op is compiled by OpenVINO's CPU plugin when it runs: "
                  "seconds a case")
    fused_form = "one OpenVINO sequence node (LSTMSequence for lstm, GRUSequence for gru)"

    def versions(self) -> dict[str, str]:
        keras = self.import_keras()
        import openvino

        return {"keras": keras.__version__, "keras_backend": keras.backend.backend(),
                "openvino": openvino.get_version()}
