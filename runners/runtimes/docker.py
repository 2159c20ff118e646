"""`docker`: the Docker CLI. A daemon that goes away mid-run ends the run as a failure of the environment
(`fault()`); without live-restore, a dockerd that comes back removes the --rm containers it finds running."""

from __future__ import annotations

import json
import subprocess

from .base import DockerCliRuntime, run_quiet

DAEMON_PROBE_S = 15  # a daemon that does not answer `docker version` within this is gone


class DockerRuntime(DockerCliRuntime):
    name = "docker"
    privilege = "a root daemon (dockerd), rootless only where dockerd itself runs so"
    install_hint = "containers/dockerd.sh --install (Debian's docker.io; starts the daemon)"
    binary = "docker"
    subcommand = ("run", "--rm", "--init")

    def image_labels(self, image: str) -> dict[str, str]:
        found = run_quiet([self.executable(), "image", "inspect", "--format", "{{json .Config.Labels}}", image])
        try:
            return dict(json.loads(found.stdout) or {}) if found.returncode == 0 else {}
        except (ValueError, TypeError):
            return {}

    def fault(self) -> str | None:
        try:
            answer = run_quiet([self.executable(), "version", "--format", "{{.Server.Version}}"], timeout=DAEMON_PROBE_S)
        except subprocess.TimeoutExpired:
            return f"docker daemon went away (no answer within {DAEMON_PROBE_S} s)"
        if answer.returncode == 0:
            return None
        said = next((line.strip() for line in answer.stderr.splitlines() if line.strip()), f"exit {answer.returncode}")
        return f"docker daemon went away ({said[:200]})"
