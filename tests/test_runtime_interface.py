"""The runtime interface in process: the command line as named slots, each runtime's --dry-run
command built by dispatch on a machine that has none of the runtimes (a PATH of an empty
directory), what a dry run says about a missing runtime, and the plugin registries' one error."""

from __future__ import annotations

import os
import shlex
import sys

import pytest

from benchmarks import frameworks
from benchmarks.core.errors import UsageError
from benchmarks.core.registry import Registry, load_target
from benchmarks.runspec import RunSpec
from infra.helpers import benchrun
from runners import dispatch, launchers, runtimes
from runners.runtimes import enroot, singularity
from runners.runtimes.base import SLOTS, Command

# `benchrun run --dry-run` per runtime, without the runtime installed: --gpus where the runtime has a
# GPU option, --mpi where it has an MPI hook (Shifter's modules and podman-hpc's shared run are slot edits).
GPUS, MPI = ("docker", "podman-hpc", "shifter", "enroot", "cscs-ce"), ("shifter", "podman-hpc", "sarus")
MOUNT = "/tmp/RESULTS:/results"
TAIL = "--model resnet50 --output /results/record.jsonl"
DRY_RUNS = {
    "local": f"{sys.executable} -m benchmarks --model resnet50 --output /tmp/RESULTS/record.jsonl",
    "docker": "docker run --rm --init --name dlbench-abc --network=host --ipc=host --gpus all "
              f"-v {MOUNT} -w /results --entrypoint bench dlbench-torch:latest {TAIL}",
    "podman": "podman run --rm --name dlbench-abc --network=host --ipc=host --ulimit nofile=20000:20000 "
              f"--ulimit nproc=32768:32768 -v {MOUNT} -w /results --entrypoint bench dlbench-torch:latest {TAIL}",
    "singularity": "singularity exec --env PYTHONPATH= --env PYTHONHOME= --env PYTHONNOUSERSITE=1 "
                   f"-B {MOUNT} --pwd /results docker-daemon:dlbench-torch:latest bench {TAIL}",
    "apptainer": "apptainer exec --env PYTHONPATH= --env PYTHONHOME= --env PYTHONNOUSERSITE=1 "
                 f"-B {MOUNT} --pwd /results docker-daemon:dlbench-torch:latest bench {TAIL}",
    "shifter": f"shifter --module=gpu,mpich --image=docker:dlbench-torch:latest --volume={MOUNT} --workdir=/results bench {TAIL}",
    "shifter-ng": f"shifter run --mount=type=bind,source=/tmp/RESULTS,destination=/results dlbench-torch:latest bench {TAIL}",
    "charliecloud": "ch-run --unset-env=PYTHONPATH --unset-env=PYTHONHOME --unset-env=VIRTUAL_ENV "
                    f"--set-env=dlbench-torch:latest/ch/environment -b {MOUNT} -c /results dlbench-torch:latest -- bench {TAIL}",
    "sarus": "sarus run --mpi --mount=type=bind,source=/tmp/RESULTS,destination=/results --workdir=/results "
             f"dlbench-torch:latest bench {TAIL}",
    "enroot": f"ENROOT_LOGIN_SHELL=no enroot start --rc {enroot.RC_FILE} -e NVIDIA_VISIBLE_DEVICES=all "
              f"-e NVIDIA_DRIVER_CAPABILITIES=compute,utility -m {MOUNT} -e DLBENCH_WORKDIR=/results dlbench-torch:latest bench "
              f"{TAIL}",
    "pyxis": "TOKEN srun --ntasks 1 --kill-on-bad-exit=1 --distribution=cyclic --disable-status "
             "--container-image=dlbench-torch:latest --container-name=dlbench-abc --no-container-entrypoint "
             f"--container-mounts={MOUNT} --container-workdir=/results bench {TAIL}",
    "cscs-ce": "TOKEN srun --ntasks 1 --kill-on-bad-exit=1 --distribution=cyclic --disable-status "
               f"--environment=/tmp/RESULTS/dlbench-abc.toml bench {TAIL}",
    "udocker": "UDOCKER_DEFAULT_EXECUTION_MODE=P1 udocker --allow-root run --name=dlbench-abc --pull=never --nobanner "
               f"--user=root -v {MOUNT} -w /results --entrypoint=bench dlbench-torch:latest {TAIL}",
    "udocker-runc": "UDOCKER_DEFAULT_EXECUTION_MODE=R1 udocker --allow-root run --name=dlbench-abc --pull=never --nobanner "
                    f"--user=root -v {MOUNT} -w /results --entrypoint=bench dlbench-torch:latest {TAIL}",
    "podman-hpc": f"podman-hpc run --rm --gpu --nccl --mpi -v {MOUNT} -w /results --label dlbench.run=dlbench-abc "
                  f"--entrypoint= dlbench-torch:latest bench {TAIL}",
    "containerd": "ctr --namespace dlbench run --rm --net-host --mount type=bind,src=/dev/shm,dst=/dev/shm,options=rbind:rw "
                  "--mount type=bind,src=/tmp/RESULTS,dst=/results,options=rbind:rw --cwd /results "
                  f"docker.io/library/dlbench-torch:latest dlbench-abc bench {TAIL}",
}


@pytest.fixture()
def no_runtimes(tmp_path, monkeypatch):
    """A machine with none of the runtimes, as root with Apptainer's privileged start, and a $USER."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("USER", "alice")
    for var in ("SHIFTER_IMAGE", "SHIFTER_IMAGETYPE", "SLURM_SPANK_SHIFTER_IMAGE", "SLURM_SPANK_SHIFTER_IMAGETYPE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(singularity, "needs_userns", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def dry_run(name: str) -> str:
    request = dispatch.RunRequest(RunSpec.from_argv(["--model", "resnet50"]), runtime=name, run_id="abc", gpus=name in GPUS,
                                  mpi=name in MPI)
    return dispatch.dry_run_text(request)


@pytest.mark.parametrize("name", list(runtimes.RUNTIMES))
def test_dry_run_command_of_each_runtime_without_it_installed(name, no_runtimes):
    command, *files = dry_run(name).splitlines()
    words = shlex.split(command)
    if words[0].startswith("DLBENCH_RUN_TOKEN="):  # under a launcher: the run's own token
        words[0] = "TOKEN"
    assert shlex.join(words) == DRY_RUNS[name]
    assert "runners.runtimes" not in command  # not benchrun's per-rank wrapper
    assert bool(files) == (name == "cscs-ce")  # the EDF srun's line names, shown as comments


def test_every_runtime_states_its_dry_run_command():
    assert set(DRY_RUNS) == set(runtimes.RUNTIMES)


def test_dry_run_says_on_stderr_which_runtime_is_absent(tmp_path):
    """`benchrun run --dry-run` prints the command a user would type on a machine without the runtime
    (a job prepared here, run elsewhere); a run without --dry-run still refuses in one line."""
    for name, binary in (("enroot", "'enroot'"), ("pyxis", "'srun' (Slurm)"), ("cscs-ce", "'srun' (Slurm)"),
                         ("shifter", "'shifter'")):
        out = benchrun("run", "--runtime", name, "--dry-run", "--", "--model", "resnet50", env={"PATH": str(tmp_path)})
        assert out.returncode == 0, out.stderr
        assert out.stderr == (f"benchrun: note: runtime {name!r} needs {binary}, which is not on PATH; "
                              f"the command is shown, not run\n")
        assert "bench --model resnet50 --output /results/record.jsonl" in out.stdout
    out = benchrun("run", "--runtime", "pyxis", "--launcher", "srun", "--dry-run", "--", "--model", "alexnet",
                   env={"PATH": str(tmp_path)})
    assert out.returncode == 0 and out.stderr.count("\n") == 2 and "launcher 'srun' needs 'srun'" in out.stderr
    out = benchrun("run", "--runtime", "enroot", "--dry-run", "--edf-annotation", "com.hooks.cxi.enabled=true",
                   "--", "--model", "alexnet", env={"PATH": str(tmp_path)})
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "takes no EDF annotations" in out.stderr  # bad input: refused


# ---- the command as named slots ---------------------------------------------------------------

def test_command_slots_are_joined_in_order_and_edited_by_name():
    command = Command(image=["img"], program=["rt"], command=["bench", "-x"], subcommand=["run"])
    assert command.argv() == ["rt", "run", "img", "bench", "-x"]
    command["labels"] = ["--label", "a=b"]  # a runtime's edit names its slot: no argv position
    command["subcommand"] = []
    assert command.argv() == ["rt", "--label", "a=b", "img", "bench", "-x"] and command["gpu"] == []
    with pytest.raises(KeyError, match="no slot 'gpus'"):
        command["gpus"] = ["--gpus", "all"]
    assert SLOTS[0] == "program" and SLOTS[-1] == "command"


def test_runtime_slots_name_what_each_option_is(tmp_path):
    invocation = runtimes.base.Invocation("img:1", ["bench", "-x"], {"RANK": None, "K": "v"},
                                          [runtimes.Mount(str(tmp_path), "/results", readonly=False)], "/results",
                                          gpus=True, name="run-1")
    slots = runtimes.get("docker").slots(invocation)
    assert (slots["name"], slots["gpu"], slots["env"]) == (["--name", "run-1"], ["--gpus", "all"], ["-e", "RANK", "-e", "K=v"])
    assert (slots["entrypoint"], slots["image"], slots["command"]) == (["--entrypoint", "bench"], ["img:1"], ["-x"])
    sarus = runtimes.get("sarus").slots(invocation)  # the host environment passes in; fixed values: `env K=V`
    assert sarus["env"] == [] and sarus["command"] == ["env", "K=v", "bench", "-x"]


# ---- per-run behaviour: the runtime's plan and client ---------------------------------------------

def test_plugin_runtimes_run_through_their_launcher_and_nothing_else(tmp_path):
    for name in runtimes.RUNTIMES:
        runtime = runtimes.get(name)
        request = dispatch.RunRequest(RunSpec.from_argv(["--model", "alexnet"]), runtime=name, launcher="mpirun")
        assert dispatch.launcher_name(request, runtime) == ("srun" if name in ("pyxis", "cscs-ce") else "mpirun")
    request = dispatch.RunRequest(RunSpec.from_argv(["--model", "alexnet"]), runtime="pyxis", launcher="mpirun")
    with pytest.raises(UsageError, match="runtime 'pyxis' runs through srun .*: use --launcher srun or none, not 'mpirun'"):
        dispatch.check(request, installed=False)


def test_clients_say_how_a_rank_is_started_and_stopped():
    spec = runtimes.container.ContainerSpec("docker", "img:1")
    plain, udocker, runc = (runtimes.get(n).client(spec) for n in ("docker", "udocker", "udocker-runc"))
    assert (plain.setup_s, udocker.setup_s, plain.shared) == (0, 120, False)  # udocker creates each container: more grace
    assert plain.exit_code(1, {"status": "ok"}) == 1 and runc.exit_code(1, {"status": "ok"}) == 0
    spec.mpi = True
    assert runtimes.get("podman-hpc").client(spec).shared and not runtimes.get("docker").client(spec).shared


# ---- one registry for every plugin kind ----------------------------------------------------------

@pytest.mark.parametrize("registry, kind, first", [
    (runtimes.RUNTIMES, "runtime", "local"), (launchers.LAUNCHERS, "launcher", "local"),
    (frameworks.BACKENDS, "framework", "torch"),
])
def test_every_registry_refuses_an_unknown_name_naming_the_choices(registry, kind, first):
    with pytest.raises(UsageError) as error:
        registry.load("nope")
    assert str(error.value) == f"unknown {kind} 'nope' (choices: {', '.join(registry)})"
    assert list(registry)[0] == first and registry.check(first) == first


def test_registry_loads_lazily_what_its_table_names():
    table = Registry("thing", {"path": "os.path:join", "missing": "os.path:no_such_name"})
    assert table.load("path") is os.path.join and load_target("os.path:join") is os.path.join
    assert dict(table) == {"path": "os.path:join", "missing": "os.path:no_such_name"} and len(table) == 2
    with pytest.raises(AttributeError):  # a wrong table entry is a bug, not a user's mistake
        table.load("missing")
    assert isinstance(runtimes.get("docker"), runtimes.Runtime) and launchers.get("srun").name == "srun"
