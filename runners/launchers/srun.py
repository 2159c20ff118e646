"""`srun`: Slurm job steps. Cyclic distribution spreads workers over nodes and puts the
PS and the chief beside workers, as in seed 000; one failed task ends the step."""

from __future__ import annotations

from .base import LaunchSpec, Launcher


class SrunLauncher(Launcher):
    name = "srun"
    binary = "srun"

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.binary, "--ntasks", str(spec.processes), "--kill-on-bad-exit=1", "--distribution=cyclic"]
        if spec.hosts:
            argv += ["--nodes", str(len(spec.hosts)), "--nodelist", ",".join(spec.hosts)]
        return [*argv, *spec.extra, *spec.bench, *spec.bench_args]

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        """Without --hosts, bench finds process 0's node in Slurm's own node list."""
        return spec.rank_env() if spec.hosts else dict(spec.env)
