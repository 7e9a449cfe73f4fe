"""This repository's pytest settings: the rnn-harness plugin (harness/pytest_plugin/), which
collects ``cases/`` (and any case file named), with its options under their short names too
(``--adapters``, ``--device``, ``--require-gpu``, ``--shard``: tox.ini, CI and the README use
them).

The plugin is the ``rnn_harness`` entry point of the installed package. A checkout used without
installing it (``PYTHONPATH=.``), or a run with plugin autoloading off, registers it here, under
the entry point's name. Registered once only: when the entry point (or ``-p
harness.pytest_plugin``) has loaded the module already, it is left as it is; a second
registration of the same module would stop pytest ("Plugin already registered under a different
name"). ``-p no:rnn_harness`` is respected.
"""

from __future__ import annotations

import pytest

from harness import pytest_plugin


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if not pluginmanager.is_registered(pytest_plugin):
        # registering replays the hooks already called (pytest_addoption among them): the
        # plugin's options are added now, as the entry point's would have been
        pluginmanager.register(pytest_plugin, pytest_plugin.PLUGIN_NAME)
    if pluginmanager.is_registered(pytest_plugin):  # not when blocked (-p no:rnn_harness)
        pytest_plugin.add_short_options(parser)
