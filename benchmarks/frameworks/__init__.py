"""Framework backends, loaded by name only when a run needs one.

Adding a framework = one module with a `Framework` subclass + its entry in benchmarks/core/framework_specs.py.
"""

from __future__ import annotations

from ..core.framework_specs import FRAMEWORKS
from ..core.registry import Registry, load_target
from .base import Framework

BACKENDS = Registry("framework", {name: spec.backend for name, spec in FRAMEWORKS.items()})


def load(name: str, strategy=None) -> type[Framework]:
    """The backend class for framework `name`; a strategy names its own subclass where it needs one
    (DDP, Horovod, all-reduce, TF PS: Strategy.backends)."""
    own = strategy.backends.get(name) if strategy is not None else None
    return load_target(own) if own else BACKENDS.load(name)


__all__ = ["BACKENDS", "Framework", "load"]
