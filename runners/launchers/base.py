"""The Launcher interface: turn "N ranks of this bench command" into processes.

Shared here, stated once: the environment every rank gets, the process
group that is stopped as a whole on timeout, Ctrl-C or the end of process 0,
and the exit code (process 0's). A launcher states only its argv.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from benchmarks.distributed import strategies
from benchmarks.distributed.world import RUN_TOKEN_ENV
from benchmarks.errors import UsageError
from benchmarks.processes import STOP_GRACE_S, exit_code, stop_process_group


def bench_option(args: list[str], name: str) -> str | None:
    """The value of `name` in a bench argument list (`--flag value` or `--flag=value`)."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


@dataclass
class LaunchSpec:
    processes: int  # all processes: workers, plus PS and chief under --strategy ps
    bench: list[str]  # how to start bench: ["bench"] in images, [python, -m, benchmarks] on a host
    bench_args: list[str]
    hosts: list[str] = field(default_factory=list)  # empty: this machine only
    env: dict[str, str] = field(default_factory=dict)  # extra variables for every rank
    extra: list[str] = field(default_factory=list)  # launcher options passed through verbatim
    run_token: str = field(default_factory=lambda: uuid.uuid4().hex[:16])  # this run's ranks meet only each other

    @property
    def slots_per_host(self) -> int:
        return -(-self.processes // max(1, len(self.hosts)))

    def rank_env(self) -> dict[str, str]:
        """Variables every rank needs: where process 0 is, how many nodes, which run it belongs to."""
        coordinator = self.hosts[0] if self.hosts else "127.0.0.1"
        return {
            "DLBENCH_COORDINATOR": coordinator,
            "DLBENCH_NUM_NODES": str(max(1, len(self.hosts))),
            **self.identity_env(),
        }

    def identity_env(self) -> dict[str, str]:
        """The run's token (benchmarks.distributed.world.run_token) and the caller's variables."""
        return {RUN_TOKEN_ENV: self.run_token, **self.env}


def launch_spec(bench: list[str], bench_args: list[str], num_workers: int = 1, num_ps: int = 0,
                timeout_s: float | None = None, hosts: list[str] = (), extra: list[str] = (),
                env: dict[str, str] | None = None) -> LaunchSpec:
    """N training ranks of bench (plus the PS and chief under --strategy ps): checked, counted,
    with --num-ps and --timeout passed on to bench. `benchrun launch` and dispatch both use it."""
    if num_workers < 1:
        raise UsageError(f"-n must be 1 or more, got {num_workers}")
    if num_ps < 0:
        raise UsageError(f"--num-ps must be 0 or more, got {num_ps}")
    if bench_option(bench_args, "--num-ps") is not None:
        raise UsageError("give --num-ps to benchrun, not to bench (it decides how many processes to start)")
    name = bench_option(bench_args, "--strategy") or strategies.DEFAULT
    strategy = strategies.STRATEGIES.get(name) or strategies.get(None)  # unknown: bench itself refuses it
    if num_ps and not strategy.uses_ps:
        takers = " or ".join(s.name for s in strategies.STRATEGIES.values() if s.uses_ps)
        raise UsageError(f"--num-ps needs --strategy {takers} in the bench arguments (got --strategy {name})")
    if strategy.uses_ps and not num_ps:
        raise UsageError(f"--strategy {name} needs --num-ps 1 or more")
    if num_ps:
        bench_args = [*bench_args, "--num-ps", str(num_ps)]
    if timeout_s is not None and bench_option(bench_args, "--timeout") is None:
        bench_args = [*bench_args, "--timeout", str(timeout_s)]
    processes = strategy.processes(num_workers, num_ps)
    return LaunchSpec(processes=processes, bench=list(bench), bench_args=list(bench_args), hosts=list(hosts),
                      env=dict(env or {}), extra=list(extra))


class Launcher(ABC):
    name: str
    binary: str | None = None

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return spec.rank_env()

    def executable(self) -> str:
        """The launcher binary: on PATH, else beside this Python (torchrun, horovodrun in a venv)."""
        found = shutil.which(self.binary) or shutil.which(self.binary, path=os.path.dirname(sys.executable))
        return found or self.binary

    def available(self) -> bool:
        return self.binary is None or os.path.isabs(self.executable())

    def require(self) -> None:
        if not self.available():
            raise UsageError(f"launcher {self.name!r} needs {self.binary!r}, which is not on PATH")

    @abstractmethod
    def command(self, spec: LaunchSpec) -> list[str]:
        """The launcher's argv; it starts spec.processes ranks of spec.bench + spec.bench_args."""

    def run(self, spec: LaunchSpec, timeout_s: float | None = None) -> int:
        """Run the launcher in its own process group; stop the whole group after timeout_s
        (the host's deadline: see benchmarks.processes) or on Ctrl-C."""
        proc = subprocess.Popen(self.command(spec), env={**os.environ, **self.environment(spec)}, start_new_session=True)
        return wait_group([proc], timeout_s)

    def fault(self) -> str | None:
        """After a failed run: why the machines under the ranks failed (a node died), or None."""
        return None


def wait_group(procs: list[subprocess.Popen], timeout_s: float | None) -> int:
    """Wait for process 0 (procs[0]); then stop whatever is left. Returns process 0's exit code.

    A rank other than 0 that fails makes process 0 record the failure and exit
    (bench's rendezvous); if process 0 does not within 3 x STOP_GRACE_S, it is stopped too.
    """
    import time

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    failed_at = None
    try:
        while procs[0].poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                print(f"benchrun: timeout after {timeout_s:g} s: stopping all ranks", file=sys.stderr)
                break
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs[1:]):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > 3 * STOP_GRACE_S:
                print("benchrun: a rank failed and process 0 did not finish: stopping all ranks", file=sys.stderr)
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("benchrun: interrupted: stopping all ranks", file=sys.stderr)
    finally:
        if procs[0].poll() is None:
            procs[0].send_signal(signal.SIGTERM)  # lets bench write an 'interrupted'/'timeout' record
            try:
                procs[0].wait(timeout=2 * STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        for proc in procs:
            stop_process_group(proc)
    return exit_code(procs[0].returncode)
