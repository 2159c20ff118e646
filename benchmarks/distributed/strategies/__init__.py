"""One object per --strategy; adding one = a Strategy subclass in its own file + one line here."""

from __future__ import annotations

from .allreduce import AllreduceStrategy
from .base import WORKER, Role, Strategy
from .ddp import DdpStrategy
from .fsdp import FsdpStrategy
from .horovod import HorovodStrategy
from .none import NoStrategy
from .ps import CHIEF, PS, PsStrategy

_ALL = (NoStrategy(), DdpStrategy(), HorovodStrategy(), AllreduceStrategy(), PsStrategy(), FsdpStrategy())
STRATEGIES: dict[str, Strategy] = {strategy.name: strategy for strategy in _ALL}
NAMES = tuple(STRATEGIES)  # bench's --strategy choices, in this order
COMM_NAMES = tuple(name for name, s in STRATEGIES.items() if s.comm_ops)  # bench comm's
COMM_OPS = tuple(op for s in _ALL for op in s.comm_ops)  # every operation bench comm measures
DEFAULT = NoStrategy.name
ROLES = (WORKER, CHIEF, PS)  # every role kind a process can have


def get(name: str | None) -> Strategy:
    """The strategy called `name` (None: the default). Unknown names raise KeyError:
    callers validate first (config.validate_strategy says which names exist)."""
    return STRATEGIES[name or DEFAULT]


__all__ = ["COMM_NAMES", "COMM_OPS", "DEFAULT", "NAMES", "ROLES", "STRATEGIES", "Role", "Strategy", "get"]
