"""Layout ``flax`` and its file: torch -> flax .msgpack -> torch, the .msgpack loaded into a
real ``nn.RNN`` by ``flax.serialization.from_bytes`` giving PyTorch's outputs, the reader's
refusals, and ``flax-nnx``'s missing b_hn (google/flax#5594) refused by conversion."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from harness.convert import CannotHold, convert, convert_file
from harness.errors import WeightsError
from harness.layouts import get_layout
from harness.readers import read_native
from harness.spec import Case

torch = pytest.importorskip("torch")
pytest.importorskip("flax")
pytestmark = pytest.mark.jax


def _torch_lstm(tmp_path, **kw):
    torch.manual_seed(0)
    m = torch.nn.LSTM(3, 4, batch_first=True, **kw)
    with torch.no_grad():  # trained-like magnitudes
        for p in m.parameters():
            p.mul_(6.0)
    path = tmp_path / "lstm.pt"
    torch.save(m.state_dict(), path)
    return m, path


def test_torch_msgpack_torch_round_trip_and_from_bytes(tmp_path):
    m, pt = _torch_lstm(tmp_path, num_layers=2, bidirectional=True)
    convert_file(None, None, None, str(pt), str(tmp_path / "w.msgpack"))
    convert_file(None, None, None, str(tmp_path / "w.msgpack"), str(tmp_path / "back.pt"))
    a, b = m.state_dict(), torch.load(tmp_path / "back.pt")
    for k in a:
        if k.startswith("weight"):
            assert torch.equal(a[k], b[k]), k
    for k in (k for k in a if k.startswith("bias_ih")):  # only the sum acts (google/flax#3746)
        hh = k.replace("bias_ih", "bias_hh")
        torch.testing.assert_close(a[k] + a[hh], b[k] + b[hh], rtol=0, atol=1e-5)


def test_msgpack_loaded_into_nn_rnn_gives_torch_outputs(tmp_path):
    import jax
    import jax.numpy as jnp
    from flax import linen as nn
    from flax import serialization

    m, pt = _torch_lstm(tmp_path)
    convert_file(None, None, None, str(pt), str(tmp_path / "w.msgpack"))
    rnn = nn.RNN(nn.LSTMCell(features=4), return_carry=True)
    x = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)
    template = rnn.init(jax.random.key(0), jnp.asarray(x))["params"]["cell"]
    tree = serialization.from_bytes({"layer0": {"forward": template}},
                                    (tmp_path / "w.msgpack").read_bytes())
    (c, h), y = rnn.apply({"params": {"cell": tree["layer0"]["forward"]}}, jnp.asarray(x))
    y_t, (h_t, c_t) = m(torch.from_numpy(x))
    np.testing.assert_allclose(np.asarray(y), y_t.detach().numpy(), atol=2e-5)
    np.testing.assert_allclose(np.asarray(c), c_t[0].detach().numpy(), atol=2e-5)


@pytest.mark.parametrize("payload, why", [
    ({"a": msgpack.ExtType(1, msgpack.packb(((2,), "object", b"x" * 16)))}, "dtype 'object'"),
    ({"a": msgpack.ExtType(1, msgpack.packb(((2,), "int32", b"\0" * 8)))}, "dtype 'int32'"),
    ({"a": msgpack.ExtType(1, msgpack.packb(((1000,), "float32", b"\0" * 8)))}, "8 bytes"),
    ({"a": msgpack.ExtType(2, msgpack.packb((1.0, 2.0)))}, "only arrays are read"),
    ({"a": "text"}, "holds a str"),
    ([1, 2], "expected a map"),
])
def test_reader_refuses_what_is_not_float_arrays(tmp_path, payload, why):
    path = tmp_path / "bad.msgpack"
    path.write_bytes(msgpack.packb(payload, use_bin_type=True))
    case = Case(name="x", cell="lstm", input_size=3, hidden_size=4)
    with pytest.raises(WeightsError, match=why) as err:
        read_native(path, "flax", case)
    assert "bad.msgpack" in str(err.value)


def test_reader_refuses_a_deep_tree_and_a_truncated_file(tmp_path):
    case = Case(name="x", cell="lstm", input_size=3, hidden_size=4)
    deep: dict = {}
    node = deep
    for _ in range(40):
        node = node.setdefault("k", {})
    path = tmp_path / "deep.msgpack"
    path.write_bytes(msgpack.packb(deep))
    with pytest.raises(WeightsError, match="deeper than"):
        read_native(path, "flax", case)
    path.write_bytes(msgpack.packb({"a": {"b": 1.0}})[:-3])
    with pytest.raises(WeightsError, match="not a flax .msgpack file"):
        read_native(path, "flax", case)


def test_nnx_gru_cannot_hold_b_hn():
    """google/flax#5594: nnx.GRUCell has no b_hn, so a GRU does not convert to flax-nnx."""
    from harness.params import generate

    case = Case(name="g", cell="gru", input_size=3, hidden_size=4)
    torch_native = get_layout("torch").to_native(generate(case), case)
    convert(case, get_layout("torch"), get_layout("flax"), torch_native)  # linen holds it
    with pytest.raises(CannotHold, match="bR_n"):
        convert(case, get_layout("torch"), get_layout("flax-nnx"), torch_native)
