"""A running Docker engine for the container tests, started by the project's own script.

Skips (loudly) only where Docker cannot exist: not root, or no apt to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERD = ROOT / "containers" / "dockerd.sh"
ENSURE_PACKAGES = ROOT / "scripts" / "ensure-packages.sh"
# What `make images` needs beside the engine on a fresh machine: the local base image
# is made with debootstrap, and the compose tests need docker-compose (v1 here).
HOST_PACKAGES = ("debootstrap", "docker-compose")


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
    if os.geteuid() == 0 and shutil.which("apt-get"):
        p = subprocess.run([str(ENSURE_PACKAGES), *HOST_PACKAGES], capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"could not install {HOST_PACKAGES}: {p.stderr.strip()}"
    return "docker"
