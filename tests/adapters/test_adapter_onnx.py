"""The ``onnxruntime`` adapter and the ``onnx`` layout against the float64 reference.

Every run compares y, h_n, c_n and every layer's y with ``harness.reference.run`` at
``ATOL`` (float32). Tests of a feature also show that the feature changes the result by far
more than ``ATOL`` (clip binds, hard sigmoid saturates, the wrong GRU variant or P order
diverges), so a run that ignored it could not pass. The layout is checked against what ONNX
itself accepts (``onnx.checker`` with full_check and strict shape inference, ORT's own shape
checks) and against the initializers PyTorch's ONNX exporter writes for the same weights.
"""

from __future__ import annotations

import inspect
import io
import warnings

import numpy as np
import pytest

from harness import data, params, reference
from harness.adapters import get_adapter
from harness.adapters.onnxruntime import build_model, feeds, node_attributes
from harness.data import Outputs
from harness.layouts import get_layout
from harness.spec import Case

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx

ATOL = 1e-5
ADAPTER = get_adapter("onnxruntime")
LAYOUT = get_layout("onnx")


def make_case(**kw) -> Case:
    base = dict(name="onnx-test", input_size=3, hidden_size=4, batch=3, seq_len=6,
                initial_state="random")
    return Case(**{**base, **kw})


def run_both(case: Case, native: dict[str, np.ndarray] | None = None):
    """(onnxruntime outputs, reference outputs, canonical, inputs) for ``case``."""
    canonical = params.generate(case)
    inputs = data.generate(case)
    if native is None:
        out, _ = ADAPTER.run(case, canonical, inputs)
    else:
        out = ADAPTER._run(case, native, inputs)
    return out, reference.run(case, canonical, inputs), canonical, inputs


def max_err(a: Outputs, b: Outputs) -> float:
    errs = [np.abs(a.named()[k] - b.named()[k]).max() for k in b.named()]
    errs += [np.abs(u - v).max() for u, v in zip(a.y_layers, b.y_layers, strict=True)]
    return float(max(errs))


def assert_matches(case: Case, atol: float = ATOL) -> tuple[Outputs, Outputs]:
    __tracebackhide__ = True
    out, ref, _, inputs = run_both(case)
    assert len(out.y_layers) == case.num_layers
    for name, want in ref.named().items():
        err = np.abs(out.named()[name] - want).max()
        assert err <= atol, f"{case.name}: {name} max abs error {err:.3g}, should be <= {atol}"
    for k, (got, want) in enumerate(zip(out.y_layers, ref.y_layers, strict=True)):
        err = np.abs(got - want).max()
        assert err <= atol, f"{case.name}: y of layer {k} max abs error {err:.3g}"
    if case.seq_lengths is not None:  # padded steps of y are exactly 0 (ORT writes zeros)
        pad = np.arange(case.seq_len)[None, :] >= inputs.lengths[:, None]
        for y in out.y_layers:
            assert (y[pad] == 0).all()
    return out, ref


def feature_effect(case: Case, **without) -> float:
    """How far the reference moves when the case loses a feature (same weights and data)."""
    canonical, inputs = params.generate(case), data.generate(case)
    plain = case.model_copy(update=without)
    return float(np.abs(reference.run(case, canonical, inputs).y
                        - reference.run(plain, canonical, inputs).y).max())


# Running -------------------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_peepholes(direction):
    case = make_case(cell="lstm", peepholes=True, direction=direction, weights={"scale": 1.0})
    assert_matches(case)
    assert feature_effect(case, peepholes=False) > 100 * ATOL


def test_peephole_order_is_i_o_f():
    """P holds i, o, f (docs/layouts.md, onnx, pitfall P10b): reading it as i, f, o diverges."""
    case = make_case(cell="lstm", peepholes=True, direction="bidirectional")
    native = LAYOUT.to_native(params.generate(case), case)
    H = case.hidden_size
    p_iof = native["P"]
    swapped = dict(native, P=np.concatenate([p_iof[:, :H], p_iof[:, 2 * H:], p_iof[:, H:2 * H]], 1))
    good, ref, _, _ = run_both(case, native)
    bad, _, _, _ = run_both(case, swapped)
    assert max_err(good, ref) <= ATOL
    assert max_err(bad, ref) > 100 * ATOL


@pytest.mark.parametrize("cell,extra", [
    ("lstm", {}), ("lstm", {"peepholes": True, "direction": "bidirectional"}),
    ("gru", {"reset_after": True}), ("gru", {"reset_after": False}),
])
def test_gate_clip(cell, extra):
    case = make_case(cell=cell, gate_clip=0.5, weights={"scale": 1.5}, **extra)
    assert node_attributes(case)["clip"] == 0.5
    assert_matches(case)
    assert feature_effect(case, gate_clip=None) > 0.05  # the clip really binds


@pytest.mark.parametrize("extra", [{}, {"peepholes": True, "direction": "bidirectional"}])
def test_input_forget(extra):
    case = make_case(cell="lstm", input_forget=True, **extra)
    assert node_attributes(case)["input_forget"] == 1
    assert_matches(case)
    assert feature_effect(case, input_forget=False) > 0.05


def test_forget_bias_is_folded_into_B():
    case = make_case(cell="lstm", forget_bias=1.0)
    assert_matches(case)
    assert feature_effect(case, forget_bias=0.0) > 0.05


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_bidirectional_variable_lengths_random_states(cell):
    case = make_case(cell=cell, direction="bidirectional", seq_lengths=[6, 3, 1])
    out, ref = assert_matches(case)
    # the reverse direction starts at each sequence's last valid step: its h_n is its y at t=0
    H = case.hidden_size
    np.testing.assert_array_equal(out.h_n[1], out.y[:, 0, H:])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_two_layer_stack(cell, direction):
    assert_matches(make_case(cell=cell, num_layers=2, direction=direction, seq_lengths=[6, 4, 2]))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_reverse_only_direction(cell):
    case = make_case(cell=cell, direction="reverse", num_layers=2, seq_lengths=[5, 6, 2])
    assert LAYOUT.shapes(case)["layer0/W"][0] == 1  # one direction, at index 0
    assert_matches(case)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_linear_before_reset(reset_after):
    case = make_case(cell="gru", reset_after=reset_after, direction="bidirectional")
    assert node_attributes(case)["linear_before_reset"] == int(reset_after)
    assert_matches(case)
    # the other variant, run by ORT on the same weights, is far off (pitfall P6)
    other = case.model_copy(update={"reset_after": not reset_after})
    out_other, _, _, _ = run_both(other)
    _, ref, _, _ = run_both(case)
    assert np.abs(out_other.y - ref.y).max() > 100 * ATOL


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("act", ["hard_sigmoid_tf_keras", "hard_sigmoid_keras3"])
def test_hard_sigmoid_activations(cell, act):
    case = make_case(cell=cell, recurrent_activation=act, direction="bidirectional",
                     weights={"scale": 2.0})
    assert_matches(case)
    other = "hard_sigmoid_keras3" if act == "hard_sigmoid_tf_keras" else "hard_sigmoid_tf_keras"
    assert feature_effect(case, recurrent_activation=other) > 100 * ATOL
    assert feature_effect(case, recurrent_activation="sigmoid") > 100 * ATOL


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_float16_runs_in_float32_inside(cell):
    """ORT CPU has no float16 LSTM/GRU kernel: it casts around a float32 node."""
    case = make_case(cell=cell, dtype="float16", direction="bidirectional")
    assert_matches(case, atol=2e-3)  # the float16 noise floor here is about 4e-4
    # the same float16-valued weights and data in a float32 model: equal after rounding
    canonical, inputs = params.generate(case), data.generate(case)
    out16, _ = ADAPTER.run(case, canonical, inputs)
    out32, _ = ADAPTER.run(case.model_copy(update={"dtype": "float32"}), canonical, inputs)
    np.testing.assert_array_equal(out16.y, out32.y.astype(np.float16).astype(np.float64))


def test_declared_not_applicable():
    def reason(**kw):
        return ADAPTER.not_applicable_reason(make_case(**kw))

    assert "double" in reason(cell="lstm", dtype="float64")
    assert reason(cell="gru", dtype="bfloat16")
    assert "projection" in reason(cell="lstm", proj_size=2)
    assert "gate pre-activations" in reason(cell="lstm", cell_clip=3.0)
    for kw in [dict(cell="lstm", peepholes=True, gate_clip=1.0, input_forget=True,
                    direction="reverse", forget_bias=1.0, dtype="float16"),
               dict(cell="gru", reset_after=False, recurrent_activation="hard_sigmoid_keras3")]:
        assert reason(**kw) is None


def test_float64_really_is_unsupported_by_ort():
    case = make_case(cell="lstm", dtype="float32")
    model = build_model(case, LAYOUT.to_native(params.generate(case), case))
    for init in model.graph.initializer:  # retype the float32 model as float64
        arr = onnx.numpy_helper.to_array(init)
        if arr.dtype == np.float32:
            init.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float64), init.name))
    for v in list(model.graph.input) + list(model.graph.output):
        v.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    options = ort.SessionOptions()
    options.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    x = {k: v.astype(np.float64) if v.dtype == np.float32 else v
         for k, v in feeds(case, data.generate(case)).items()}
    with pytest.raises(Exception, match="does not support double"):
        sess.run(None, x)


# Layout ---------------------------------------------------------------------------------------

ROUND_TRIP_CASES = [
    dict(cell="lstm"),
    dict(cell="lstm", peepholes=True, direction="bidirectional", num_layers=3),
    dict(cell="lstm", peepholes=True, direction="reverse"),
    dict(cell="gru", direction="bidirectional", num_layers=2),
    dict(cell="gru", direction="reverse", reset_after=False),
]


@pytest.mark.parametrize("kw", ROUND_TRIP_CASES)
def test_round_trip(kw):
    case = make_case(**kw)
    canonical = params.generate(case)
    back = LAYOUT.from_native(LAYOUT.to_native(canonical, case), case)
    assert set(back.tensors) == set(canonical.tensors)
    for k, v in canonical.tensors.items():
        np.testing.assert_array_equal(back[k], v, err_msg=k)


def test_round_trip_with_forget_bias():
    case = make_case(cell="lstm", forget_bias=1.0, direction="bidirectional")
    canonical = params.generate(case)
    native = LAYOUT.to_native(canonical, case)
    H = case.hidden_size
    # B = [Wb_i Wb_o Wb_f Wb_c | Rb ...]: the forget bias sits in the input-bias f block
    np.testing.assert_allclose(native["B"][1, 2 * H:3 * H],
                               canonical["layer0/backward/bW_f"] + 1.0, rtol=0, atol=0)
    back = LAYOUT.from_native(native, case)
    for k, v in canonical.tensors.items():
        np.testing.assert_allclose(back[k], v, rtol=0, atol=1e-15, err_msg=k)


def test_names_and_shapes():
    H, I = 4, 3
    assert LAYOUT.shapes(make_case(cell="lstm", peepholes=True)) == {
        "W": (1, 4 * H, I), "R": (1, 4 * H, H), "B": (1, 8 * H), "P": (1, 3 * H)}
    assert LAYOUT.shapes(make_case(cell="gru", direction="bidirectional", num_layers=2)) == {
        "layer0/W": (2, 3 * H, I), "layer0/R": (2, 3 * H, H), "layer0/B": (2, 6 * H),
        "layer1/W": (2, 3 * H, 2 * H), "layer1/R": (2, 3 * H, H), "layer1/B": (2, 6 * H)}


@pytest.mark.parametrize("kw", [
    dict(cell="lstm", peepholes=True, direction="bidirectional", num_layers=2,
         seq_lengths=[6, 3, 1], gate_clip=2.0, input_forget=True),
    dict(cell="lstm", direction="reverse", recurrent_activation="hard_sigmoid_keras3"),
    dict(cell="gru", direction="bidirectional", num_layers=2, reset_after=False,
         recurrent_activation="hard_sigmoid_tf_keras"),
])
def test_onnx_checker_and_ort_accept_the_layout(kw):
    case = make_case(**kw)
    native = LAYOUT.to_native(params.generate(case), case)
    model = build_model(case, native)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    T, N, D, H = case.seq_len, case.batch, case.num_directions, case.hidden_size

    def dims(v):
        return tuple(d.dim_value for d in v.type.tensor_type.shape.dim)

    shapes = {v.name: dims(v) for v in inferred.graph.output}
    for k in range(case.num_layers):
        assert shapes[f"Y{k}"] == (T, D, N, H) and shapes[f"Y_h{k}"] == (D, N, H)
    # each node's W, R, B, P inputs are exactly the layout's tensors, in the schema's slots
    inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
    slots = {"W": 1, "R": 2, "B": 3, "P": 7}
    rnn_nodes = [n for n in model.graph.node if n.op_type == case.cell.upper()]
    assert len(rnn_nodes) == case.num_layers
    expected = LAYOUT.shapes(case)
    for k, node in enumerate(rnn_nodes):
        schema = onnx.defs.get_schema(node.op_type, 22)
        for name, slot in slots.items():
            if slot >= len(node.input):
                continue
            assert schema.inputs[slot].name == name
            native_name = name if case.num_layers == 1 else f"layer{k}/{name}"
            assert node.input[slot] == native_name
            assert inits[native_name] == expected[native_name]
    # ORT runs the model
    options = ort.SessionOptions()
    options.log_severity_level = 4
    x = feeds(case, data.generate(case))
    ort.InferenceSession(model.SerializeToString(), options,
                         providers=["CPUExecutionProvider"]).run(None, x)
    # The checker does not check W/R/B/P shapes; ORT does from a version between 1.28 and 1.30
    # (1.21 .. 1.27, which run the adapter right, do not: measured with onnx 1.17).
    if tuple(int(n) for n in ort.__version__.split(".")[:2]) < (1, 30):
        return
    w = "W" if case.num_layers == 1 else "layer0/W"
    bad = build_model(case, dict(native, **{w: native[w][:, :-H]}))
    sess = ort.InferenceSession(bad.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="Input W must have shape"):
        sess.run(None, x)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_matches_torch_onnx_exporter(cell):
    """PyTorch's (TorchScript) ONNX exporter writes, per layer, W/R/B initializers equal to
    the torch state_dict taken through layouts torch -> canonical -> onnx."""
    torch = pytest.importorskip("torch")
    case = make_case(cell=cell, direction="bidirectional", num_layers=2, initial_state="zeros")
    torch.manual_seed(0)
    kw = dict(num_layers=2, bidirectional=True, batch_first=True)
    module = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(3, 4, **kw).eval()
    buf = io.BytesIO()
    # torch 2.4 (the declared minimum) has no dynamo argument: its export is the TorchScript
    # exporter. An exporter that fails fails the test: the torch-onnx-torchscript adapter makes
    # the same call.
    takes_dynamo = "dynamo" in inspect.signature(torch.onnx.export).parameters
    legacy = {"dynamo": False} if takes_dynamo else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(3, 6, 3),), buf, opset_version=18, **legacy)
    model = onnx.load_from_string(buf.getvalue())
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    state = {k: v.detach().numpy().astype(np.float64) for k, v in module.state_dict().items()}
    native = LAYOUT.to_native(get_layout("torch").from_native(state, case), case)
    nodes = [n for n in model.graph.node if n.op_type == cell.upper()]
    assert len(nodes) == 2
    for k, node in enumerate(nodes):
        if cell == "gru":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            assert attrs["linear_before_reset"] == 1  # torch GRU is reset-after
        for slot, name in enumerate(["W", "R", "B"], start=1):
            exported = inits[node.input[slot]]
            np.testing.assert_array_equal(exported, native[f"layer{k}/{name}"], err_msg=name)


def test_a_pair_on_the_harness_graph_says_so_and_an_exporters_does_not():
    """ONNX Runtime, OpenVINO and onnx.reference run the graph the harness writes from the
    equations: their pairs say so, as a user may take them for a check of their own export."""
    from support.runnable import runnable

    from harness.pairs import run_pair
    from harness.prepare import prepare

    prep = prepare(Case(name="route", cell="gru", input_size=2, hidden_size=3, seq_len=3))
    r = run_pair(prep, runnable("onnxruntime"))
    assert r.status == "pass" and "ran the harness's own ONNX graph" in r.reason, r.reason
    for name in ("openvino", "onnx-reference"):
        assert "harness's own ONNX graph" in get_adapter(name).route_note(prep.case)
    for name in ("torch-onnx-dynamo", "torch-onnx-torchscript", "torch-cpu"):
        assert get_adapter(name).route_note(prep.case) is None
