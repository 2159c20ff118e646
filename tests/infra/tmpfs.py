"""Small real file systems for disk-full and read-only tests: `mount -t tmpfs` (needs root)."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(target: Path, options: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}): needs root")


@contextmanager
def small_fs(target: Path, size: str = "2m", readonly: bool = False):
    """A tmpfs of `size` at target (read-only when asked), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    _mount(target, f"size={size},mode=1777" + (",ro" if readonly else ""))
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def fill(directory: Path, leave: int = 0) -> Path:
    """Fill the file system of `directory` until at most `leave` bytes are free."""
    filler = directory / ".filler"
    with open(filler, "ab") as f:
        chunk = b"\0" * 65536
        while True:
            stat = os.statvfs(directory)
            free = stat.f_bavail * stat.f_frsize
            if free <= leave:
                break
            try:
                f.write(chunk[: max(1, min(len(chunk), free - leave))])
                f.flush()
            except OSError:
                break
    return filler
