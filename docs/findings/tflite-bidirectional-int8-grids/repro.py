"""TFLite full-integer conversion of a Bidirectional LSTM: grids that should be one."""
import os
import tempfile

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is Keras 2 (tf_keras), as TFLite converts it
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

print("tensorflow", tf.__version__)
T, I, H = 8, 32, 32
rng = np.random.default_rng(0)
tf.keras.utils.set_random_seed(0)
inp = tf.keras.Input((T, I), batch_size=2, name="x")
out = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(H, return_sequences=True))(inp)
model = tf.keras.Model(inp, out)


def representative():
    for _ in range(8):
        yield {"x": rng.standard_normal((2, T, I)).astype(np.float32)}


saved = tempfile.mkdtemp()
model.save(saved, save_format="tf")
conv = tf.lite.TFLiteConverter.from_saved_model(saved)
conv.optimizations = [tf.lite.Optimize.DEFAULT]
conv.representative_dataset = representative
conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
flat = conv.convert()

interp = tf.lite.Interpreter(model_content=flat)
interp.allocate_tensors()
tensors = {t["index"]: t for t in interp.get_tensor_details()}
ops = interp._get_ops_details()


def grid(index):
    scale, zero_point = tensors[index]["quantization"]
    return f"scale {scale:.6g} zero point {zero_point} ({tensors[index]['name']})"


# UNIDIRECTIONAL_SEQUENCE_LSTM: input 18 is the h state it reads back; the integer kernel
# writes h on its effective_hidden_scale_intermediate's grid and copies those integers to
# output 0 unchanged, and REVERSE_V2 copies bytes: each set below must be ONE grid.
hidden = sorted(i for i, t in tensors.items()
                if t["name"].startswith("effective_hidden_scale_intermediate"))
lstms = [op for op in ops if op["op_name"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
conflicts = 0
for op, written in zip(lstms, hidden, strict=True):
    grids = {"h written (intermediate)": written, "h read back (input 18)": op["inputs"][18],
             "output 0": op["outputs"][0]}
    same = len({tuple(tensors[i]["quantization"]) for i in grids.values()}) == 1
    conflicts += not same
    print(f"op {op['index']} UNIDIRECTIONAL_SEQUENCE_LSTM: {'one grid' if same else 'CONFLICT'}")
    for what, i in grids.items():
        print(f"  {what:26s} {grid(i)}")
for op in ops:
    if op["op_name"] == "REVERSE_V2":
        a, b = op["inputs"][0], op["outputs"][0]
        same = tensors[a]["quantization"] == tensors[b]["quantization"]
        conflicts += not same
        print(f"op {op['index']} REVERSE_V2: {'one grid' if same else 'CONFLICT'}")
        print(f"  {'input':26s} {grid(a)}\n  {'output':26s} {grid(b)}")
print(f"{conflicts} conflicting grid(s)")
