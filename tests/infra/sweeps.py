"""What the sweep tests share: tiny plans, reading a store line by line, finding the processes a test
started (by a marker variable in their environment), and running a command with its memory measured."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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


@dataclass
class Measured:
    """A command's outcome with what it cost: its own peak resident memory and wall time."""

    returncode: int
    stdout: str
    stderr: str
    max_rss_mb: float
    seconds: float


def measured(argv: list[str], limit_mb: int, timeout: float) -> Measured:
    """Run argv (this checkout's packages first) under an address-space limit of `limit_mb`, so a command that
    grows without bound fails there instead of exhausting the machine; its own peak RSS, taken by
    rss_probe.py (why a probe: its docstring). Killed with its probe after `timeout` seconds (returncode -9,
    peak unknown: nan)."""
    from infra.helpers import python_env

    probe = Path(__file__).with_name("rss_probe.py")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        report = Path(scratch) / "report"
        child = subprocess.Popen([sys.executable, str(probe), str(limit_mb), str(report), "--", *argv],
                                 stdout=out, stderr=err, env=python_env(), start_new_session=True)
        try:
            child.wait(timeout=max(0.0, timeout - (time.monotonic() - started)))
            returncode, max_rss_kb = map(int, report.read_text().split())
            max_rss_mb = max_rss_kb / 1024
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            returncode, max_rss_mb = -9, float("nan")
        out.seek(0)
        err.seek(0)
        return Measured(returncode, out.read().decode(), err.read().decode(), max_rss_mb,
                        time.monotonic() - started)
