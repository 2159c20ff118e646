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

from benchmarks.core import durable
from infra.helpers import ROOT, SMALL, Started, bench, benchrun, last_json_line, python_env, validate_record
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
        started = Started([sys.executable, "-m", "benchmarks", *TINY, "--output", store],
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
        started.wait_for("building", timeout=300)  # fill the disk once the model is being built
        fill(fs)
        stdout, rest = started.communicate(timeout=300)
        assert started.proc.returncode == 5, rest
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


# ---- bench make-dataset on a file system that takes no more (issue 48) ------------------------------

def test_make_dataset_filling_the_disk_is_one_line_and_leaves_nothing(tmp_path):
    """2 MiB free passes the check before writing (1 MiB); 256 images (~8 MB) fill it on the way: exit 5
    (the output could not be written where asked), one line, and the file system as empty as before."""
    with small_fs(tmp_path / "fs", size="2m") as fs:
        result = bench("make-dataset", fs / "ds", "--images", "256", timeout=300)
        assert result.returncode == 5, result.stderr
        assert result.stderr.splitlines() == [one_error_line(result.stderr)]
        line = result.stderr.strip()
        assert line.startswith(f"bench: error: make-dataset '{fs / 'ds'}': no space left on device (after "), line
        assert line.endswith(" of 256 images; nothing is left behind): free space, or write elsewhere"), line
        assert list(fs.iterdir()) == [] and result.stdout == ""


@pytest.mark.parametrize("where", ["readonly", "full"])
def test_make_dataset_on_a_readonly_or_full_file_system_is_refused_first(request, where):
    target = request.getfixturevalue(f"{where}_dir") / "ds"
    result = bench("make-dataset", target, "--images", "4", "--classes", "2", timeout=120)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr)
    assert result.stderr.splitlines() == [line] and f"make-dataset DIR '{target}' is not writable (" in line
    assert not target.exists() and not [p for p in target.parent.iterdir() if p.name != ".filler"]


EXAMPLE = ROOT / "examples" / "seed-000-table1" / "results.jsonl"  # 20 real records


def test_a_report_that_fills_the_disk_is_one_line_and_leaves_the_old_one(tmp_path):
    """The example store's report is 1.6 MB (14 plots, and the HTML embeds them); 1.5 MiB passes the check
    before (1 MiB free) and fills while it is written: exit 5, one line, and --out as it was."""
    with small_fs(tmp_path / "fs", size="1536k") as fs:
        (fs / "report").mkdir()
        (fs / "report" / "report.md").write_text("the last report\n")
        result = benchrun("report", EXAMPLE, "--out", fs / "report", timeout=300)
        assert result.returncode == 5, result.stderr
        assert result.stderr.splitlines() == [f"benchrun: error: --out '{fs / 'report'}': no space left on device "
                                              "(nothing is left behind): free space, or write elsewhere"]
        assert [p.name for p in fs.iterdir()] == ["report"]
        assert [p.name for p in (fs / "report").iterdir()] == ["report.md"]
        assert (fs / "report" / "report.md").read_text() == "the last report\n"


@pytest.mark.parametrize("flag", ["--csv", "--parquet"])
def test_an_export_that_fills_the_disk_is_one_line_and_leaves_nothing(full_dir, flag, monkeypatch, capsys):
    from runners import cli

    monkeypatch.setattr(durable, "MIN_FREE_BYTES", 0)  # the disk fills after the check (another writer took it)
    target = full_dir / "records.out"
    assert cli.main(["export", str(EXAMPLE), flag, str(target)]) == 5
    assert capsys.readouterr().err == (f"benchrun: error: {flag} '{target}': no space left on device (nothing is "
                                       "left behind): free space, or write elsewhere\n")
    assert [p.name for p in full_dir.iterdir()] == [".filler"]


def test_a_comparison_summary_the_disk_cannot_take_is_one_line_and_leaves_the_last_one(tmp_path):
    """compare-runtimes' summary (compare.md, compare.csv, verdicts.csv, the charts) on a file system another
    writer filled during the runs: durable.NoRoom (benchrun: one line, exit 5) saying where the runs are, and
    --out as it was: the last summary, no partial file or folder."""
    from runners.commands import compare_runtimes

    records = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    with small_fs(tmp_path / "fs", size="1m") as fs:
        out = fs / "cmp"
        out.mkdir()
        (out / "compare.md").write_text("the last summary\n")
        fill(fs)
        with pytest.raises(durable.NoRoom) as refused:
            compare_runtimes.write_summary(out, [], records, [], {}, 0.03, 0.25)
        assert str(refused.value) == (f"--out '{out}': no space left on device (no summary written; the runs are "
                                      "kept in records.jsonl and runs.jsonl, and `benchrun report` on records.jsonl "
                                      "gives their verdicts; nothing is left behind): free space, or write elsewhere")
        assert sorted(p.name for p in out.iterdir()) == ["compare.md"]
        assert (out / "compare.md").read_text() == "the last summary\n"


@pytest.mark.parametrize("flag", ["--trace", "--tensorboard"])
def test_a_trace_or_events_the_disk_cannot_take_are_one_line_and_leave_nothing(tmp_path, flag):
    """The folder passes the check before the run, then another writer fills its file system while the run
    warms up: the trace (torch's profiler loses the errno: "Failed to write to log file!") or the TensorBoard
    events (TensorFlow's writer: ResourceExhaustedError) cannot be written. One line says so; nothing of them
    is left behind, an earlier run's file there stays; the measurement is kept, and the run ends as it
    measured: 0 (docs/bench.md, Exit codes)."""
    with small_fs(tmp_path / "fs", size="2m") as fs:
        target = fs / "out"
        target.mkdir()
        (target / "earlier.txt").write_text("an earlier run's\n")
        store = tmp_path / "records.jsonl"
        started = Started([sys.executable, "-m", "benchmarks", "--framework", "torch", "--model", "alexnet",
                           "--image-size", "64", *SMALL, flag, target, "--output", store], env=python_env())
        started.wait_for("warmup:", 300)
        fill(fs)
        _, err = started.communicate(timeout=300)
        assert started.proc.returncode == 0, err[-3000:]
        said = [line for line in err.splitlines() if line.startswith("bench: ") and flag in line]
        assert len(said) == 1 and "Traceback" not in err, err[-3000:]
        assert said[0].startswith(f"bench: warning: {flag}: '{target}") and said[0].endswith(
            "nothing is left behind): free space, or write elsewhere"), said
        assert "no space left on device (" in said[0]
        assert sorted(str(p.relative_to(fs)) for p in fs.rglob("*")) == [".filler", "out", "out/earlier.txt"]
        record = validate_record(json.loads(store.read_text().splitlines()[-1]))
        assert record["status"] == "ok" and record["throughput"]["images_per_sec"] > 0
        if flag == "--trace":
            assert "no space left on device" in record["trace"]["ranks"][0]["error"]


# ---- outputs that are not regular files: FIFOs, pipes (issue 26) ------------------------------------

def test_a_fifo_without_reader_is_a_bounded_failure_not_a_hang(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    durable.check_file(fifo, "--output")  # a reader may still come: accepted, and without blocking
    started = time.monotonic()
    with pytest.raises(OSError, match="no reader opened the FIFO within 0.5 s"):
        durable.append_jsonl(fifo, {"a": 1}, stream_wait_s=0.5)
    assert time.monotonic() - started < 5


def test_a_record_waits_for_a_fifo_reader_that_comes_late(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["sh", "-c", f"sleep 2; cat {fifo}"], stdout=subprocess.PIPE, text=True)
    durable.append_jsonl(fifo, {"a": 1}, stream_wait_s=30)
    assert json.loads(reader.communicate(timeout=30)[0]) == {"a": 1}


def test_output_to_dev_stdout_through_a_pipe(tmp_path):
    """`bench --output /dev/stdout | cat`: the record once on stdout, exit 0, no fallback file
    (fsync on a pipe fails; a stream is not a file to fsync)."""
    result = bench(*TINY, "--output", "/dev/stdout", env={"TMPDIR": str(tmp_path)}, timeout=300)
    assert result.returncode == 0, result.stderr
    records = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(records) == 1, result.stdout
    validate_record(json.loads(records[0]))
    assert not list(tmp_path.glob("dlbench-record-*")), "a fallback file was written"


@pytest.mark.parametrize("with_output", [False, True])
def test_json_to_a_reader_that_has_gone(tmp_path, with_output):
    """`bench --json ... | true`: the record is never lost (--output, else the fallback file the one line
    names), no traceback, no 'Exception ignored'."""
    out = tmp_path / "out.jsonl"
    extra = ["--output", str(out)] if with_output else []
    read, write = os.pipe()
    os.close(read)  # the reader has gone before bench writes
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks", *TINY, "--json", *extra], cwd=ROOT, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=300,
                              env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    if with_output:
        assert proc.returncode == 0, proc.stderr
        assert "stdout was closed by its reader; the record is in" in proc.stderr
        validate_record(json.loads(out.read_text()))
    else:
        assert proc.returncode == 5, proc.stderr
        line = one_error_line(proc.stderr)
        assert "stdout was closed by its reader" in line
        saved = list(tmp_path.glob("dlbench-record-*.jsonl"))
        assert len(saved) == 1 and str(saved[0]) in line
        validate_record(json.loads(saved[0].read_text()))


@pytest.mark.parametrize("with_output", [False, True])
def test_stdout_to_a_file_the_disk_cannot_take(tmp_path, with_output):
    """`bench > log` on a full file system (compare-runtimes' run logs were one: bench said "internal error"):
    the record is never lost: with --output it is there and the line is a warning (the measurement's exit
    code); without, it is in the fallback file the one line names (exit 5)."""
    out = tmp_path / "out.jsonl"
    extra = ["--output", str(out)] if with_output else []
    with small_fs(tmp_path / "fs", size="256k") as fs, open(fs / "log", "w") as log:
        fill(fs)
        proc = subprocess.run([sys.executable, "-m", "benchmarks", *TINY, *extra], cwd=ROOT, stdout=log,
                              stderr=subprocess.PIPE, text=True, timeout=300,
                              env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    full = "stdout is a file its file system will not take (no space left on device)"
    if with_output:
        assert proc.returncode == 0, proc.stderr
        assert f"bench: warning: {full}; the record is in {out}" in proc.stderr.splitlines()
        validate_record(json.loads(out.read_text()))
    else:
        assert proc.returncode == 5, proc.stderr
        line = one_error_line(proc.stderr)
        saved = list(tmp_path.glob("dlbench-record-*.jsonl"))
        assert len(saved) == 1
        assert line == f"bench: error: {full} before the record was printed; the record is saved to {saved[0]}"
        validate_record(json.loads(saved[0].read_text()))


# ---- concurrent writers (issue 26) ---------------------------------------------------------------

APPENDER = """
import sys
from benchmarks.core import durable
for i in range(int(sys.argv[3])):
    durable.append_jsonl(sys.argv[1], {"writer": int(sys.argv[2]), "i": i, "pad": "x" * int(sys.argv[4])})
"""


def test_appends_from_many_processes_neither_interleave_nor_cut_each_other(tmp_path):
    target = tmp_path / "store.jsonl"
    writers = [subprocess.Popen([sys.executable, "-c", APPENDER, str(target), str(w), "10", str(2 << 20)], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
               for w in range(6)]
    for writer in writers:
        assert writer.wait(timeout=120) == 0, writer.stderr.read()
        assert "cut an incomplete last line" not in writer.stderr.read()
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert sorted((line["writer"], line["i"]) for line in lines) == [(w, i) for w in range(6) for i in range(10)]


def test_a_store_held_by_one_writer_refuses_a_second_at_once(tmp_path):
    from benchmarks.core.errors import UsageError

    target = tmp_path / "store.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom benchmarks.core import durable\n"
                               f"with durable.sole_writer({str(target)!r}, '--store', 'the sweep of plan.yaml'):\n"
                               "    print('held', flush=True)\n    time.sleep(600)"],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(UsageError, match=r"--store '.*store.jsonl' is being written by the sweep of plan.yaml "
                                             r"\(pid \d+ on .*\); wait for it to end, or give another --store"):
            with durable.sole_writer(target, "--store", "a second sweep"):
                pass
        assert time.monotonic() - started < 1
    finally:
        holder.kill()
        holder.wait()
    with durable.sole_writer(target, "--store", "a second sweep"):  # a killed holder leaves nothing held
        assert "a second sweep" in Path(f"{target}.lock").read_text()


# ---- readers beside writers (issue 26) -----------------------------------------------------------

HALF_APPEND = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
fcntl.flock(fd, fcntl.LOCK_EX)  # the lock benchmarks.core.durable.append_jsonl holds while it writes
line = open(sys.argv[2], "rb").read()
os.write(fd, line[:len(line) // 2])
print("half", flush=True)
sys.stdin.readline()  # the rest when the test says so: an append caught in the middle, for as long as needed
os.write(fd, line[len(line) // 2:])
"""


def example_record(run_id: str) -> dict:
    """A real record (the seed-000 example's first), under a run id of the test's."""
    first = json.loads((ROOT / "examples" / "seed-000-table1" / "results.jsonl").read_text().splitlines()[0])
    return {**first["record"], "run_id": run_id}


def waits_for_lock(pid: int, path: Path) -> bool:
    """Whether process `pid` is blocked waiting for a lock on `path` (the kernel's /proc/locks: '->' lines)."""
    inode = f":{path.stat().st_ino} "
    return any("->" in line and f" {pid} " in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


def test_an_export_beside_an_append_in_progress_waits_for_the_whole_line(tmp_path):
    """`benchrun export` started while another process is half-way through appending a record waits for
    the append (the store's shared lock, runners.store.reading) and exports both records, without taking
    the half-written line for a torn one; before, it skipped that record with a "torn write" warning."""
    store_path, line = tmp_path / "store.jsonl", tmp_path / "line.json"
    durable.append_jsonl(store_path, example_record("a" * 32))
    line.write_text(json.dumps(example_record("b" * 32)) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", HALF_APPEND, str(store_path), str(line)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert writer.stdout.readline().strip() == "half"
        argv = [sys.executable, "-m", "runners", "export", str(store_path), "--csv", str(tmp_path / "out.csv")]
        export = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        deadline = time.monotonic() + 60
        while not waits_for_lock(export.pid, store_path):
            assert export.poll() is None, f"the export read the store during the append: {export.communicate()}"
            assert time.monotonic() < deadline, "the export never reached the store"
            time.sleep(0.05)
        writer.communicate("go\n", timeout=30)
        out, err = export.communicate(timeout=120)
    finally:
        writer.kill()
    assert export.returncode == 0 and "warning" not in err, err
    rows = (tmp_path / "out.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["a" * 32, "b" * 32]


APPEND_RECORDS = """
import json, sys, time
from benchmarks.core import durable
record = json.loads(sys.argv[2])
for i in range(20):
    durable.append_jsonl(sys.argv[1], {**record, "run_id": f"{sys.argv[3]}{i:031x}", "padding": "x" * (1 << 20)})
    time.sleep(0.05)  # appends spread over the reads
"""


def test_reports_read_while_processes_append_see_whole_records_only(tmp_path):
    """Two processes append 20 records each (1 MiB lines, for a second) while the report's reader (runners.reporting.load,
    DuckDB) reads the store again and again: every read sees whole records only, never fewer than the read
    before, and no warning or error; at the end all 40."""
    from runners.reporting import load

    store_path = tmp_path / "store.jsonl"
    record = json.dumps(example_record("0" * 32))
    writers = [subprocess.Popen([sys.executable, "-c", APPEND_RECORDS, str(store_path), record, str(w)], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}) for w in range(2)]
    counts, said = [0], []
    deadline = time.monotonic() + 120
    while any(writer.poll() is None for writer in writers) or counts[-1] < 40:
        assert time.monotonic() < deadline, counts
        if store_path.exists():
            records = load.load([store_path], warn=said.append)
            assert not said, said
            assert {r["run_id"][0] for r in records} <= {"0", "1"} and len({r["run_id"] for r in records}) == len(records)
            assert len(records) >= counts[-1], counts
            counts.append(len(records))
        assert all(writer.poll() in (None, 0) for writer in writers)
    assert counts[-1] == 40 and len(counts) > 3, counts
