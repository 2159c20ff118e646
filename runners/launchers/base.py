"""The Launcher interface: turn "N ranks of this bench command" into processes.

Shared here, stated once: the environment every rank gets, the process
group that is stopped as a whole on timeout, Ctrl-C or the end of process 0,
and the exit code (process 0's). A launcher states only its argv.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from benchmarks.core.errors import UsageError
from benchmarks.core.processes import STOP_GRACE_S, exit_code, stop_process_group
from benchmarks.distributed import strategies
from benchmarks.distributed.world import RUN_TOKEN_ENV
from benchmarks.runspec import RunSpec

SAID_LINES = 500  # of a launcher's stderr, kept for fault()


@dataclass
class LaunchSpec:
    processes: int  # all processes: workers, plus PS and chief under --strategy ps
    bench: list[str]  # how to start bench: ["bench"] in images, [python, -m, benchmarks] on a host
    run: RunSpec  # what each rank's bench is asked: rendered as its arguments in the launcher's command
    hosts: list[str] = field(default_factory=list)  # empty: this machine only
    env: dict[str, str] = field(default_factory=dict)  # extra variables for every rank
    extra: list[str] = field(default_factory=list)  # launcher options passed through verbatim
    run_token: str = field(default_factory=lambda: uuid.uuid4().hex[:16])  # this run's ranks meet only each other
    stop_grace_s: float = 2 * STOP_GRACE_S  # process 0's time to end after SIGTERM (and its client's, to remove its container)

    def host_slots(self, hosts: list[str]) -> str:
        """`HOST:SLOTS,...` as mpirun, mpich and horovodrun take it: the processes spread evenly."""
        return ",".join(f"{host}:{-(-self.processes // len(hosts))}" for host in hosts)

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


def launch_spec(bench: list[str], run: RunSpec, num_workers: int = 1, num_ps: int = 0,
                timeout_s: float | None = None, hosts: list[str] = (), extra: list[str] = (),
                env: dict[str, str] | None = None) -> LaunchSpec:
    """N training ranks of bench (plus the PS and chief under --strategy ps): checked, counted,
    with --num-ps and --timeout (unless bench was given its own) passed on to bench. `benchrun launch`
    and dispatch both use it."""
    if num_workers < 1:
        raise UsageError(f"-n must be 1 or more, got {num_workers}")
    if run.num_ps:
        raise UsageError("give --num-ps to benchrun, not to bench (it decides how many processes to start)")
    strategy = strategies.STRATEGIES.get(run.strategy, strategies.get(None))  # unknown: bench itself refuses it
    problem = strategy.num_ps_problem(num_ps)
    if problem:
        raise UsageError(problem)
    run = run.replace(num_ps=num_ps or None, timeout=run.timeout if run.timeout is not None else timeout_s)
    processes = strategy.processes(num_workers, num_ps)
    return LaunchSpec(processes=processes, bench=list(bench), run=run, hosts=list(hosts),
                      env=dict(env or {}), extra=list(extra))


class Launcher(ABC):
    name: str
    binary: str | None = None
    install_hint: str = ""  # the one line that gets the binary, as `benchrun info` tells a user
    said: collections.deque | tuple = ()  # the launcher's last stderr lines, once run() has run it
    stop_signal: int = signal.SIGTERM  # what asks the launcher to stop its ranks, each writing what it has measured

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
        """The launcher's argv; it starts spec.processes ranks of spec.bench + spec.run's arguments."""

    def typed(self, spec: LaunchSpec) -> list[str]:
        """The command as --dry-run shows it: after the run's token, which every rank gets (mpirun and mpich
        also pass it on their own command line) and which places the run's ports."""
        return [f"{RUN_TOKEN_ENV}={spec.run_token}", *self.command(spec)]

    def run(self, spec: LaunchSpec, timeout_s: float | None = None) -> int:
        """Run the launcher in its own process group; stop the whole group after timeout_s
        (the host's deadline: see benchmarks.core.processes) or on Ctrl-C. Its stderr (the ranks' too) is
        relayed line by line and its last lines kept in `said`, where fault() reads what it reported."""
        proc = subprocess.Popen(self.command(spec), env={**os.environ, **self.environment(spec)},
                                stderr=subprocess.PIPE, start_new_session=True)
        self.said = collections.deque(maxlen=SAID_LINES)
        relay = threading.Thread(target=_relay, args=(proc.stderr, self.said), daemon=True)
        relay.start()
        code, _ = wait_ranks([proc], timeout_s, spec.stop_grace_s, self.stop_signal)
        relay.join(timeout=5)
        return code

    def fault(self) -> str | None:
        """After a failed run: why the machines under the ranks failed (a node died), or None."""
        return None


def _relay(stream, said: collections.deque) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        said.append(line.rstrip("\n"))
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):  # our stderr gone or its disk full: keep draining
            pass
    stream.close()


def how_it_ended(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


def wait_ranks(procs: list[subprocess.Popen], timeout_s: float | None,
               grace_s: float = 2 * STOP_GRACE_S, stop_signal: int = signal.SIGTERM) -> tuple[int, str | None]:
    """Wait for process 0 (procs[0]); then stop whatever is left. Returns process 0's exit code, and what
    a record cannot say because process 0 never wrote it: that process 0 was killed, or that a rank died
    and process 0, waiting for it where nobody can tell (meeting at start-up), had to be stopped.
    procs[i] is rank i.

    A rank other than 0 that fails makes process 0 record the failure and exit
    (bench's rendezvous); if process 0 does not within 3 x STOP_GRACE_S, it is stopped too.
    A stopped process 0 gets grace_s after `stop_signal` before its group is killed.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    failed_at, failed, stopped = None, None, False
    try:
        while procs[0].poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                print(f"benchrun: timeout after {timeout_s:g} s: stopping all ranks", file=sys.stderr)
                break
            if failed_at is None:
                failed = next((rank for rank, p in enumerate(procs[1:], 1) if p.poll() not in (None, 0)), None)
                failed_at = None if failed is None else time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > 3 * STOP_GRACE_S:
                print("benchrun: a rank failed and process 0 did not finish: stopping all ranks", file=sys.stderr)
                stopped = True
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("benchrun: interrupted: stopping all ranks", file=sys.stderr)
    finally:
        killed = procs[0].poll() is not None and procs[0].returncode < 0  # before anything of ours reached it
        if procs[0].poll() is None:
            # Every rank at once, process 0 first: bench writes an 'interrupted'/'timeout' record, and each rank's
            # worker writes the steps it timed for process 0's supervisor to total (benchmarks/run/rank_steps.py),
            # which it could not once process 0 had ended.
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(stop_signal)
            try:
                procs[0].wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        for proc in procs:
            stop_process_group(proc)
    why = None
    if stopped:
        why = (f"rank {failed} {how_it_ended(procs[failed].returncode)} and process 0, still waiting for it, "
               f"was stopped {3 * STOP_GRACE_S:g} s later")
    elif killed:
        why = f"process 0 {how_it_ended(procs[0].returncode)} before it wrote a record"
    return exit_code(procs[0].returncode), why
