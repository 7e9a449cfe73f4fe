"""NNCF-quantized (u8) ONNX GRU with linear_before_reset=0, run by OpenVINO: wrong at t=0."""
import nncf
import numpy as np
import onnx
import openvino as ov
from onnx import TensorProto, helper, numpy_helper

print("openvino", ov.__version__, "nncf", nncf.__version__, "onnx", onnx.__version__)
T, B, I, H = 8, 2, 32, 32
rng = np.random.default_rng(43)
W = rng.uniform(-1 / np.sqrt(H), 1 / np.sqrt(H), (1, 3 * H, I)).astype(np.float32)  # z, r, h
R = rng.uniform(-1 / np.sqrt(H), 1 / np.sqrt(H), (1, 3 * H, H)).astype(np.float32)
Bias = rng.uniform(-1 / np.sqrt(H), 1 / np.sqrt(H), (1, 6 * H)).astype(np.float32)
gru = helper.make_node("GRU", ["x", "W", "R", "B", "", "h0"], ["y", "h_n"], hidden_size=H,
                       linear_before_reset=0)
graph = helper.make_graph(
    [gru], "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I]),
                   helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, B, H])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, 1, B, H])],
    [numpy_helper.from_array(a, n) for a, n in ((W, "W"), (R, "R"), (Bias, "B"))])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
onnx.checker.check_model(model)

x = rng.standard_normal((T, B, I)).astype(np.float32)
h0 = np.zeros((1, B, H), np.float32)  # a deployed model starts from zero state
calibration = nncf.Dataset([{"x": rng.standard_normal((T, B, I)).astype(np.float32), "h0": h0}
                            for _ in range(8)])
core = ov.Core()
float_model = core.read_model(model.SerializeToString(), b"")  # ONNX bytes, no weights file
quantized = nncf.quantize(float_model, calibration, subset_size=8)  # u8 activations, i8 weights
for name, m in (("float", float_model), ("nncf u8", quantized)):
    compiled = core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    y = compiled({"x": x, "h0": h0})[0]
    print(name, "model: the CPU plugin runs the GRU (RNNSeq) in", *{
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "RNNSeq"})
    if name == "float":
        y_float = y
    else:
        y_q = y
kinds = sorted({op.get_type_name() for op in quantized.get_ops()})
print("quantized model ops:", ", ".join(kinds))


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def numpy_gru(x):  # ONNX GRU, linear_before_reset=0: h~ = tanh(Wh x + Rh (r * h) + Wbh + Rbh)
    Wz, Wr, Wh = np.split(W[0].astype(np.float64), 3)
    Rz, Rr, Rh = np.split(R[0].astype(np.float64), 3)
    bz, br, bh, cz, cr, ch = np.split(Bias[0].astype(np.float64), 6)
    h, ys = np.zeros((B, H)), []
    for xt in x.astype(np.float64):
        z = sigmoid(xt @ Wz.T + h @ Rz.T + bz + cz)
        r = sigmoid(xt @ Wr.T + h @ Rr.T + br + cr)
        n = np.tanh(xt @ Wh.T + (r * h) @ Rh.T + bh + ch)
        h = (1 - z) * n + z * h
        ys.append(h)
    return np.stack(ys)


ref = numpy_gru(x)
scale = np.abs(ref).max()
for t in range(T):
    e_f = np.abs(y_float[t, 0] - ref[t]).max()
    e_q = np.abs(y_q[t, 0] - ref[t]).max()
    print(f"t={t}  max|y-ref|: float {e_f:.2e}  nncf u8 {e_q:.3f}  ({e_q / scale:.0%} of max|ref|)")
sqnr = 10 * np.log10((ref ** 2).sum() / ((y_q[:, 0] - ref) ** 2).sum())
print(f"SQNR of the u8 model over y: {sqnr:.1f} dB")
# a GRU's h is a convex mix of tanh values and h0 = 0: it stays inside (-1, 1)
print(f"max|y|: numpy {np.abs(ref).max():.3f}, float model {np.abs(y_float).max():.3f}, "
      f"u8 model {np.abs(y_q).max():.3f}")
