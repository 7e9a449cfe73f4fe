"""The ``flax`` family: how the Flax adapters (harness/adapters/_flax.py) build and run the
stack, pasted into their reproducers (:func:`source`), so that a script runs flax by the very
code the adapter ran: the cell's parameter tree of a layer and direction
(:func:`params_tree`), one layer under linen's or nnx's RNN wrapper (:func:`linen_layer`,
:func:`nnx_layer`) and the stack of layers (:func:`flax_stack`), with flax's facts (the LSTM
carry is ``(c, h)``, google/flax#5469; padded steps written as 0, the harness convention).

The pasted part takes flax's and JAX's modules as arguments: this module imports nothing of a
framework. :data:`FAMILY` is the script's framework part around it.
"""

from __future__ import annotations

from harness.families.paste import Family, below

MARKER = "# --- a flax stack as the harness runs it (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


# the script's import of each flax API, and the layer builder of that API
API = {"nnx": "from flax import nnx as api  # noqa: E402\nmake_layer = nnx_layer\n",
       "linen": "from flax import linen as api  # noqa: E402\nmake_layer = linen_layer\n"}

SCRIPT = '''os.environ.setdefault("JAX_PLATFORMS", "cpu")  # as the harness ran it
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import flax  # noqa: E402
{api}
DTYPE = jnp.dtype(CALL["dtype"])


def framework_versions():
    import jaxlib

    return {{"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__}}


def device():
    return ", ".join(str(d) for d in jax.devices())


def run_framework():
    """The stack (flax_stack and CALL's layer, above), jitted on the CPU, float64 under x64."""
    with jax.enable_x64(CALL["dtype"] == "float64"), jax.default_device(jax.devices("cpu")[0]):
        def cast(a):
            return None if a is None else jnp.asarray(np.asarray(a, dtype=np.float64), dtype=DTYPE)

        p = [[params_tree(HANDED, k, d, cast) for d in SPEC["directions"]]
             for k in range(SPEC["num_layers"])]
        lengths = (jnp.asarray(LENGTHS, dtype=jnp.int32) if CALL["lengths"] else None)
        run_layer = make_layer(api, CALL["cell"], SPEC["hidden_size"],
                               len(SPEC["directions"]) == 2, SPEC["dir_mode"] == "reverse")
        lstm = SPEC["has_cell_state"]
        forward = flax_stack(jnp, run_layer, SPEC["num_layers"], len(SPEC["directions"]), lstm,
                             carry=lambda h, c: flax_carry(lstm, h, c))
        y, h_n, c_n = jax.jit(forward)(p, cast(X), cast(H0), cast(C0), lengths)

        def f64(a):
            return None if a is None else np.asarray(a).astype(np.float64)

        return {{SPEC["num_layers"] - 1: f64(y)}}, f64(h_n), f64(c_n)
'''

FAMILY = Family(
    "flax", framework=lambda call: SCRIPT.format(api=API[call["api"]]),
    needs=lambda call: "JAX and Flax (pip install jax flax)", pasted=(source,),
    choices={"api": tuple(API)}, trackers={"flax": "https://github.com/google/flax/issues"})


# --- a flax stack as the harness runs it (pasted into repro.py) ---
FLAX_DIRECTION_NAMES = ("forward", "backward")  # the layout's direction names


def params_tree(arrays, layer, direction, cast):
    """The cell's parameter tree {GATE: {kind: array}} of one layer and direction from the
    layout's flat names ``layer{k}/{forward|backward}/GATE/kind``, each value ``cast``."""
    prefix = f"layer{layer}/{FLAX_DIRECTION_NAMES[direction]}/"
    tree = {}
    for name, value in arrays.items():
        if name.startswith(prefix):
            gate, kind = name[len(prefix):].split("/")
            tree.setdefault(gate, {})[kind] = cast(value)
    return tree


def flax_carry(lstm, h, c):
    """The cell carry of a state: flax's LSTM carry is (c, h) (google/flax#5469)."""
    return (c, h) if lstm else h


def flax_stack(jnp, run_layer, num_layers, num_directions, lstm, carry):
    """f(params, x, h0, c0, lengths) -> (y, h_n, c_n) for the whole stack; ``run_layer(k,
    params_k, x, carries, lengths) -> (y, [carry per direction])`` runs one layer (``lengths``
    None for full-length batches); ``carry(h, c)``: the initial carry (:func:`flax_carry`).
    A final LSTM carry is read as (c, h); padded steps of y are written as 0."""
    D = num_directions

    def f(params, x, h0, c0, lengths):
        hs, cs = [], []
        for k in range(num_layers):
            carries = [carry(h0[k * D + j], None if c0 is None else c0[k * D + j])
                       for j in range(D)]
            y, finals = run_layer(k, params[k], x, carries, lengths)
            if lengths is not None:
                valid = jnp.arange(y.shape[1])[None, :] < lengths[:, None]
                y = jnp.where(valid[..., None], y, jnp.zeros((), y.dtype))
            for final in finals:
                c, h = final if lstm else (None, final)
                hs.append(h)
                cs.append(c)
            x = y
        return x, jnp.stack(hs), (jnp.stack(cs) if lstm else None)

    return f


def linen_layer(nn, cell_name, hidden_size, bidirectional, reverse):
    """``run_layer`` of :func:`flax_stack` with flax.linen (``nn``)'s cell ``cell_name``: nn.RNN
    for one direction (``reverse``: the backward one), nn.Bidirectional for two, applied with
    one cell tree per direction (``params_k``)."""
    cell_cls = getattr(nn, cell_name)

    def rnn(backward):
        return nn.RNN(cell_cls(features=hidden_size), return_carry=True, reverse=backward,
                      keep_order=True)

    def run_layer(k, params_k, x, carries, lengths):
        if bidirectional:
            layer = nn.Bidirectional(rnn(False), rnn(True), return_carry=True)
            variables = {"params": {"forward_rnn": {"cell": params_k[0]},
                                    "backward_rnn": {"cell": params_k[1]}}}
            finals, y = layer.apply(variables, x, initial_carry=tuple(carries),
                                    seq_lengths=lengths)
            return y, list(finals)
        carry, y = rnn(reverse).apply({"params": {"cell": params_k[0]}}, x,
                                      initial_carry=carries[0], seq_lengths=lengths)
        return y, [carry]

    return run_layer


def nnx_layer(nnx, cell_name, hidden_size, bidirectional, reverse):
    """``run_layer`` of :func:`flax_stack` with flax.nnx (``nnx``)'s cell ``cell_name``: nnx.RNN
    for one direction, nnx.Bidirectional for two. nnx modules hold their parameters, so the
    layer is built inside the traced function (zero initialisers: nothing random is traced)
    and its ``dense_i`` / ``dense_h`` parameters set to ``params_k``'s, one tree per
    direction."""
    zeros, cell_cls = nnx.initializers.zeros, getattr(nnx, cell_name)

    def cell(in_features, tree):
        c = cell_cls(in_features, hidden_size, kernel_init=zeros, recurrent_kernel_init=zeros,
                     bias_init=zeros, param_dtype=tree["dense_i"]["kernel"].dtype,
                     rngs=nnx.Rngs(0))
        for dense, kinds in tree.items():
            for kind, value in kinds.items():
                getattr(getattr(c, dense), kind)[...] = value
        return c

    def rnn(tree, in_features, backward):
        return nnx.RNN(cell(in_features, tree), return_carry=True, reverse=backward,
                       keep_order=True, rngs=False)

    def run_layer(k, params_k, x, carries, lengths):
        width = x.shape[-1]
        if bidirectional:
            layer = nnx.Bidirectional(rnn(params_k[0], width, False),
                                      rnn(params_k[1], width, True),
                                      return_carry=True, rngs=False)
            finals, y = layer(x, initial_carry=tuple(carries), seq_lengths=lengths)
            return y, list(finals)
        carry, y = rnn(params_k[0], width, reverse)(x, initial_carry=carries[0],
                                                   seq_lengths=lengths)
        return y, [carry]

    return run_layer
