"""The mistake engine: the plausible ways to misread a weights file (:mod:`.misreadings`; one
layer at a time, :mod:`.local`), the scoring of a hypothesis against the outputs the weights
really give (:mod:`.scoring`) and the time and count a search over them may spend
(:mod:`.budget`).

It sits below both of its users: the blind-spot check of the run (:mod:`harness.blind`) and the
doctor (:mod:`harness.doctor`, a tool); it imports neither.
"""

from harness.mistakes.budget import Budget
from harness.mistakes.local import local_catalogue
from harness.mistakes.misreadings import Catalogue, catalogue
from harness.mistakes.mistake import Mistake, Trial
from harness.mistakes.scoring import Hypothesis, Score, Scorer

__all__ = ["Budget", "Catalogue", "Hypothesis", "Mistake", "Score", "Scorer", "Trial",
           "catalogue", "local_catalogue"]
