"""`none`: independent processes, each training its own replica (no gradient exchange)."""

from __future__ import annotations

from ...core.framework_specs import FRAMEWORKS
from .base import Strategy


class NoStrategy(Strategy):
    name = "none"
    summary = "independent processes, each training its own replica"
    frameworks = tuple(FRAMEWORKS)  # every framework: nothing is exchanged, so nothing framework-specific is needed
    syncs_replicas = False  # several ranks train independent replicas
    comm_ops = ("allreduce", "pingpong", "gradients")
