"""Enroot, Pyxis, the CSCS Container Engine and Shifter by their exact command lines and EDF files,
checked against the documented syntax (Enroot's and Pyxis's usage pages, CSCS's EDF reference,
Shifter 22.02's usage) and the runs in ../shared/hpc-runtimes.md. Their binaries cannot be installed
on our machines (only built from upstream sources, which this project must not do):
tests/test_runtimes_hpc_real.py runs them for real wherever they are found."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from benchmarks.core.errors import UsageError
from infra import helpers
from runners import runtimes
from runners.runtimes import cscs_ce, enroot, shifter, singularity
from runners.runtimes.base import Mount
from runners.runtimes.container import ContainerSpec


@pytest.fixture()
def dirs(tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    results.mkdir()
    data.mkdir()
    return results, data


def mounts(dirs):
    results, data = dirs
    return [Mount(str(results), "/results", readonly=False), Mount(str(data), "/data")]


def spec(runtime, dirs, **kw):
    return ContainerSpec(runtime=runtime, image=kw.pop("image", "/images/dlbench-torch-latest.sqsh"),
                         name="dlbench-abc123", mounts=mounts(dirs), workdir="/results", **kw)


def fake_binary(directory: Path, name: str, script: str = "exit 0") -> Path:
    """A stand-in on PATH for argv-level checks only (the real program is never simulated as a result)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# ---- enroot -------------------------------------------------------------------------

def test_enroot_argv(dirs):
    r, d = dirs
    cmd = runtimes.get("enroot").command("dlbench-torch-latest-1a-2b", ["bench", "--model", "resnet50"],
                                         env={"RANK": None, "DLBENCH_X": "1"}, mounts=mounts(dirs), workdir="/results")
    assert [os.path.basename(cmd[0]), *cmd[1:]] == [
        "enroot", "start", "--rc", str(enroot.RC_FILE),
        "-e", "NVIDIA_VISIBLE_DEVICES=void", "-e", "RANK", "-e", "DLBENCH_X=1",
        "-m", f"{r}:/results", "-m", f"{d}:/data:x-create=auto,rbind,ro", "-e", "DLBENCH_WORKDIR=/results",
        "dlbench-torch-latest-1a-2b", "bench", "--model", "resnet50"]


def test_enroot_gpus_ask_the_nvidia_hook_for_all_devices(dirs):
    cmd = runtimes.get("enroot").command("c", ["bench"], gpus=True, mpi=True)
    assert cmd[4:8] == ["-e", "NVIDIA_VISIBLE_DEVICES=all", "-e", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    assert enroot.gpu_environment(False) == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_enroot_rc_runs_the_command_as_given_without_a_login_shell(tmp_path):
    # The rc replaces the image's /etc/rc (which would put the ENTRYPOINT, bench, in front of `bench`).
    assert runtimes.get("enroot").host_env() == {"ENROOT_LOGIN_SHELL": "no"}
    out = subprocess.run(["sh", str(enroot.RC_FILE), "sh", "-c", 'pwd; echo "$0 $1"', "x", "y"], capture_output=True,
                         text=True, env={**os.environ, "DLBENCH_WORKDIR": str(tmp_path)})
    assert out.returncode == 0 and out.stdout.split("\n")[:2] == [str(tmp_path), "x y"], out.stderr
    bad = subprocess.run(["sh", str(enroot.RC_FILE), "true"], capture_output=True, text=True,
                         env={**os.environ, "DLBENCH_WORKDIR": str(tmp_path / "missing")})
    assert bad.returncode != 0


def test_enroot_failed_import_leaves_no_squashfs(tmp_path, monkeypatch):
    # A Docker image that exists, an `enroot import` that fails half-way (writes, then exits 1).
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker daemon: the import path needs a local Docker image")
    images = subprocess.run(["docker", "images", "-q"], capture_output=True, text=True).stdout.split()
    if not images:
        pytest.skip("no local Docker image to import")
    fake = fake_binary(tmp_path / "bin", "enroot", 'touch "$3"; echo "[ERROR] No such image" >&2; exit 1')
    monkeypatch.setenv(enroot.STORE_ENV, str(tmp_path / "store"))
    with pytest.raises(UsageError, match=r"enroot import dockerd://.* failed: \[ERROR\] No such image"):
        enroot.squashfs_for(images[0], str(fake))
    assert list((tmp_path / "store").iterdir()) == []


def test_enroot_missing_docker_image_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(enroot.STORE_ENV, str(tmp_path / "store"))
    with pytest.raises(UsageError, match="not found in the local Docker engine"):
        enroot.squashfs_for("dlbench-no-such-image:0", "enroot")
    with pytest.raises(UsageError, match="does not exist"):
        enroot.squashfs_for(str(tmp_path / "missing.sqsh"), "enroot")
    assert not (tmp_path / "store").exists()


# ---- pyxis --------------------------------------------------------------------------

def test_pyxis_srun_options_and_program(dirs):
    r, d = dirs
    rt = runtimes.get("pyxis")
    plan = rt.plan(spec("pyxis", dirs, env={"DLBENCH_X": "1"}), r)
    assert plan.launcher_options == [
        "--container-image=/images/dlbench-torch-latest.sqsh", "--container-name=dlbench-abc123",
        "--no-container-entrypoint", f"--container-mounts={r}:/results", f"--container-mounts={d}:/data:ro",
        "--container-workdir=/results"]
    assert plan.bench == plan.typed == ["env", "DLBENCH_X=1", "bench"] and plan.files == {}
    assert rt.plan(spec("pyxis", dirs), r).bench == ["bench"] and rt.launcher == "srun"


def test_pyxis_needs_srun_with_the_plugin(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(UsageError, match="needs 'srun'"):
        runtimes.get("pyxis").require()
    fake_binary(tmp_path / "bin", "srun", 'echo "Usage: srun [OPTIONS(0)...]"')
    with pytest.raises(UsageError, match=r"needs the Pyxis SPANK plugin \('srun --help' shows no --container-image\)"):
        runtimes.get("pyxis").require()


# ---- cscs-ce (EDF) -------------------------------------------------------------------

def parse(text: str) -> dict:
    return tomllib.loads(text)


def flat(table: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_cscs_ce_edf_content(dirs):
    r, d = dirs
    rt = runtimes.get("cscs-ce")
    s = spec("cscs-ce", dirs, env={"DLBENCH_X": "1", "QUOTED": 'a "b" \\ c'})
    edf = parse(rt.edf(s))
    assert edf == {"image": "/images/dlbench-torch-latest.sqsh", "mounts": [f"{r}:/results", f"{d}:/data:ro"],
                   "workdir": "/results", "entrypoint": False, "env": {"DLBENCH_X": "1", "QUOTED": 'a "b" \\ c'}}
    plan = rt.plan(s, r)
    assert plan.launcher_options == [f"--environment={r}/dlbench-abc123.toml"]
    assert list(plan.files) == [r / "dlbench-abc123.toml"] and parse(plan.files[r / "dlbench-abc123.toml"]) == edf
    assert plan.bench == ["bench"]  # the variables are the EDF's


def test_cscs_ce_gpus_enable_the_nccl_hook_and_annotations_override(dirs):
    rt = runtimes.get("cscs-ce")
    edf = parse(rt.edf(spec("cscs-ce", dirs, gpus=True)))
    assert flat(edf["annotations"]) == {"com.hooks.aws_ofi_nccl.enabled": "true", "com.hooks.aws_ofi_nccl.variant": "cuda12"}
    edf = parse(rt.edf(spec("cscs-ce", dirs, gpus=True, annotations={"com.hooks.aws_ofi_nccl.variant": "cuda11",
                                                                      "com.hooks.cxi.enabled": "false"})))
    assert flat(edf["annotations"]) == {"com.hooks.aws_ofi_nccl.enabled": "true",
                                        "com.hooks.aws_ofi_nccl.variant": "cuda11", "com.hooks.cxi.enabled": "false"}
    assert "annotations" not in parse(rt.edf(spec("cscs-ce", dirs)))


@pytest.mark.parametrize("annotations, message", [
    ({"com.hooks.nccl.enabled": "true"}, "unknown EDF annotation 'com.hooks.nccl.enabled' (choices: "
                                         "com.hooks.aws_ofi_nccl.enabled,"),
    ({"com.hooks.cxi.enabled": "yes"}, "expected one of true, false"),
    ({"com.hooks.ssh.authorize_ssh_key": "a\nb"}, "control characters"),
])
def test_cscs_ce_bad_annotations_refused(annotations, message):
    with pytest.raises(UsageError) as err:
        runtimes.get("cscs-ce").check_annotations(annotations)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_other_runtimes_take_no_annotations():
    with pytest.raises(UsageError, match="runtime 'docker' takes no EDF annotations"):
        runtimes.get("docker").check_annotations({"com.hooks.cxi.enabled": "true"})
    assert runtimes.get("docker").check_annotations({}) == {}


@pytest.mark.parametrize("value", ['plain', 'quote " and \\ back', "tab\there", "ünïcode", "\x7f"])
def test_toml_strings_round_trip(value):
    assert tomllib.loads(f"v = {cscs_ce.toml_string(value)}")["v"] == value


# ---- shifter ------------------------------------------------------------------------

def shifter_argv(dirs, environ=None, **kw):
    rt = runtimes.get("shifter")
    image = kw.pop("image", "dlbench-tensorflow:latest")
    cmd = rt.command(rt.import_image(image), ["bench", "--model", "resnet50"], env={"RANK": None, "DLBENCH_X": "1"},
                     mounts=mounts(dirs), workdir="/results", **kw)
    return [os.path.basename(cmd[0]), *cmd[1:]]


def test_shifter_argv_data_read_only_workdir_and_modules(dirs, monkeypatch):
    for var in ("SHIFTER_IMAGE", "SHIFTER_IMAGETYPE", "SLURM_SPANK_SHIFTER_IMAGE", "SLURM_SPANK_SHIFTER_IMAGETYPE"):
        monkeypatch.delenv(var, raising=False)
    r, d = dirs
    assert shifter_argv(dirs, gpus=True, mpi=True) == [
        "shifter", "--module=gpu,mpich", "--image=docker:dlbench-tensorflow:latest", f"--volume={r}:/results",
        f"--volume={d}:/data:ro", "--workdir=/results", "env", "DLBENCH_X=1", "bench", "--model", "resnet50"]
    assert shifter_argv(dirs, gpus=True)[1] == "--module=gpu"
    assert not any(a.startswith("--module") for a in shifter_argv(dirs))


@pytest.mark.parametrize("image, typed", [
    ("dlbench-torch:latest", "docker:dlbench-torch:latest"),
    ("docker:nersc/dlbench:1.0", "docker:nersc/dlbench:1.0"),
    ("id:0123abcd", "id:0123abcd"),
    ("local:/global/common/dlbench", "local:/global/common/dlbench"),
])
def test_shifter_image_types(image, typed):
    assert shifter.typed_image(image) == typed
    with pytest.raises(UsageError, match="nothing after id:"):
        shifter.typed_image("id:")


def test_shifter_slurm_plugin_form_uses_the_jobs_image(dirs, monkeypatch):
    # `salloc --image=docker:dlbench-torch:latest` sets these; then `srun shifter bench` needs no --image.
    monkeypatch.setenv("SLURM_SPANK_SHIFTER_IMAGETYPE", "docker")
    monkeypatch.setenv("SLURM_SPANK_SHIFTER_IMAGE", "dlbench-torch:latest")
    rt = runtimes.get("shifter")
    assert rt.default_image("dlbench-tensorflow:latest") == "docker:dlbench-torch:latest"
    argv = shifter_argv(dirs, image="docker:dlbench-torch:latest")
    assert not any(a.startswith("--image") for a in argv) and argv[0] == "shifter"
    assert "--image=docker:other:1" in shifter_argv(dirs, image="other:1")  # an explicit other image is stated
    assert shifter.job_image({"SHIFTER_IMAGETYPE": "id", "SHIFTER_IMAGE": "abc"}) == "id:abc"
    assert shifter.job_image({"SHIFTER_IMAGE": "abc"}) is None


def test_shifter_refuses_root_in_one_line(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("runs as a regular user: Shifter's root refusal does not apply")
    fake_binary(tmp_path / "bin", "shifter")  # only found on PATH, never run
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    with pytest.raises(UsageError) as err:
        runtimes.get("shifter").prepare("dlbench-torch:latest")
    assert "cannot run as root" in str(err.value) and "\n" not in str(err.value)


def test_legacy_runtimes_are_marked():
    legacy = {name for name in runtimes.RUNTIMES if runtimes.get(name).legacy}
    assert legacy == {"shifter-ng", "sarus"}


# ---- singularity / apptainer GPUs -------------------------------------------------------

def test_cdi_specification_switches_gpus_to_cdi_devices(tmp_path, monkeypatch):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    assert not singularity.cdi_gpus_available([str(cdi), str(tmp_path / "missing")])
    (cdi / "other.yaml").write_text("cdiVersion: 0.6.0\nkind: vendor.com/fpga\n")
    assert not singularity.cdi_gpus_available([str(cdi)])
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n")
    assert singularity.cdi_gpus_available([str(cdi)])
    for name in ("singularity", "apptainer"):
        monkeypatch.setattr(singularity, "CDI_DIRS", (str(cdi),))
        cmd = runtimes.get(name).command("/i.sif", ["bench"], gpus=True)
        assert cmd[cmd.index("--device"):cmd.index("--device") + 2] == ["--device", "nvidia.com/gpu=all"] and "--nv" not in cmd
        monkeypatch.setattr(singularity, "CDI_DIRS", (str(tmp_path / "none"),))
        cmd = runtimes.get(name).command("/i.sif", ["bench"], gpus=True)
        assert "--nv" in cmd and "--device" not in cmd


# ---- benchrun: dry runs show the real command, bad input is one line ------------------

def benchrun(*args, path_prefix=None):
    return helpers.benchrun(*args, env={"PATH": f"{path_prefix}:{os.environ['PATH']}"} if path_prefix else None,
                            timeout=120)


@pytest.fixture()
def plugin_srun(tmp_path):
    """An `srun` whose --help lists both plugins' options, for the dry-run (nothing is started)."""
    fake_binary(tmp_path / "bin", "srun", 'echo "--container-image=IMAGE [pyxis]"; echo "--environment=EDF"')
    fake_binary(tmp_path / "bin", "enroot")
    return str(tmp_path / "bin")


def test_dry_run_pyxis_is_srun_with_container_options(plugin_srun, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    out = benchrun("run", "--dry-run", "--runtime", "pyxis", "--launcher", "srun", "-n", "2", "--image",
                   "/images/t.sqsh", "--data-dir", str(data), "--", "--model", "resnet50", path_prefix=plugin_srun)
    assert out.returncode == 0, out.stderr
    token, *argv = shlex.split(out.stdout)
    assert token.startswith("DLBENCH_RUN_TOKEN=") and len(token) > len("DLBENCH_RUN_TOKEN=")  # ranks meet only their run
    assert argv[:6] == ["srun", "--ntasks", "2", "--kill-on-bad-exit=1", "--distribution=cyclic", "--disable-status"]
    assert argv[6] == "--container-image=/images/t.sqsh" and "--no-container-entrypoint" in argv
    assert f"--container-mounts={data}:/data:ro" in argv and "--container-mounts=/tmp/RESULTS:/results" in argv
    assert argv[argv.index("bench"):] == ["bench", "--model", "resnet50", "--output", "/results/record.jsonl",
                                          "--data-dir", "/data"]
    assert "runners.runtimes" not in out.stdout  # not benchrun's per-rank wrapper


def test_dry_run_cscs_ce_shows_the_edf(plugin_srun):
    out = benchrun("run", "--dry-run", "--runtime", "cscs-ce", "--gpus", "--image", "/images/t.sqsh",
                   "--edf-annotation", "com.hooks.cxi.enabled=false", "--", "--model", "resnet50", path_prefix=plugin_srun)
    assert out.returncode == 0, out.stderr
    command, *comments = out.stdout.splitlines()
    edf_path = shlex.split(command)[7].removeprefix("--environment=")  # after DLBENCH_RUN_TOKEN=... srun ...
    assert comments[0] == f"# {edf_path}:" and edf_path.startswith("/tmp/RESULTS/dlbench-")
    edf = tomllib.loads("\n".join(line[2:] for line in comments[1:]))
    assert edf["image"] == "/images/t.sqsh" and edf["entrypoint"] is False
    assert flat(edf["annotations"])["com.hooks.cxi.enabled"] == "false"


def test_dry_run_enroot_names_login_shell_setting(plugin_srun):
    out = benchrun("run", "--dry-run", "--runtime", "enroot", "--", "--model", "resnet50", path_prefix=plugin_srun)
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout)[:3] == ["ENROOT_LOGIN_SHELL=no", "enroot", "start"]


@pytest.mark.parametrize("args, message", [
    (["--runtime", "pyxis", "--launcher", "local"], "runtime 'pyxis' runs through srun (a Slurm plugin): use --launcher srun"),
    (["--runtime", "cscs-ce", "--edf-annotation", "com.hooks.nope=1"], "unknown EDF annotation 'com.hooks.nope'"),
    (["--runtime", "cscs-ce", "--edf-annotation", "novalue"], "--edf-annotation 'novalue': expected KEY=VALUE"),
    (["--runtime", "docker", "--edf-annotation", "com.hooks.cxi.enabled=true"], "takes no EDF annotations"),
])
def test_bad_plugin_input_is_one_line_exit_2(plugin_srun, args, message):
    out = benchrun("run", "--dry-run", *args, "--", "--model", "resnet50", path_prefix=plugin_srun)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr


@pytest.mark.parametrize("runtime, binary", [("enroot", "enroot"), ("pyxis", "srun"), ("cscs-ce", "srun")])
def test_missing_binary_is_one_line_exit_2(tmp_path, runtime, binary):
    if binary == "srun":
        fake_binary(tmp_path, "srun", 'echo "Usage: srun"')
    out = helpers.benchrun("run", "--runtime", runtime, "--", "--model", "resnet50",
                           env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"runtime {runtime!r} needs" in out.stderr
