"""MLPerf-style `:::MLLOG {...}` lines, for sites whose log scrapers expect them.

Same shape as the mlperf_logging package's output (namespace, time_ms,
event_type, key, value, metadata); written by hand because that package
pulls in far more than ten lines of formatting need.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO


class MLLogger:
    def __init__(self, enabled: bool, stream: TextIO = sys.stdout):
        self.enabled = enabled
        self.stream = stream

    def _emit(self, event_type: str, key: str, value=None, **metadata) -> None:
        if not self.enabled:
            return
        event = {
            "namespace": "",
            "time_ms": int(time.time() * 1000),
            "event_type": event_type,
            "key": key,
            "value": value,
            "metadata": {"file": "dlbench", **metadata},
        }
        self.stream.write(":::MLLOG " + json.dumps(event) + "\n")
        self.stream.flush()

    def event(self, key: str, value=None, **metadata) -> None:
        self._emit("POINT_IN_TIME", key, value, **metadata)

    def start(self, key: str, value=None, **metadata) -> None:
        self._emit("INTERVAL_START", key, value, **metadata)

    def end(self, key: str, value=None, **metadata) -> None:
        self._emit("INTERVAL_END", key, value, **metadata)
