"""Faults of the environment during a run, for real: the sweep store's file system fills up
mid-sweep, a private dockerd goes away mid-run, a Slurm node dies mid-run. Each ends as a
recorded result with a one-line reason and a documented exit code, leaves no process or
container behind, and the sweep goes on (or stops cleanly and resumes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from infra.helpers import ROOT
from infra.sweeps import lines, marked, tiny_plan, write_plan
from infra.tmpfs import fill, small_fs

from benchmarks import durable
from runners.commands.sweep import pending_name

pytestmark = pytest.mark.slow


def wait_for(condition, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("benchrun: error: ")]


def test_store_file_system_full_mid_sweep_stops_cleanly_and_resumes(tmp_path):
    """The disk fills while the 2nd of 3 points runs: exit 5, one line, the store holds the
    1st entry only (no torn line), the 2nd is in the pending file; after freeing space a rerun
    appends it, runs the 3rd, and every point is stored exactly once."""
    marker = uuid.uuid4().hex
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2, 3]))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_TEST_MARK": marker}
    with small_fs(tmp_path / "fs", size="2m") as fs:
        store_path = fs / "sweep.jsonl"
        pending = durable.fallback_dir() / pending_name(store_path)
        pending.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path)]
        sweep = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            wait_for(lambda: store_path.exists() and store_path.read_bytes().endswith(b"\n"), 180, "first entry")
            filler = fill(fs)  # while the 2nd point runs
            out, err = sweep.communicate(timeout=300)
        finally:
            sweep.kill()
        try:
            assert sweep.returncode == 5, err
            (line,) = error_lines(err)
            assert line.startswith("benchrun: error: sweep stopped: --store ") and "No space left on device" in line, line
            assert str(pending) in line and "free space and rerun to resume" in line, line
            assert not marked(marker), "processes of the sweep left behind"
            before = lines(store_path)  # complete lines only (lines() asserts the trailing newline)
            assert [e["sweep"]["point"]["batch_size"] for e in before] == [1]
            (kept,) = lines(pending)
            assert kept["sweep"]["point"]["batch_size"] == 2 and kept["record"]["status"] == "ok", kept
            filler.unlink()  # space is back
            rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        finally:
            pending.unlink(missing_ok=True)
        assert rerun.returncode == 0, rerun.stderr
        assert "recovered 1 entry measured while" in rerun.stderr
        assert "3 combinations: 1 to run, 2 already in" in rerun.stderr
        after = lines(store_path)
        assert after[:2] == [*before, kept]  # nothing lost: the measurement taken on a full disk is the one kept
        assert [e["sweep"]["point"]["batch_size"] for e in after] == [1, 2, 3]
        assert len({e["sweep"]["config_hash"] for e in after}) == 3  # nothing run twice
        assert all(e["record"]["status"] == "ok" and e["sweep"]["attempt"] == 1 for e in after)
