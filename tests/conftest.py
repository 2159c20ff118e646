"""Shared helpers: every benchmark test runs the real `bench` in a subprocess,
the way images and runners run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

pytest_plugins = ["infra.slurm", "infra.docker", "infra.records"]

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "benchmarks" / "schema" / "result-1.json").read_text())
SMALL = ["--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "2"]


def bench(*args: str, env: dict | None = None, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "BENCH_FRAMEWORK"}
    full_env.update(PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def validate_record(record: dict) -> dict:
    jsonschema.validate(record, SCHEMA)
    return record


def last_json_line(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON record on stdout:\n{stdout}"
    return json.loads(lines[-1])


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "imagefolder"
    result = bench("make-dataset", str(root), "--images", "24", "--classes", "3", "--min-size", "64", "--max-size", "128")
    assert result.returncode == 0, result.stderr
    return root
