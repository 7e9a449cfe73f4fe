"""``rnn-harness compare``'s judges of a pairing of two model files (:mod:`.pairing`,
:mod:`.weights`, :mod:`.shipped`), beside compare (:mod:`harness.models.comparison`), which names
them itself: a pairing is no case x adapter pair. The run's judges are in :mod:`harness.judges`,
which knows nothing of these (docs/judges.md).
"""
