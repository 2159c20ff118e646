"""Build things once, cached outside the clone and keyed on their inputs.

`once(name, inputs, build, valid)` runs `build()` only when no stamp for these
inputs exists under ~/.cache/dlbench/stamps (or `valid(stamp_text)` says the
thing it recorded is gone), one process at a time (a file lock), and stamps the
result. A fresh clone on the same machine, or the next `make test`, finds the
stamp and skips the build. Fixtures that install runtimes or build images use
it; a new one is a `once(...)` call with its own name and inputs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Callable, Iterable

from .helpers import ROOT

CACHE = Path(os.environ.get("DLBENCH_CACHE") or Path.home() / ".cache" / "dlbench")


def inputs_key(paths: Iterable[str | Path], extra: Iterable[str] = ()) -> str:
    """sha256 (16 hex) over the content of every file under `paths` (relative to the repository,
    sorted, __pycache__ left out) and the `extra` strings (versions, image ids, options)."""
    digest = hashlib.sha256()
    for path in sorted(Path(ROOT, p) for p in paths):
        files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            digest.update(str(file.relative_to(ROOT)).encode() + b"\0")
            digest.update(file.read_bytes() if file.exists() else b"<missing>")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()[:16]


def once(name: str, key: str, build: Callable[[], str], valid: Callable[[str], bool] = lambda text: True) -> str:
    """Run `build()` unless a stamp `name-key` exists and `valid(its text)`; returns the stamp's text
    (what `build()` returned: image ids, an install prefix...)."""
    stamps = CACHE / "stamps"
    stamps.mkdir(parents=True, exist_ok=True)
    stamp = stamps / f"{name}-{key}"
    with open(stamps / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test runs on one machine wait, then reuse
        if stamp.is_file() and valid(stamp.read_text()):
            return stamp.read_text()
        for old in stamps.glob(f"{name}-*"):
            old.unlink(missing_ok=True)
        text = build()
        stamp.write_text(text)
        return text
