"""``keras3-jax`` variants for tests/test_adapter_keras3_jax.py, in a module of their own: the
adapter runs in a worker process of its own, which imports an adapter by module name, so a
planted Keras code path must be planted there, by the adapter, not by the test.

- :class:`MaskIgnoredGRU`: keras#22401's ``lax.scan`` GRU taken for a masked batch with the
  mask dropped (the PR sends masked batches to the generic loop; this is the path it guards
  against): padded steps then update the state.
- :class:`ReverseInInputOrder`: keras#22399's cuDNN LSTM path returns a ``go_backwards``
  layer's sequence flipped back to input order, where the generic loop returns it in reading
  order (``if go_backwards and return_sequences: outputs = jnp.flip(outputs, axis=1)`` in
  keras/src/backend/jax/rnn.py, GPU only); planted here as that flip after the generic loop.
- :class:`GRUPathSpy`: the unplanted adapter, recording whether keras#22401's GRU path ran
  (``extras["fast_gru"]``: calls that returned, not raised NotImplementedError).
"""

from __future__ import annotations

import importlib

import numpy as np

from harness.adapters.keras3_jax import Keras3Jax, import_keras_jax


def _backend():
    import_keras_jax()
    return importlib.import_module("keras.src.backend")


class MaskIgnoredGRU(Keras3Jax):
    name = "keras3-jax-planted-mask-ignored"

    def _run(self, case, native, inputs):
        backend = _backend()
        original = backend.gru

        def gru(inputs, initial_state, mask, *args, **kwargs):
            return original(inputs, initial_state, None, *args, **kwargs)

        backend.gru = gru
        try:
            return super()._run(case, native, inputs)
        finally:
            backend.gru = original


class ReverseInInputOrder(Keras3Jax):
    name = "keras3-jax-planted-reverse-order"

    def _run(self, case, native, inputs):
        _backend()
        import jax.numpy as jnp
        from keras.layers import LSTM

        original = LSTM.inner_loop

        def inner_loop(layer, sequences, initial_state, mask, training=False):
            last, outputs, states = original(layer, sequences, initial_state, mask, training)
            if layer.go_backwards and layer.return_sequences:
                outputs = jnp.flip(outputs, axis=1)
            return last, outputs, states

        LSTM.inner_loop = inner_loop
        try:
            return super()._run(case, native, inputs)
        finally:
            LSTM.inner_loop = original


class GRUPathSpy(Keras3Jax):
    name = "keras3-jax-spy"

    def _run(self, case, native, inputs):
        backend = _backend()
        original = backend.gru
        returned = []

        def gru(*args, **kwargs):
            out = original(*args, **kwargs)  # NotImplementedError: the generic loop runs
            returned.append(True)
            return out

        backend.gru = gru
        try:
            out = super()._run(case, native, inputs)
        finally:
            backend.gru = original
        out.extras["fast_gru"] = np.array(len(returned))
        return out
