"""Plugins by name, for every kind (runtimes, launchers, frameworks, comm backends): one table of
"name" -> "module:attribute", imported only when a run asks for that name, and one error for a
name the table lacks.

    RUNTIMES = Registry("runtime", {"docker": "runners.runtimes.docker:DockerRuntime", ...})
    RUNTIMES.load("docker")  # the class; RUNTIMES.load("dockr") -> UsageError naming the choices

A Registry is a read-only mapping of the table, so `name in RUNTIMES`, `list(RUNTIMES)` and
`choices(RUNTIMES)` give the names in the table's order.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import UsageError, choices


def load_target(target: str) -> Any:
    """The attribute a "module:attribute" string names, its module imported now."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Registry(Mapping[str, str]):
    def __init__(self, kind: str, table: Mapping[str, str]):
        self.kind = kind
        self._table = dict(table)

    def __getitem__(self, name: str) -> str:
        return self._table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def check(self, name: str) -> str:
        """`name`, if the table has it; else the one error of every kind: `unknown KIND 'x' (choices: ...)`."""
        if name not in self._table:
            raise UsageError(f"unknown {self.kind} {name!r} (choices: {choices(self._table)})")
        return name

    def load(self, name: str) -> Any:
        return load_target(self._table[self.check(name)])
