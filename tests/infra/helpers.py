"""What every test module shares: the repository root, the record schema, and one way each
to run `bench`, `benchrun` and any other command (always a real subprocess, as users run them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "benchmarks" / "schema" / "result-1.json").read_text())
SMALL = ["--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "2"]


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
