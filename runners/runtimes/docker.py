"""`docker`: the Docker CLI. Host network and IPC (ranks talk over loopback, DataLoader shared memory)."""

from __future__ import annotations

from .base import DockerCliRuntime


class DockerRuntime(DockerCliRuntime):
    name = "docker"
    binary = "docker"
    subcommand = ("run", "--rm", "--init")
