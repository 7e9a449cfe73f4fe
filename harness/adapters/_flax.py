"""The executor shared by the Flax adapters (``flax-linen``, ``flax-linen-optimized``,
``flax-nnx``): JAX on CPU, one jitted function per case shape.

Per layer, ``nn.RNN(cell, return_carry=True)`` for one direction (``reverse=True,
keep_order=True`` for the backward one) or ``nn.Bidirectional`` for two; layer k+1 reads layer
k's outputs (forward features first). The parameters come from the layouts ``flax`` /
``flax-nnx`` (harness/layouts/flax.py) as the cell's own tree. Two facts of flax's API the
executor follows, not patches:

- the LSTM carry is ``(c, h)`` (google/flax#5469): the case's ``h0``/``c0`` are handed over in
  that order and the final carry read back in it;
- with ``seq_lengths`` nn.RNN returns each sequence's carry at its last valid step and flips
  only the valid steps for the reverse direction (``flip_sequences``), so the reverse direction
  starts at each sequence's last valid step; it leaves padded outputs as computed, and the
  executor writes 0 there (the harness convention, harness/data.py).

Gradient cases: ``jax.vjp`` of the same function (after the zeroing of padded steps), pulled
back with ``dy``, ``dh_n``, ``dc_n`` in the case dtype: the VJP of the loss in harness/data.py.

JAX compiles per shape; the compiled function of a case shape is kept (:data:`_COMPILED`) so
that a case run again with other weights (``probe``, the blind-spot check) does not compile
again. float64 runs under ``jax.enable_x64`` for the call only, so no other adapter in the
process sees 64-bit defaults.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.adapters._xla import check_xla_flags
from harness.adapters.base import Adapter
from harness.data import Gradients, Inputs, Outputs
from harness.errors import Unavailable
from harness.families import flax as flax_family
from harness.handed import Handed
from harness.params import DIRECTION_NAMES
from harness.spec import Case

JNP_DTYPES = {"float64": "float64", "float32": "float32", "float16": "float16",
              "bfloat16": "bfloat16"}
_COMPILED: dict[tuple, Callable] = {}
_MAX_COMPILED = 32  # compiled case shapes kept (each a few hundred kB)


def import_jax():
    """(jax, jax.numpy), on CPU unless something already chose a platform, or Unavailable."""
    # The adapters are CPU adapters: a GPU jaxlib must not take the run elsewhere. Set before
    # jax initialises its backends, and only when nothing chose one.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        raise Unavailable(f"jax is not installed ({exc}); pip install jax flax") from None
    return jax, jnp


def import_flax():
    """(jax, jax.numpy, flax) or Unavailable."""
    jax, jnp = import_jax()
    try:
        import flax
    except ImportError as exc:
        raise Unavailable(f"flax is not installed ({exc}); pip install flax") from None
    return jax, jnp, flax


def import_api(api: str) -> Any:
    """``flax.linen`` or ``flax.nnx``, or Unavailable. A flax release whose module does not
    import with the installed jax is unavailable, naming both releases and the error: flax
    0.12.9's nnx subclasses a jax class (``jax.experimental.hijax.HiPrimitive``) that neither
    jax 0.11.2 nor 0.12.1 has, while its linen runs; 0.12.8 and 0.12.10 import."""
    jax, _, flax = import_flax()
    try:
        return importlib.import_module(f"flax.{api}")
    except (ImportError, AttributeError) as exc:
        raise Unavailable(
            f"flax {flax.__version__}'s flax.{api} does not import with jax {jax.__version__} "
            f"({type(exc).__name__}: {str(exc)[:200]})") from None


def cpu_device(jax: Any) -> Any:
    return jax.devices("cpu")[0]


def params_of(case: Case, native: dict[str, np.ndarray], layer: int, d: int,
              cast: Callable[[np.ndarray], Any]) -> dict[str, dict[str, Any]]:
    """The cell's parameter tree {GATE: {kernel, bias}} of one layer and direction from the
    layout's flat names ``layer{k}/{dir}/GATE/kind`` (:func:`harness.families.flax.params_tree`,
    which a reproducer runs too)."""
    return flax_family.params_tree(native, layer, d, cast)


def forward_fn(case: Case, run_layer: Callable) -> Callable:
    """f(params, x, h0, c0, lengths) -> (y, h_n, c_n) for the whole stack
    (:func:`harness.families.flax.flax_stack`, which a reproducer runs too); ``run_layer(k,
    params_k, x, carries, lengths) -> (y, [carry per direction])`` runs one layer
    (``lengths`` is None for full-length batches)."""
    import jax.numpy as jnp

    return flax_family.flax_stack(jnp, run_layer, case.num_layers, case.num_directions,
                                  case.cell_kind.has_cell_state,
                                  carry=lambda h, c: _carry(case, h, c))


def _carry(case: Case, h: Any, c: Any | None) -> Any:
    """The initial carry of a state (:func:`harness.families.flax.flax_carry`)."""
    return flax_family.flax_carry(case.cell_kind.has_cell_state, h, c)


def linen_layer(case: Case, cell_name: str) -> Callable:
    """``run_layer`` of :func:`forward_fn` with flax.linen's cell ``cell_name``
    (:func:`harness.families.flax.linen_layer`)."""
    from flax import linen as nn

    return flax_family.linen_layer(nn, cell_name, case.hidden_size, case.num_directions == 2,
                                   case.dir_mode == "reverse")


def nnx_layer(case: Case, cell_name: str) -> Callable:
    """``run_layer`` of :func:`forward_fn` with flax.nnx's cell ``cell_name``
    (:func:`harness.families.flax.nnx_layer`)."""
    from flax import nnx

    return flax_family.nnx_layer(nnx, cell_name, case.hidden_size, case.num_directions == 2,
                                 case.dir_mode == "reverse")


def compiled(key: tuple, case: Case, run_layer: Callable, gradients: bool) -> Callable:
    """The jitted forward (and VJP, for a gradient case) of the case shape ``key``."""
    fn = _COMPILED.get(key)
    if fn is not None:
        return fn
    import jax

    f = forward_fn(case, run_layer)
    if gradients:
        def fwd_bwd(params, x, h0, c0, lengths, dy, dh, dc):
            out, pull = jax.vjp(lambda p, x_, h_, c_: f(p, x_, h_, c_, lengths),
                                params, x, h0, c0)
            cot = (dy, dh, dc) if case.cell_kind.has_cell_state else (dy, dh, None)
            return out, pull(cot)
        fn = jax.jit(fwd_bwd)
    else:
        fn = jax.jit(f)
    if len(_COMPILED) >= _MAX_COMPILED:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[key] = fn
    return fn


def handed(case: Case, native: dict[str, np.ndarray], inputs: Inputs, *, api: str,
           cell: str) -> Handed:
    """What :func:`run` hands flax: the cell class of ``api`` (linen / nnx) and the layout's
    parameter tree (flat names ``layer{k}/{dir}/GATE/kind``, cast to the case dtype in the
    call), the inputs cast likewise, lengths as int32 when the batch has them."""
    return Handed("flax", {"framework": "flax", "api": api, "cell": cell, "dtype": case.dtype,
                           "lengths": inputs.seq_lengths is not None},
                  arrays={name: np.asarray(v) for name, v in native.items()})


def run(case: Case, native: dict[str, np.ndarray], inputs: Inputs, *, family: str,
        run_layer: Callable, gradients: bool) -> Outputs:
    """Run ``case`` with ``run_layer`` (:func:`linen_layer`, or the nnx one) on the CPU; the
    native tensors are the layout's; returns float64 outputs (and native-keyed gradients)."""
    jax, jnp = import_jax()
    x64 = case.dtype == "float64"
    with jax.enable_x64(x64), jax.default_device(cpu_device(jax)):
        dt = jnp.dtype(JNP_DTYPES[case.dtype])

        def cast(a: np.ndarray | None) -> Any:
            return None if a is None else jnp.asarray(np.asarray(a, dtype=np.float64), dtype=dt)

        params = [[params_of(case, native, k, d, cast) for d in case.directions]
                  for k in range(case.num_layers)]
        lengths = (None if inputs.seq_lengths is None
                   else jnp.asarray(np.asarray(inputs.seq_lengths), dtype=jnp.int32))
        key = (family, case.cell, case.input_size, case.hidden_size, case.num_layers,
               case.dir_mode, case.batch, case.seq_len, case.dtype, lengths is not None,
               gradients)
        fn = compiled(key, case, run_layer, gradients)
        args = (params, cast(inputs.x), cast(inputs.h0), cast(inputs.c0), lengths)
        if gradients:
            (y, h_n, c_n), (dparams, dx, dh0, dc0) = fn(
                *args, cast(inputs.dy), cast(inputs.dh_n), cast(inputs.dc_n))
        else:
            y, h_n, c_n = fn(*args)

        def f64(a: Any) -> np.ndarray | None:
            return None if a is None else np.asarray(a).astype(np.float64)

        out = Outputs(y=f64(y), h_n=f64(h_n), c_n=f64(c_n))
        if gradients:
            flat = {}
            for k, per_dir in enumerate(dparams):
                for j, d in enumerate(case.directions):
                    for gate, kinds in per_dir[j].items():
                        for kind, g in kinds.items():
                            flat[f"layer{k}/{DIRECTION_NAMES[d]}/{gate}/{kind}"] = f64(g)
            out.grads = Gradients(dx=f64(dx), dh0=f64(dh0), dc0=f64(dc0), params=flat)
        return out


# Why a case is not applicable to the flax cells (every flax adapter).
FLAX_REASONS = {
    "peepholes": "flax LSTM cells have no peephole connections",
    "projection": "flax LSTM cells have no projection",
    "projection_layers": "flax LSTM cells have no projection",
    "cell_clip": "flax LSTM cells have no cell-state clipping",
    "proj_clip": "flax LSTM cells have no projection (nor its clipping)",
    "gate_clip": "flax LSTM/GRU cells have no gate pre-activation clipping",
    "input_forget": "flax LSTM cells have no coupled input-forget gate",
    "recurrent_activations": "the adapters run flax's default gate_fn (sigmoid)",
    "gru_reset_after": "flax's GRUCell applies the reset gate after the recurrent matmul "
                       "(r * (h @ hn/kernel + hn/bias)): it has no reset_after=False form",
}


class FlaxAdapter(Adapter):
    """A flax cell under flax's RNN wrapper. An adapter names its flax API by
    ``make_run_layer`` (:func:`linen_layer` or :func:`nnx_layer`: the ``run_layer`` of
    :func:`forward_fn` for a cell class of that API) and the cell class per case cell
    (``cell_names``); and declares its own name, layout and capabilities."""

    framework = "jax"
    requires = ("jax", "flax")
    layout_name = "flax"
    native_in_case_dtype = True
    cell_names: dict[str, str] = {}
    flax_api = "linen"  # the module the cell classes come from (a reproducer imports it)

    @staticmethod
    def make_run_layer(case: Case, cell_name: str) -> Callable:
        raise NotImplementedError

    def check_available(self) -> None:
        import_api(self.flax_api)

    def versions(self) -> dict[str, str]:
        jax, _, flax = import_flax()
        import jaxlib

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__}

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        return handed(case, native, inputs, api=self.flax_api, cell=self.cell_names[case.cell])

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        check_xla_flags()  # before the first computation, which an unknown flag would end
        import_flax()
        out = run(case, native, inputs, family=self.name,
                  run_layer=self.make_run_layer(case, self.cell_names[case.cell]),
                  gradients=self.computes_gradients(case))
        out.handed = self.hand(case, native, inputs)
        return out
