"""Container runtimes by their exact command lines (every runtime), errors, and compare-runtimes' statistics.

Shifter and Sarus cannot be installed on our machines: these argv tests are all that checks them
(docs/runtimes.md says so). Apptainer also runs for real (test_runtimes_apptainer.py); its argv and rules
are checked here too. A "not installed" test makes the absence itself (a PATH of an empty directory)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

from benchmarks.core.errors import UsageError
from benchmarks.runspec import RunSpec
from benchmarks.settings.options import FASHION_MNIST_DIR
from infra.helpers import benchrun
from infra.records import RecordFactory
from runners import dispatch, runtimes
from runners.commands import compare_runtimes
from runners.runtimes import singularity
from runners.runtimes.base import Mount
from runners.runtimes.container import ContainerSpec, rank_name


@pytest.fixture()
def dirs(tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    results.mkdir()
    data.mkdir()
    return results, data


def argv(runtime, dirs, **kw):
    results, data = dirs
    mounts = [Mount(str(results), "/results", readonly=False), Mount(str(data), "/data")]
    rt = runtimes.get(runtime)
    out = rt.command(kw.pop("image", "dlbench-tensorflow:latest"), ["bench", "--model", "resnet50"],
                     env=kw.pop("env", {"RANK": None, "DLBENCH_X": "1"}), mounts=mounts, workdir="/results", **kw)
    return [os.path.basename(out[0]), *out[1:]]


def test_docker_argv(dirs):
    r, d = dirs
    assert argv("docker", dirs, name="dlbench-abc", gpus=True) == [
        "docker", "run", "--rm", "--init", "--name", "dlbench-abc", "--network=host", "--ipc=host", "--gpus", "all",
        "-e", "RANK", "-e", "DLBENCH_X=1", "-v", f"{r}:/results", "-v", f"{d}:/data:ro", "-w", "/results",
        "--entrypoint", "bench", "dlbench-tensorflow:latest", "--model", "resnet50"]
    assert "--privileged" not in argv("docker", dirs)


def test_podman_argv(dirs):
    r, d = dirs
    assert argv("podman", dirs, name="dlbench-abc") == [
        "podman", "run", "--rm", "--name", "dlbench-abc", "--network=host", "--ipc=host",
        "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
        "-e", "RANK", "-e", "DLBENCH_X=1", "-v", f"{r}:/results", "-v", f"{d}:/data:ro", "-w", "/results",
        "--entrypoint", "bench", "dlbench-tensorflow:latest", "--model", "resnet50"]


@pytest.mark.parametrize("name", ["singularity", "apptainer"])
def test_singularity_apptainer_argv(name, dirs, monkeypatch, tmp_path):
    r, d = dirs
    monkeypatch.setattr(singularity, "needs_userns", lambda: False)
    monkeypatch.setattr(singularity.os, "geteuid", lambda: 0)  # root with the full capability set
    keep_host_python_out = ["--env", "PYTHONPATH=", "--env", "PYTHONHOME=", "--env", "PYTHONNOUSERSITE=1"]
    # Host environment passes in by default: RANK (forwarded) needs no option, fixed values use --env.
    # A Docker image's name is what `exec` takes (--dry-run: runs convert it to a SIF once, first).
    assert argv(name, dirs, name="ignored", gpus=True, mpi=True) == [
        name, "exec", *keep_host_python_out, "--nv", "--env", "DLBENCH_X=1", "-B", f"{r}:/results",
        "-B", f"{d}:/data:ro", "--pwd", "/results", "docker-daemon:dlbench-tensorflow:latest", "bench", "--model", "resnet50"]
    assert argv(name, dirs, image="/images/tf.sif")[-4] == "/images/tf.sif"
    monkeypatch.setattr(singularity, "needs_userns", lambda: True)  # root without CAP_SYS_RESOURCE
    assert argv(name, dirs)[1:3] == ["exec", "--userns"]
    assert {"UCX_POSIX_USE_PROC_LINK=n", "UCX_TLS=^cma"} <= set(argv(name, dirs))
    monkeypatch.setenv("UCX_TLS", "tcp")  # the caller's own choice passes in as it is
    assert "UCX_TLS=^cma" not in argv(name, dirs) and "UCX_POSIX_USE_PROC_LINK=n" in argv(name, dirs)


@pytest.mark.parametrize("euid, caps, expected", [
    (0, 0x000001ffffffffff, False),  # root with the full bounding set: Apptainer's privileged start works
    (0, 0x000001fffeffffff, True),  # root without CAP_SYS_RESOURCE (bit 24), as on our VMs: --userns
    (1000, 0x000001fffeffffff, False),  # a user: Apptainer uses a user namespace by itself
])
def test_apptainer_userns_rule(euid, caps, expected):
    assert singularity.needs_userns(euid, caps) is expected
    assert singularity.bounding_caps("Name:\tx\nCapBnd:\t000001fffeffffff\n") == 0x000001fffeffffff


def test_sif_checks(tmp_path):
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"#!/usr/bin/env run-singularity\n".ljust(32, b"\0") + b"SIF_MAGIC0" + b"\0" * 100)
    assert singularity.check_sif(str(sif)) == str(sif)
    sif.write_bytes(b"\0" * 200)
    with pytest.raises(UsageError, match="is not a SIF"):
        singularity.check_sif(str(sif))
    with pytest.raises(UsageError, match="does not exist"):
        singularity.check_sif(str(tmp_path / "none.sif"))


def test_shifter_ng_and_sarus_argv(dirs):
    r, d = dirs
    mounts = [f"--mount=type=bind,source={r},destination=/results", f"--mount=type=bind,source={d},destination=/data,readonly"]
    assert argv("shifter-ng", dirs, mpi=True, gpus=True, image="load/library/dlbench-tensorflow-latest") == [
        "shifter", "run", "--mpi", *mounts, "load/library/dlbench-tensorflow-latest",
        "env", "DLBENCH_X=1", "bench", "--model", "resnet50"]
    assert argv("sarus", dirs, mpi=True) == [
        "sarus", "run", "--mpi", *mounts, "--workdir=/results", "dlbench-tensorflow:latest",
        "env", "DLBENCH_X=1", "bench", "--model", "resnet50"]


def test_charliecloud_argv(dirs):
    r, d = dirs
    assert argv("charliecloud", dirs, image="/var/tmp/ch/tf") == [
        "ch-run", "--unset-env=PYTHONPATH", "--unset-env=PYTHONHOME", "--unset-env=VIRTUAL_ENV",
        "--set-env=/var/tmp/ch/tf/ch/environment", "--set-env=DLBENCH_X=1", "-b", f"{r}:/results",
        "-b", f"{d}:/data", "-c", "/results", "/var/tmp/ch/tf", "--", "bench", "--model", "resnet50"]


def test_local_runs_this_python():
    assert runtimes.get("local").command(None, ["bench", "--model", "x"]) == [sys.executable, "-m", "benchmarks", "--model", "x"]


def test_docker_has_no_mpi_hook(dirs):
    with pytest.raises(Exception, match="no MPI hook"):
        argv("docker", dirs, mpi=True)


@pytest.mark.parametrize("image", ["bad;name", "a b", "-rm", "../x", "$(x)", ""])
def test_bad_image_names_refused(image, dirs):
    with pytest.raises(Exception, match="invalid image name"):
        argv("docker", dirs, image=image)


def test_bad_mounts_refused(tmp_path):
    rt = runtimes.get("docker")
    with pytest.raises(Exception, match="does not exist"):
        rt.command("img", ["bench"], mounts=[Mount(str(tmp_path / "missing"), "/data")])
    with pytest.raises(Exception, match="invalid mount source"):
        rt.command("img", ["bench"], mounts=[Mount("relative/dir", "/data")])
    weird = tmp_path / "a,b"
    weird.mkdir()
    with pytest.raises(Exception, match="invalid mount source"):
        rt.command("img", ["bench"], mounts=[Mount(str(weird), "/data")])


def test_rank_environment_forwarded_and_names_unique(tmp_path):
    spec = ContainerSpec(runtime="docker", image="dlbench-torch:latest", name="dlbench-run1",
                         mounts=[Mount(str(tmp_path), "/results", readonly=False)], workdir="/results")
    environ = {"SLURM_PROCID": "1", "SLURM_JOB_NODELIST": "node[1-2]", "SLURMD_NODENAME": "node2", "RANK": "1",
               "MASTER_ADDR": "127.0.0.1", "OMPI_COMM_WORLD_RANK": "1", "PMI_RANK": "1", "HOROVOD_RANK": "1",
               "DLBENCH_COORDINATOR": "127.0.0.1", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
               "KMP_AFFINITY": "compact", "MKL_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
               "HOME": "/root", "PATH": "/usr/bin", "PYTHONPATH": "/work", "TF_CONFIG": "{}", "OMPX_X": "1"}
    cmd, name = spec.command(runtimes.get(spec.runtime), ["bench"], environ)
    assert name == f"dlbench-run1-r1-{os.getpid()}" and cmd[cmd.index("--name") + 1] == name
    forwarded = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-e"]
    assert forwarded == sorted(k for k in environ if k not in ("HOME", "PATH", "PYTHONPATH", "TF_CONFIG", "OMPX_X"))
    assert rank_name("dlbench-run1", {}) == "dlbench-run1"
    assert ContainerSpec.from_json(spec.to_json()) == spec


def test_request_default_images_and_container_command(tmp_path):
    tf = dispatch.RunRequest(RunSpec.from_argv(["--framework", "tensorflow"]), runtime="docker", run_id="abc")
    torch = dispatch.RunRequest(RunSpec.from_argv(["--framework", "torch"]), runtime="docker")
    assert dispatch.default_image(tf) == "dlbench-tensorflow:latest"
    assert dispatch.default_image(torch) == "dlbench-torch:latest"
    cmd = dispatch.container_command(tf, tmp_path)
    assert cmd[1:6] == ["run", "--rm", "--init", "--name", "dlbench-abc"] and "--privileged" not in cmd
    assert cmd[-3:] == ["--entrypoint", "bench", "dlbench-tensorflow:latest"] and f"{tmp_path}:/results" in cmd


@pytest.mark.parametrize("args, message", [
    (["--runtime", "nope"], "unknown runtime 'nope'"),
    (["--runtime", "sarus"], "runtime 'sarus' needs 'sarus', which is not on PATH"),
    (["--runtime", "singularity"], "runtime 'singularity' needs 'singularity'"),
    (["--runtime", "docker", "--image", "bad;name"], "invalid image name"),
    (["--runtime", "docker", "--data-dir", "/nonexistent/dir"], "--data-dir /nonexistent/dir is not a directory"),
    (["--runtime", "local", "--launcher", "nope"], "unknown launcher 'nope'"),
])
def test_bad_input_is_one_line_exit_2(args, message, tmp_path):
    absent = {"PATH": str(tmp_path)} if "needs" in message else None  # whatever this machine has installed
    result = benchrun("run", *args, "--", "--framework", "tensorflow", "--model", "resnet50", env=absent)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("benchrun: error: ") and message in result.stderr


def test_fashion_mnist_is_mounted_from_the_host_for_a_time_to_accuracy_run(tmp_path, monkeypatch):
    """A container run to a target reads the host's files, mounted read-only: a directory given (absent: one
    line before anything runs), or Debian's where the host has it; without it, the image's own copy."""
    accuracy = ["--framework", "torch", "--target-accuracy", "0.5", "--fashion-mnist-dir"]
    shared = tempfile.mkdtemp(prefix="dlbench-fmnist-", dir="/tmp")  # readable by the image's user, as a dataset is
    os.chmod(shared, 0o755)
    try:
        result = benchrun("run", "--runtime", "docker", "--dry-run", "--", *accuracy, shared)
    finally:
        os.rmdir(shared)
    assert result.returncode == 0, result.stderr
    assert f"-v {shared}:/data:ro" in result.stdout  # bench is given the mounted path, in place of the host's
    assert result.stdout.rstrip().endswith("--fashion-mnist-dir /data --output /results/record.jsonl")
    assert result.stdout.count("--fashion-mnist-dir") == 1
    result = benchrun("run", "--runtime", "docker", "--", *accuracy, str(tmp_path / "none"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"--fashion-mnist-dir {tmp_path / 'none'} is not a directory (leave it out: the image's own" in result.stderr
    default = dispatch.RunRequest(RunSpec.from_argv(accuracy[:-1]), runtime="docker")
    docker = runtimes.get("docker")
    isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda path: path != FASHION_MNIST_DIR and isdir(path))
    assert dispatch.read_only_inputs(default, docker) == {}  # the host has none: the image's
    monkeypatch.setattr(os.path, "isdir", lambda path: path == FASHION_MNIST_DIR or isdir(path))
    assert dispatch.read_only_inputs(default, docker) == {"fashion_mnist_dir": FASHION_MNIST_DIR}


def test_missing_image_is_one_line_exit_2():
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker daemon")
    result = benchrun("run", "--runtime", "docker", "--image", "dlbench-no-such-image:0", "--", "--model", "resnet50")
    assert result.returncode == 2 and result.stderr == \
        "benchrun: error: image 'dlbench-no-such-image:0' not found by docker (build it: make images)\n"


def test_data_dir_unreadable_by_image_user_refused(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    result = benchrun("run", "--runtime", "docker", "--data-dir", str(private), "--", "--model", "resnet50")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "is not readable by the image's user (uid 1000)" in result.stderr


def test_missing_binary_in_compare_refused_before_running(tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    out = tmp_path / "out"
    result = benchrun("compare-runtimes", "--runtimes", "local,apptainer", "--out", str(out), "--", "--model", "alexnet",
                      env={"PATH": str(empty)})
    assert result.returncode == 2 and "needs 'apptainer'" in result.stderr and not out.exists()


@pytest.mark.slow
def test_compare_runtimes_and_report_print_the_same_numbers(real_record, tmp_path):
    """The machine is itself a container (every record detects docker): the runtime asked for decides."""
    R = RecordFactory(real_record)
    records = [R(11.0, requested="local"), R(13.0, requested="local"), R(9.0, requested="docker"),
               R(11.0, requested="docker"), R(9.5, runtime="podman", requested="podman"),
               R(None, status="failed", runtime="podman", requested="podman", error="boom")]
    md = compare_runtimes.summary(records, tmp_path)
    # by hand: local 11, 13 -> mean 12, t-interval 12.706 * sqrt(2) / sqrt(2) = 12.71; docker 9, 11 -> mean 10.
    # No rounds in these records: Welch on the logs, docker / local = exp(mean log 9, 11 - mean log 11, 13) = 0.832,
    # wide (df ~ 2); podman: one record, its own interval 0.50, no interval of a ratio.
    rows = ["| local | 2 | 12.00 ± 12.71 | 00000001 00000002 |",
            "| docker | 2 | 10.00 ± 12.71 | 00000003 00000004 |",
            "| podman | 1 | 9.50 ± 0.50 | 00000005 |",
            "| docker | local | 0.832 [0.466, 1.486] | unpaired (Welch), ≥ 2 runs a side | "
            "inconclusive: ±78.6% now; about 5 more rounds to resolve the difference | - |",
            "| podman | local | n/a | none (< 2 rounds) | inconclusive: fewer than 2 rounds, no interval | - |"]
    for row in rows:
        assert row in md
    assert "Welch p" not in md
    assert "podman: run 00000006 failed: boom" in md
    assert (tmp_path / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    store = tmp_path / "records.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = benchrun("report", str(store), "--out", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    for row in rows:
        assert row in report


def test_launch_times_and_table_from_mllog_stamps(tmp_path):
    log = tmp_path / "run.log"
    stamp = ':::MLLOG {{"time_ms": {}, "key": "{}", "value": {}}}'
    log.write_text("\n".join([
        "bench: a plain line", stamp.format(1000500, "init_start", "null"), stamp.format(1001000, "init_start", "null"),
        stamp.format(1010000, "epoch_start", 0) + "\r", stamp.format(1012000, "epoch_start", 0),
        stamp.format(1020000, "epoch_start", 1), ":::MLLOG {torn"]) + "\n")
    # two ranks: the latest counts; repeat 1's epoch_start and the torn line are ignored; CRLF (udocker R1) read
    assert compare_runtimes.launch_times(log, issued=1000.0) == {"bench_up_s": 1.0, "first_step_s": 12.0}
    assert compare_runtimes.launch_times(tmp_path / "none.log", 0.0) == {"bench_up_s": None, "first_step_s": None}
    doc = compare_runtimes.Document()
    compare_runtimes.section_launch(doc, {
        "local": [{"bench_up_s": 1.0, "first_step_s": 10.0}, {"bench_up_s": 3.0, "first_step_s": 12.0}],
        "udocker": [{"bench_up_s": 2.0, "first_step_s": 14.0}, {"bench_up_s": 4.0, "first_step_s": 16.0}],
        "podman": [{"bench_up_s": None, "first_step_s": None}]})
    # by hand: t-interval 12.706 * sqrt(2) / sqrt(2) = 12.71; udocker - local per round (paired by place):
    # bench up 2 - 1 = 4 - 3 = 1, first step 14 - 10 = 16 - 12 = 4: no spread, so intervals of zero width
    md = doc.markdown()
    assert "| local | 2 | 2.00 ± 12.71 | 11.00 ± 12.71 |" in md
    assert "| udocker | 2 | 3.00 ± 12.71 | 15.00 ± 12.71 |" in md
    assert "| podman | 1 | n/a | n/a |" in md
    assert "| udocker | local | to bench up | +1.00 s [+1.00, +1.00] | paired by round, 2 rounds | " \
           "slower by 1.00 s [1.00, 1.00] |" in md
    assert "| udocker | local | to first timed step | +4.00 s [+4.00, +4.00] | paired by round, 2 rounds | " \
           "slower by 4.00 s [4.00, 4.00] |" in md
    assert "| podman | local | to bench up | n/a | none (< 2 rounds) | " \
           "inconclusive: fewer than 2 rounds, no interval |" in md
    # a launch that names its round pairs by it, not by its place in the list
    doc = compare_runtimes.Document()
    found = compare_runtimes.section_launch(doc, {
        "local": [{"round": 1, "bench_up_s": 1.0, "first_step_s": 10.0},
                  {"round": 2, "bench_up_s": 3.0, "first_step_s": 12.0}],
        "docker": [{"round": 2, "bench_up_s": 3.5, "first_step_s": 12.5},
                   {"round": 1, "bench_up_s": 1.5, "first_step_s": 10.5}]},
        margin=0.25)
    assert [v.verdict.text for v in found if v.runtime == "docker"] == ["slower by 0.50 s [0.50, 0.50]"] * 2


def test_a_docker_daemon_that_is_not_there_is_a_fault_recorded_for_the_run(tmp_path, monkeypatch):
    """The daemon gone before the run: dispatch records the run as failed (error kind environment)
    without starting anything, so a sweep stores the point and goes on; benchrun run exits 6."""
    if not runtimes.get("docker").available():
        pytest.skip("no docker client")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/gone.sock")
    assert runtimes.get("docker").fault().startswith("docker daemon went away (Cannot connect to the Docker daemon")
    asked = RunSpec.from_argv(["--framework", "torch", "--model", "alexnet", "--image-size", "64"])
    request = dispatch.RunRequest(asked, runtime="docker")
    outcome = dispatch.run(request)
    assert outcome.exit_code == 6 and outcome.command == [] and outcome.fault.startswith("docker daemon went away")
    record = outcome.record
    assert record["status"] == "failed" and record["error"]["kind"] == "environment"
    assert record["config"]["model"] == "alexnet" and record["provenance"]["requested_runtime"] == "docker"
    result = benchrun("run", "--runtime", "docker", "--", "--framework", "torch", "--model", "alexnet",
                      env={"DOCKER_HOST": f"unix://{tmp_path}/gone.sock"})
    assert result.returncode == 6 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("benchrun: error: the run failed: docker daemon went away (")
    assert json.loads(result.stdout)["error"]["kind"] == "environment"


def test_sif_build_needs_three_times_the_image_on_disk(tmp_path, monkeypatch):
    """A conversion the disk cannot hold is refused in one line before it starts (it would fill the disk).
    The sizes keep a factor of two from the limit: other workers write to the same disk meanwhile."""
    free = __import__("shutil").disk_usage(tmp_path).free
    for size, refused in ((free // (2 * singularity.BUILD_ROOM), False), (2 * free // singularity.BUILD_ROOM, True)):
        monkeypatch.setattr(singularity, "run_quiet",
                            lambda argv, size=size: subprocess.CompletedProcess(argv, 0, f"{size}\n", ""))
        monkeypatch.setenv("APPTAINER_TMPDIR", str(tmp_path))
        if refused:
            with pytest.raises(UsageError, match=r"making a SIF of img:1 .* needs about \d+ GB free under"):
                singularity.check_room("img:1", tmp_path / "sif")
        else:
            singularity.check_room("img:1", tmp_path / "sif")


def fake_docker_save(tmp_path, monkeypatch, files: dict[str, bytes] | None, error: str = "") -> None:
    """A `docker` on PATH whose `save` prints a tar of `files` (or fails saying `error`)."""
    import io
    import tarfile

    saved = tmp_path / "saved.tar"
    with tarfile.open(saved, "w") as tar:
        for name, data in (files or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\necho '{error}' >&2; exit 1\n" if error else f"#!/bin/sh\ncat {saved}\n")
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_docker_save_becomes_an_oci_layout_apptainer_reads_in_place(tmp_path, monkeypatch):
    """Docker < 25 saves manifest.json: the index is written from the config's diff_ids, layers hard-linked;
    a Docker that already saves a layout keeps it; a failed save is one line naming the image."""
    import hashlib

    layer = b"layer bytes"
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]}}).encode()
    config_digest = hashlib.sha256(config).hexdigest()
    fake_docker_save(tmp_path, monkeypatch, {"manifest.json": json.dumps([{"Config": f"{config_digest}.json",
                                                                          "Layers": ["abc/layer.tar"]}]).encode(),
                                             f"{config_digest}.json": config, "abc/layer.tar": layer})
    layout = tmp_path / "layout"
    layout.mkdir()
    singularity.save_oci_layout("img:1", layout)
    index = json.loads((layout / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"].removeprefix("sha256:")
    manifest_bytes = (layout / "blobs/sha256" / manifest_digest).read_bytes()
    assert hashlib.sha256(manifest_bytes).hexdigest() == manifest_digest
    manifest = json.loads(manifest_bytes)
    assert manifest["config"] == {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": f"sha256:{config_digest}", "size": len(config)}
    assert manifest["layers"] == [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": f"sha256:{diff_id}", "size": len(layer)}]
    assert (layout / "blobs/sha256" / diff_id).stat().st_ino == (layout / "abc/layer.tar").stat().st_ino
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}

    newer = tmp_path / "newer"
    newer.mkdir()
    (tmp_path / "bin").rename(tmp_path / "old-bin")
    fake_docker_save(tmp_path, monkeypatch, {"index.json": b'{"schemaVersion": 2}', "oci-layout": b"{}"})
    singularity.save_oci_layout("img:1", newer)
    assert sorted(p.name for p in newer.iterdir()) == ["index.json", "oci-layout"]

    (tmp_path / "bin").rename(tmp_path / "newer-bin")
    fake_docker_save(tmp_path, monkeypatch, None, error="Error response from daemon: reference does not exist")
    with pytest.raises(UsageError, match=r"^docker save img:1 failed: Error response from daemon: reference does not exist$"):
        singularity.save_oci_layout("img:1", tmp_path)


def test_a_stopped_run_gives_its_container_client_time_to_remove_its_container():
    """SIGTERM to SIGKILL for process 0 (the host's, and a sweep point's): a udocker client removes its
    container after bench ends (a removal cut short leaves a nameless container), so the grace is the rank
    wrapper's wait for its client plus the wrapper's own clean-up: always longer than the wrapper's wait."""
    from benchmarks.core.processes import STOP_GRACE_S

    grace = {name: dispatch.request_stop_grace_s(dispatch.RunRequest(RunSpec.from_argv(["--framework", "torch"]), runtime=name))
             for name in ("local", "docker", "udocker")}
    wrapper = {name: runtimes.get(name).client(None).stop_grace_s for name in ("docker", "udocker")}
    assert grace["local"] == 2 * STOP_GRACE_S
    assert all(grace[name] >= wait + STOP_GRACE_S for name, wait in wrapper.items()), (grace, wrapper)
    assert wrapper["udocker"] >= wrapper["docker"] + 60


def test_container_options_reach_the_runtime_line_and_unsafe_ones_are_refused(tmp_path):
    """--container-option: a site's or a planted limit on the Docker-CLI runtimes' own line (between the
    mounts and the entrypoint); privileges, mounts and what benchrun sets are refused, as are runtimes
    without such a line (local), each in one line."""
    from runners.commands.run import container_option

    asked = RunSpec.from_argv(["--framework", "torch", "--model", "alexnet"])
    for name in ("docker", "podman"):
        request = dispatch.RunRequest(asked, runtime=name, container_options=["--cpus=1", "--shm-size=64m"])
        argv = dispatch.container_command(request, tmp_path)
        assert argv[argv.index("--cpus=1") - 2:argv.index("--entrypoint")] == \
            ["-w", "/results", "--cpus=1", "--shm-size=64m"], argv
    refusals = {"--privileged": "is refused (no privileges beyond the run's own)",
                "--volume=/:/host": "is refused (benchrun mounts the data, read-only)",
                "--network=bridge": "is refused (benchrun sets it)", "--cpus 1": "give one --flag or --flag=value token",
                "-v": "give one --flag or --flag=value token"}
    for option, said in refusals.items():
        request = dispatch.RunRequest(asked, runtime="docker", container_options=[option])
        with pytest.raises(UsageError, match=re.escape(said)):
            dispatch.check(request, installed=False)
    with pytest.raises(UsageError, match="runtime 'local' takes no --container-option"):
        dispatch.check(dispatch.RunRequest(asked, runtime="local", container_options=["--cpus=1"]))
    assert container_option("docker:--cpus=1") == ("docker", "--cpus=1")
    assert container_option("--ipc=container:x") == ("", "--ipc=container:x")
    with pytest.raises(UsageError, match="expected --FLAG"):
        container_option("cpus=1")
    result = benchrun("compare-runtimes", "--runtimes", "local,docker", "--container-option", "podman:--cpus=1",
                      "--out", str(tmp_path / "out"), "--", "--model", "alexnet")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "is for runtime 'podman'" in result.stderr
    assert not (tmp_path / "out").exists()
