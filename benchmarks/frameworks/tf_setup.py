"""Imported before TensorFlow by every module that uses it: TensorFlow's C++ log is quieted (read at its
import), and autograph's scratch files are removed when the worker leaves by its fast exit. autograph
writes each function it converts to a file in the temp dir and removes it at exit, which the fast exit
skips: every TensorFlow run would leave dozens in /tmp."""

from __future__ import annotations

import contextlib
import os
import sys

from ..core.processes import at_fast_exit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
AUTOGRAPH_MODULE_PREFIX = "__autograph_generated_file"  # autograph's converted functions, one module each


def remove_autograph_files() -> None:
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith(AUTOGRAPH_MODULE_PREFIX) else None
        if path:
            with contextlib.suppress(OSError):
                os.remove(path)


at_fast_exit(remove_autograph_files)
