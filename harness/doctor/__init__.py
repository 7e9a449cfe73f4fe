"""The layout doctor: which misreading of a weights file reproduces the outputs someone got.

A tool beside the run: :mod:`.diagnose` makes the diagnosis from the search (:mod:`.search`,
layer by layer in :mod:`.local`), the signature (:mod:`.explain`), the corrected mapping
(:mod:`.mapping`) and the bias fit (:mod:`.fit`), each held in :mod:`.findings`;
:mod:`.render` prints it and :mod:`.command` is ``rnn-harness doctor``. The mistakes and
their scoring are the mistake engine's (:mod:`harness.mistakes`), which the run's blind-spot
check shares.
"""

from harness.doctor.command import doctor_file, load_expected
from harness.doctor.diagnose import diagnose
from harness.doctor.findings import Diagnosis, Finding
from harness.doctor.render import diagnosis_dict, places_of, render
from harness.doctor.search import Doctor

__all__ = ["Diagnosis", "Doctor", "Finding", "diagnose", "diagnosis_dict", "doctor_file",
           "load_expected", "places_of", "render"]
