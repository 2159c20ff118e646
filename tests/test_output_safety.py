"""A measurement is never lost: outputs checked before the run, disk full at the end,
no torn JSONL line (real tmpfs file systems, as root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import durable
from infra.helpers import ROOT, SMALL, bench, benchrun, last_json_line, validate_record
from infra.tmpfs import fill, small_fs

TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", *SMALL]


def one_error_line(stderr: str, prefix: str = "bench: error: ") -> str:
    lines = [line for line in stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture
def readonly_dir(tmp_path):
    with small_fs(tmp_path / "ro", readonly=True) as path:
        yield path


@pytest.fixture
def full_dir(tmp_path):
    with small_fs(tmp_path / "full", size="256k") as path:
        fill(path)
        yield path


@pytest.mark.parametrize("where", ["proc", "readonly", "full", "file-as-parent"])
def test_unwritable_output_is_refused_before_anything_is_built(tmp_path, request, where):
    if where == "proc":
        target = "/proc/forbidden/x.jsonl"
    elif where == "readonly":
        target = str(request.getfixturevalue("readonly_dir") / "sub" / "x.jsonl")
    elif where == "full":
        target = str(request.getfixturevalue("full_dir") / "x.jsonl")
    else:
        (tmp_path / "plain").write_text("")
        target = str(tmp_path / "plain" / "x.jsonl")
    started = time.monotonic()
    result = bench(*TINY, "--output", target, timeout=60)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr)
    assert "--output" in line and target in line
    assert "building" not in result.stderr  # refused before the model was built
    assert time.monotonic() - started < 30


def test_disk_full_at_the_end_keeps_the_measurement(tmp_path):
    """The file system fills up during the run: exit 5, the record on stdout and in the named
    fallback file, and the store exactly as it was (its earlier record intact, no torn line)."""
    with small_fs(tmp_path / "fs", size="4m") as fs:
        store = fs / "results.jsonl"
        earlier = {"earlier": "x" * 4070}  # fills the file's first page: the next record needs a new one
        durable.append_jsonl(store, earlier)
        before = store.read_bytes()
        assert 4080 <= len(before) <= 4096
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks", *TINY, "--output", str(store)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        for line in proc.stderr:  # fill the disk once the model is being built
            if "building" in line:
                fill(fs)
                break
        stdout, rest = proc.communicate(timeout=300)
        assert proc.returncode == 5, rest
        line = one_error_line(rest)
        assert "No space left on device" in line
        fallback = Path(line.split("saved to ", 1)[1].split(" and printed", 1)[0])
        try:
            saved = json.loads(fallback.read_text())
            printed = last_json_line(stdout)
            assert saved == printed and validate_record(saved)["status"] == "ok"
            assert store.read_bytes() == before
        finally:
            fallback.unlink()


def test_a_failed_partial_append_is_undone(tmp_path):
    with small_fs(tmp_path / "fs", size="64k") as fs:
        store = fs / "s.jsonl"
        durable.append_jsonl(store, {"n": 1})
        fill(fs, leave=4096)
        big = {"blob": "x" * 200_000}
        with pytest.raises(OSError):
            durable.append_jsonl(store, big)
        assert store.read_text() == '{"n": 1}\n'


def test_a_torn_last_line_is_cut_by_the_next_append(tmp_path, capfd):
    store = tmp_path / "s.jsonl"
    store.write_bytes(b'{"n": 1}\n{"n": 2, "half')  # a writer killed mid-line
    durable.append_jsonl(store, {"n": 3})
    assert [json.loads(line) for line in store.read_text().splitlines()] == [{"n": 1}, {"n": 3}]
    assert "cut an incomplete last line" in capfd.readouterr().err


def test_benchrun_outputs_are_checked_before_anything_runs(tmp_path, readonly_dir):
    plan = tmp_path / "plan.yaml"
    plan.write_text("matrix: {framework: torch, model: resnet50, batch_size: 2}\nbench: {image_size: 32, num_batches: 1}\n")
    store = tmp_path / "s.jsonl"
    store.write_text('{"config": {}, "status": "ok"}\n')
    cases = [
        (["sweep", str(plan), "--store", str(readonly_dir / "sweep.jsonl")], "--store"),
        (["run", "--results", str(readonly_dir / "r"), "--", *TINY], "--results"),
        (["report", str(store), "--out", str(readonly_dir / "report")], "--out"),
        (["compare-runtimes", "--runtimes", "local", "--out", str(readonly_dir / "cmp"), "--", *TINY], "--out"),
        (["export", str(store), "--csv", str(readonly_dir / "x.csv")], "--csv"),
    ]
    for args, flag in cases:
        result = benchrun(*args)
        assert result.returncode == 2, (args, result.stderr)
        line = one_error_line(result.stderr, "benchrun: error: ")
        assert flag in line and "not writable" in line, line
