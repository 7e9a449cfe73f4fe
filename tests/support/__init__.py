"""Modules the tests share (case makers, planted and faulty adapters, emulations): no tests.

Imported as ``support.<module>``: pytest puts ``tests/`` on ``sys.path`` for ``tests/conftest.py``
(rootdir-relative "prepend" import mode, no ``__init__.py`` above), and a spawned worker process
inherits that path, so it imports an adapter of these modules by the same name."""
