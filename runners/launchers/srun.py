"""`srun`: Slurm job steps. Cyclic distribution spreads workers over nodes and puts the
PS and the chief beside workers, as in seed 000; one failed task ends the step. srun's stderr
is kept (Launcher.run), so that a node failure is recorded as a fault of the environment naming
the node (docs/slurm.md).

srun answers SIGTERM (and SIGQUIT, SIGHUP) by killing every task at once ("forcing job termination":
no record is written); it passes a single SIGINT on to every task under --disable-status, and bench
ends on it with what it measured: that is how benchrun stops the step."""

from __future__ import annotations

import re
import signal

from .base import Launcher, LaunchSpec

NODE_FAILURE = re.compile(r"Node failure on ([A-Za-z0-9_.-]+)")  # not "STEP ... ON node1 CANCELLED": that is a survivor


class SrunLauncher(Launcher):
    name = "srun"
    binary = "srun"
    install_hint = "scripts/local-slurm.sh start (a one-node Slurm on this machine), or the site's Slurm"
    stop_signal = signal.SIGINT

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.binary, "--ntasks", str(spec.processes), "--kill-on-bad-exit=1", "--distribution=cyclic",
                "--disable-status"]
        if spec.hosts:
            argv += ["--nodes", str(len(spec.hosts)), "--nodelist", ",".join(spec.hosts)]
        return [*argv, *spec.extra, *spec.bench, *spec.run.to_argv()]

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        """Without --hosts, bench finds process 0's node in Slurm's own node list."""
        return spec.rank_env() if spec.hosts else spec.identity_env()

    def fault(self) -> str | None:
        nodes = list(dict.fromkeys(match.group(1) for line in self.said for match in NODE_FAILURE.finditer(line)))
        if not nodes:
            return None
        return f"Slurm node {', '.join(nodes)} failed during the run (srun: Node failure on {', '.join(nodes)})"
