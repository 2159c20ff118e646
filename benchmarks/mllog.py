"""`bench --mllog`: MLPerf's `:::MLLOG {...}` lines, for sites whose log scrapers expect them.

Written by MLCommons' own mlperf-logging package (its MLLogger), so the lines are
what MLPerf's compliance tools read. The package is imported only when --mllog is
on (it imports numpy); `require()` turns its absence into bench's one-line error.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from typing import TextIO

from .errors import UsageError

PACKAGE = "mlperf-logging"
# Frames from the package's logger to the code that called ours: the file and line it records.
STACK_OFFSET = 2
# The recorded file is relative to the directory holding `benchmarks/`: benchmarks/measurement.py, not a site path.
SOURCE_ROOT = str(Path(__file__).resolve().parent.parent)


def require() -> None:
    if importlib.util.find_spec("mlperf_logging") is None:
        raise UsageError(f"--mllog needs MLCommons' {PACKAGE} package, which is not installed here "
                         f"(pip install -r containers/late/requirements.txt, its pin; the dlbench images have it)")


class MLLogger:
    def __init__(self, enabled: bool, stream: TextIO = sys.stdout):
        self._writer = None
        if enabled:
            from mlperf_logging.mllog.mllog import MLLogger as Writer

            logger = logging.Logger("dlbench.mllog")  # not registered: no global logging configuration touched
            handler = logging.StreamHandler(stream)
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            self._writer = Writer(logger=logger, default_stack_offset=STACK_OFFSET, root_dir=SOURCE_ROOT)

    def event(self, key: str, value=None, **metadata) -> None:
        if self._writer is not None:
            self._writer.event(key, value, metadata=metadata or None)

    def start(self, key: str, value=None, **metadata) -> None:
        if self._writer is not None:
            self._writer.start(key, value, metadata=metadata or None)

    def end(self, key: str, value=None, **metadata) -> None:
        if self._writer is not None:
            self._writer.end(key, value, metadata=metadata or None)
