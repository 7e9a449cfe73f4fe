"""Generated weights: the same bits as drawing each tensor on its own with NumPy's
``Generator.uniform`` / ``normal`` and rounding it with ``round_to`` (what the generator did
before it drew every tensor's values into one array)."""

from __future__ import annotations

import numpy as np
import pytest

from harness import params
from harness.dtypes import native_numpy, round_to
from harness.spec import Case


def drawn_one_by_one(case: Case, init: str, scale: float) -> dict[str, np.ndarray]:
    """Each tensor from its own ``uniform`` / ``normal`` call, in expected_shapes order."""
    rng = np.random.default_rng([case.seed, 1])

    def draw(shape, s):
        return rng.normal(0.0, s, size=shape) if init == "normal" else rng.uniform(-s, s, shape)

    out = {}
    for k, shape in params.expected_shapes(case).items():
        name = k.rsplit("/", 1)[1]
        kind, _, g = name.partition("_")
        mult, offset = params.GATE_STYLE.get(g, (1.0, 0.0))
        if kind in ("W", "R"):
            t = mult * draw(shape, scale)
        elif kind == "bW":
            t = offset + draw(shape, 0.5 * scale)
        elif kind == "bR":
            t = -0.5 * offset + 0.05 + draw(shape, 0.5 * scale)
        elif kind == "p":
            t = {"i": 0.3, "f": -0.2, "o": 0.25}[g] + draw(shape, 0.5 * scale)
        else:
            t = draw(shape, scale)
        out[k] = round_to(t, case.dtype)
    return out


MODELS = [
    dict(cell="lstm", input_size=5, hidden_size=6, num_layers=2, bidirectional=True,
         peepholes=True, proj_size=3),
    dict(cell="gru", input_size=4, hidden_size=7, num_layers=3),
    dict(cell="lstm", input_size=3, hidden_size=5),
]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("init", ["uniform", "normal"])
@pytest.mark.parametrize("model", range(len(MODELS)))
def test_generated_bits_equal_drawing_each_tensor_on_its_own(model, init, dtype):
    weights = {"init": init} if init == "normal" else {"init": init, "scale": 0.3}
    case = Case(name="g", seed=11 + model, batch=1, seq_len=2, dtype=dtype, weights=weights,
                **MODELS[model])
    scale = 0.3 if init == "uniform" else 1.0 / np.sqrt(case.hidden_size)
    got = params.generate(case)
    want = drawn_one_by_one(case, init, scale)
    assert list(got.tensors) == list(want)
    for k, w in want.items():
        g = got[k]
        assert g.dtype == np.float64 and g.shape == w.shape, k
        assert g.view(np.uint64).tobytes() == w.view(np.uint64).tobytes(), k
    # rounded to the case dtype: the dtype adapters hold their natives in holds them exactly
    native = native_numpy(dtype)
    for k, g in got.tensors.items():
        np.testing.assert_array_equal(g.astype(native).astype(np.float64), g, err_msg=k)
