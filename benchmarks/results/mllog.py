"""`bench --mllog`: MLPerf's `:::MLLOG {...}` lines, for sites whose log scrapers expect them.

Written by MLCommons' own mlperf-logging package (its MLLogger), so the lines are
what MLPerf's compliance tools read. The package is imported only when --mllog is
on (it imports numpy); `require()` turns its absence into bench's one-line error.

MLCommons' compliance checker (`python -m mlperf_logging.compliance_checker --usage training
--ruleset 4.1.0`) also wants keys a benchmark cannot know: who submits, on what platform, in which
division. They come from --mllog-org, --mllog-platform and --mllog-division (or MLPERF_SUBMISSION_ORG,
_PLATFORM, _DIVISION); without them the checker's only findings are those keys and the init_stop
check that needs the division (docs/accuracy.md#mllog).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from typing import TextIO

from ..core.errors import UsageError

PACKAGE = "mlperf-logging"
# Frames from the package's logger to the code that called ours: the file and line it records.
STACK_OFFSET = 2
# The recorded file is relative to the directory holding `benchmarks/`: benchmarks/run/measurement.py, not a site path.
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])
SUBMISSION = ("org", "platform", "division")  # --mllog-<name> / MLPERF_SUBMISSION_<NAME>: submission_<name>


def submission(args) -> dict:
    """The submission keys given (options or their variables): {"org": ..., ...}, the unknown left out."""
    return {name: getattr(args, f"mllog_{name}") for name in SUBMISSION if getattr(args, f"mllog_{name}", None)}


def require() -> None:
    if importlib.util.find_spec("mlperf_logging") is None:
        raise UsageError(f"--mllog needs MLCommons' {PACKAGE} package, which is not installed here "
                         f"(pip install -r containers/late/requirements.txt, its pin; the dlbench images have it)")


class MLLogger:
    def __init__(self, enabled: bool, stream: TextIO = sys.stdout, submission: dict | None = None):
        self._writer = None
        self._submission = submission or {}
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

    def run_header(self) -> None:
        """After init_start: the submission keys given, and the facts the checker's common rules ask of every run.
        cache_clear is false: dlbench does not drop the host's caches before a run (MLPerf's reference does), and
        the key says so rather than claim it; dlbench never accumulates gradients over steps."""
        for name, value in self._submission.items():
            self.event(f"submission_{name}", value)
        self.event("cache_clear", False)
        self.event("gradient_accumulation_steps", 1)

    def dataset(self, train_samples: int, eval_samples: int) -> None:
        """The sizes MLPerf asks once per run: the training set, and the validation images each evaluation sees."""
        self.event("train_samples", train_samples)
        self.event("eval_samples", eval_samples)
