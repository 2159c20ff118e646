"""`horovod`: Horovod's ring all-reduce, for both frameworks."""

from __future__ import annotations

from .base import Strategy


class HorovodStrategy(Strategy):
    name = "horovod"
    frameworks = ("torch", "tensorflow")
