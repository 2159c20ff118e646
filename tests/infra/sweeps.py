"""What the sweep tests share: tiny plans, reading a store line by line, and finding the
processes a test started (by a marker variable in their environment)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

TINY = {"image_size": 64, "num_warmup_batches": 0, "num_batches": 1, "num_threads": 1}


def write_plan(path: Path, plan) -> Path:
    path.write_text(plan if isinstance(plan, str) else yaml.safe_dump(plan))
    return path


def tiny_plan(**matrix) -> dict:
    return {"matrix": {"framework": ["torch"], "model": ["alexnet"], "batch_size": [2], **matrix}, "bench": dict(TINY)}


def lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def marked(marker: str) -> list[int]:
    """Live processes whose environment carries DLBENCH_TEST_MARK=marker."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if f"DLBENCH_TEST_MARK={marker}".encode() in environ.split(b"\0") and state != b"Z":
            found.append(int(pid))
    return found


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []
