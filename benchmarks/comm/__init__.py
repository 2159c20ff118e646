"""Communication microbenchmarks (`bench comm`): all-reduce, ping-pong, gradient buckets, PS push/pull.

Adding a backend = one module with a `CommBackend` subclass + one line in framework_specs.COMM_BACKENDS (where
the option table reads the --backend choices without importing this package).
"""

from __future__ import annotations

from ..core.framework_specs import COMM_BACKENDS as BACKENDS
from ..core.registry import load_target


def load(name: str):
    return load_target(BACKENDS[name][1])
