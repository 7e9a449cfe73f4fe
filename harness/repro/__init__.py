"""Standalone reproducers: for a pair that diverged (or failed with outputs, or is a known
upstream bug), a folder with ``repro.py`` (NumPy and the adapter's framework only), its data,
a README ready to paste into the framework's tracker and, for an ONNX graph, the ONNX
backend-test folder.

- :mod:`harness.handed` (beside :mod:`harness.data`, whose ``Outputs`` carry it): what an
  adapter hands its framework, recorded while it runs.
- :mod:`harness.repro.record`: everything one reproducer is written from (the case, the
  canonical weights and inputs, the float64 outputs, the finding, what was handed).
- :mod:`harness.repro.equations`: the float64 NumPy cell equations pasted into every script.
- :mod:`harness.repro.render`: the script's text, assembled from the parts every script
  shares and its framework family's (harness/families/: the adapter's own code, pasted).
- :mod:`harness.repro.write`: the folder, bounded in names and sizes.

Writing a reproducer imports no framework: everything framework-specific was recorded by the
adapter during the run (an ONNX model's bytes, the constructor arguments).
"""
