"""dlbench: the in-image `bench` entrypoint.

Kept import-free on purpose: `bench --help` must never pull in a framework.
"""

__version__ = "0.1.0"
