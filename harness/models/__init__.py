"""Is what I ship what I trained? Two model files (or objects) compared layer by layer:
``rnn-harness compare`` and :func:`harness.compare_models` (docs/compare.md).

- :mod:`.layers`: every recurrent layer of a file or object, as canonical parameters;
- :mod:`.weights_measure`: what the weights judge (:mod:`harness.models.judges.weights`) measures of
  a pairing, the doctor's diagnosis included; :mod:`.shipped_run`: the shipped layer run in
  its framework against the float64 reference on the original's weights, for the
  shipped-outputs judge (:mod:`harness.models.judges.shipped`);
- :mod:`.comparison`: pairing and :func:`compare_models`; :mod:`.render`: the table, the
  report folder.

A tool beside the run, as the doctor is: it uses the readers, the doctor and the run's pair
path; nothing of the run imports it.
"""

from harness.models.comparison import ModelComparison, Pairing, compare_models

__all__ = ["ModelComparison", "Pairing", "compare_models"]
