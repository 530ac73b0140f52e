"""Experiment kinds on one run lifecycle (``lifecycle.py``): one folder per kind, each
registered by the ``KIND`` record of its ``kind.py`` (``registry.py``)."""
