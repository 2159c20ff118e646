"""A running Docker engine for the container tests, started by the project's own script.

Skips (loudly) only where Docker cannot exist: not root, or no apt to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

DOCKERD = Path(__file__).resolve().parents[2] / "containers" / "dockerd.sh"


@pytest.fixture(scope="session")
def docker():
    argv = [str(DOCKERD)]
    if os.geteuid() == 0 and shutil.which("apt-get"):
        argv.append("--install")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            pytest.skip(f"DOCKER UNAVAILABLE, container tests NOT run: {p.stderr.strip()}")
        pytest.fail(f"could not start Docker: {p.stderr.strip()}")
    return "docker"
