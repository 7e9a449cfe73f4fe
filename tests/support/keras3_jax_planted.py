"""A ``keras3-jax`` variant for tests/adapters/test_adapter_keras3_jax.py, in a module of its own:
the adapter runs in a worker process of its own, which imports an adapter by module name, so a
planted Keras code path must be planted there, by the adapter, not by the test. One adapter
(one worker, started once: seconds of spawn and jax/keras imports) plants what the case's name
starts with:

- ``mask-ignored``: keras#22401's ``lax.scan`` GRU taken for a masked batch with the mask
  dropped (the PR sends masked batches to the generic loop; this is the path it guards
  against): padded steps then update the state.
- ``reverse-order``: keras#22399's cuDNN LSTM path returns a ``go_backwards`` layer's sequence
  flipped back to input order, where the generic loop returns it in reading order
  (``if go_backwards and return_sequences: outputs = jnp.flip(outputs, axis=1)`` in
  keras/src/backend/jax/rnn.py, GPU only); planted here as that flip after the generic loop.
- anything else: nothing planted.

Every run records whether keras#22401's GRU path ran (``extras["fast_gru"]``: calls that
returned, not raised NotImplementedError).
"""

from __future__ import annotations

import contextlib
import importlib

import numpy as np

from harness.adapters.keras3_jax import Keras3Jax, import_keras_jax


@contextlib.contextmanager
def _replaced(owner, name: str, make):
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


class Planted(Keras3Jax):
    name = "keras3-jax-planted"

    def _run(self, case, native, inputs):
        import_keras_jax()
        import jax.numpy as jnp
        from keras.layers import LSTM

        backend = importlib.import_module("keras.src.backend")
        returned = []

        def spy_gru(original):
            def gru(inputs, initial_state, mask, *args, **kwargs):
                if case.name.startswith("mask-ignored"):
                    mask = None
                out = original(inputs, initial_state, mask, *args, **kwargs)
                returned.append(True)  # not reached when it raises NotImplementedError
                return out
            return gru

        def flipped(original):
            def inner_loop(layer, sequences, initial_state, mask, training=False):
                last, outputs, states = original(layer, sequences, initial_state, mask, training)
                if layer.go_backwards and layer.return_sequences:
                    outputs = jnp.flip(outputs, axis=1)
                return last, outputs, states
            return inner_loop

        with contextlib.ExitStack() as planted:
            planted.enter_context(_replaced(backend, "gru", spy_gru))
            if case.name.startswith("reverse-order"):
                planted.enter_context(_replaced(LSTM, "inner_loop", flipped))
            out = super()._run(case, native, inputs)
        out.extras["fast_gru"] = np.array(len(returned))
        return out
