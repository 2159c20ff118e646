"""What every test module shares: the repository root, the record schema, and one way each
to run `bench`, `benchrun` and any other command (always a real subprocess, as users run them)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema

from benchmarks.core import processes

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "benchmarks" / "schema" / "result-1.json").read_text())
SMALL = ["--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "2"]
# pytest-xdist names its workers gw0, gw1, ...; outside xdist this is worker 0.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def ports() -> list[str]:
    """Explicit distributed ports, distinct per test worker, for a test of what bench does with ports given
    (two runs given the same ones: one fails in one line). Multi-rank runs need none: their run token
    places each run's ports (benchmarks.distributed.cluster.run_ports)."""
    base = 2310 + 100 * WORKER
    return ["--rendezvous-port", str(base), "--worker-port", str(base + 10), "--ps-port", str(base + 20)]


def _capture(argv: list, env: dict, timeout: float, cwd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def run(argv: list, env: dict | None = None, timeout: float = 120, cwd=ROOT, **kwargs) -> subprocess.CompletedProcess:
    """Any command from the repository root, output captured as text; `env` adds to this environment."""
    return _capture(argv, {**os.environ, **(env or {})}, timeout, cwd, **kwargs)


def python_env(extra: dict | None = None) -> dict:
    """This environment with this checkout's packages first and bench's framework choice cleared,
    plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "BENCH_FRAMEWORK"}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
               PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def bench(*args, env: dict | None = None, timeout: float = 600, cwd=ROOT, **kwargs) -> subprocess.CompletedProcess:
    return _capture([sys.executable, "-m", "benchmarks", *args], python_env(env), timeout, cwd, **kwargs)


def benchrun(*args, env: dict | None = None, timeout: float = 600, cwd=ROOT, **kwargs) -> subprocess.CompletedProcess:
    return _capture([sys.executable, "-m", "runners", *args], python_env(env), timeout, cwd, **kwargs)


def benchrun_record(*args, env: dict | None = None, timeout: float = 600):
    """`benchrun ARGS` and the last JSON record it printed (None when it printed none)."""
    result = benchrun(*args, env=env, timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return result, (json.loads(lines[-1]) if lines else None)


def needs_module(name: str) -> None:
    """Skip unless `name` is installed, without importing it into the test process (importing
    TensorFlow here before torch makes a later torchvision import segfault in triton)."""
    import importlib.util

    import pytest

    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed")


def import_tensorflow():
    """TensorFlow for a test that reads its files in process: torch first, when installed
    (platform notes: TensorFlow imported before torch/torchvision segfaults in triton)."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torchvision  # noqa: F401  (pulls torch and triton in the order that works)
    import tensorflow

    return tensorflow


def validate_record(record: dict) -> dict:
    jsonschema.validate(record, SCHEMA)
    return record


def last_json_line(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON record on stdout:\n{stdout}"
    return json.loads(lines[-1])


class Started:
    """A command started in the background whose stderr is read as it comes, so a test can act when the
    program has reached a given point (`wait_for`) instead of after a guessed sleep.

    It starts with every ending signal at its default disposition (then the caller's own `preexec_fn`, if
    any): a test runner started under `nohup` (SIGHUP ignored) or as a script's `... &` (SIGINT and SIGQUIT
    ignored) passes SIG_IGN down, and the program rightly keeps ignoring what its caller ignores
    (processes.unhandled), so a test of how it ends on that signal would wait in vain (a CI run started with
    nohup did: 'ends on a hang-up' ran on)."""

    def __init__(self, argv: list, env: dict | None = None, cwd=ROOT, preexec_fn=None, **popen):
        def defaults() -> None:
            for signum in processes.ENDING_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            if preexec_fn is not None:
                preexec_fn()

        self.proc = subprocess.Popen([str(a) for a in argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, preexec_fn=defaults, **popen)
        self.err: list[str] = []
        self.out: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                         for stream, into in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def wait_for(self, text: str, timeout: float) -> None:
        """Until a line of stderr contains `text` (fails if the program ends or `timeout` passes first)."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in list(self.err)):
            assert self.proc.poll() is None, f"ended ({self.proc.returncode}) before {text!r}:\n{''.join(self.err)[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} on stderr within {timeout:g} s:\n{''.join(self.err)[-3000:]}"
            time.sleep(0.01)  # a test may act (a signal) right after the line

    def communicate(self, timeout: float) -> tuple[str, str]:
        """Wait for the end; (stdout, stderr) in full. Still running after `timeout`: it and its descendants
        are killed (none left to load the rest of the run) and the test fails with its stderr."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [*processes.descendants(self.proc.pid), self.proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"still running {timeout:g} s on (killed):\n{''.join(self.err)[-3000:]}") from None
        for reader in self._readers:
            reader.join(timeout=10)
        return "".join(self.out), "".join(self.err)


def rank_processes(root, rank: int):
    """(bench, its worker) of `rank` under a launcher process `root` (psutil), once both exist."""
    import psutil

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = {}
        for child in root.children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank):
                    found["worker" if "benchmarks.run.worker" in " ".join(child.cmdline()) else "bench"] = child
            except psutil.Error:
                pass
        if len(found) == 2:
            return found["bench"], found["worker"]
        time.sleep(0.5)
    raise AssertionError(f"rank {rank} never started")


def hanging_shutdown(close_grace_s: float, peer_close_grace_s: float) -> str:
    """A sitecustomize that loads every backend as it is, except that its shutdown never returns (MPI_Finalize
    waiting for a peer), with the shutdown graces shortened: a real hang, injected on a worker's PYTHONPATH."""
    return f"""\
import threading
from benchmarks import frameworks
from benchmarks.core import processes

processes.CLOSE_GRACE_S, processes.PEER_CLOSE_GRACE_S = {close_grace_s}, {peer_close_grace_s}
real_load = frameworks.load


def load(name, strategy=None):
    backend = real_load(name, strategy)
    return type(backend.__name__, (backend,), {{"close": lambda self: threading.Event().wait()}})


frameworks.load = load
"""
