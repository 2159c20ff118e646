"""`none`: independent processes, each training its own replica (no gradient exchange)."""

from __future__ import annotations

from .base import Strategy


class NoStrategy(Strategy):
    name = "none"
    summary = "independent processes, each training its own replica"
    frameworks = ("torch", "tensorflow")
    syncs_replicas = False  # several ranks train independent replicas
    comm_ops = ("allreduce", "pingpong", "gradients")
