"""rnn-harness: cross-framework numerical conformance for LSTM and GRU layers.

Importing this package never imports a deep-learning framework: adapters import theirs lazily.
"""

from __future__ import annotations

import os
import time

# for the final line's wall time where /proc is missing (harness/cli/run.py, _process_seconds)
IMPORTED_AT = time.monotonic()

# TensorFlow prints start-up chatter to stderr (oneDNN, CUDA stubs, cuInit errors) unless told
# otherwise; the harness's own stderr is for progress and one-line errors. 3 hides E lines too
# (2 does not). This covers TensorFlow imported other than by the harness (a user's conftest);
# adapters/_tf.py's import_tf sets 3 whatever the user set, and silences fd 2 around the import.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__version__ = "0.1.0"
