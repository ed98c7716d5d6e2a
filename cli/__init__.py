"""The ``parkbrake`` command line: one module per command group, registered in ``registry.py``."""
