"""The framework toolkit: what the adapters and the tools beside them (``compare``, ``convert``,
the API's expected outputs, the integer reference) share about each framework, one module per
framework or file format. It sits below every one of them: it imports nothing of
``harness.adapters``, ``harness.judges``, ``harness.models`` or the run, and no framework at import
time (each function imports its own, as the adapters do).

- :mod:`harness.frameworks.tf`: importing TensorFlow without its native start-up lines.
- :mod:`harness.frameworks.native_stderr`: file descriptor 2 captured around a native call.
- :mod:`harness.frameworks.keras`: the case's Keras stack (built, loaded, unpacked).
- :mod:`harness.frameworks.litert`: importing the LiteRT interpreter.
- :mod:`harness.frameworks.litert_flatbuffer`: a ``.tflite`` file's ops, tensors and grids.
- :mod:`harness.frameworks.tflite_tensors`: a ``.tflite`` tensor's values as real numbers and
  back (pure NumPy, pasted into reproducers).
- :mod:`harness.frameworks.litert_run`: a ``.tflite`` run as it is, one op of it cut out.
- :mod:`harness.frameworks.onnx`: the harness's own ONNX ``LSTM`` / ``GRU`` graph, its feeds
  and outputs; importing ONNX Runtime.
- :mod:`harness.frameworks.openvino`: importing OpenVINO, its core and ONNX frontend.
- :mod:`harness.frameworks.openvino_ir`: one sequence op of a shipped IR run as it is.
- :mod:`harness.frameworks.torch`: PyTorch's precision flags.
"""
