"""Run one benchmark from the host and get its record back: the one call sweeps,
compare-runtimes and `benchrun run` share.

bench writes its record with `--output` into a results directory (mounted
into the container when there is one) and the record is read back from
there, so the same path works for every runtime and launcher.

Containers compose with launchers in the hybrid model: the launcher starts one
container per rank (`srun [--mpi=...] python -m runners.runtimes SPEC -- bench ...`,
which runs `docker run ... IMAGE` with the rank's variables forwarded and removes
the container afterwards). `container_command()` shows the bare runtime command.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.errors import UsageError

from . import launchers, runtimes
from .launchers.base import wait_group
from .runtimes.container import ContainerSpec, argv_for
from .runtimes.slurm_plugin import LAUNCHER as PLUGIN_LAUNCHER, SlurmPluginRuntime

RESULTS_TARGET = "/results"
IMAGES = {"tensorflow": "dlbench-tensorflow:latest", "tf": "dlbench-tensorflow:latest",
          "torch": "dlbench-torch:latest", "pytorch": "dlbench-torch:latest"}
TIMEOUT_GRACE_S = 60  # bench stops itself at --timeout; the host stops what is left after this


@dataclass
class RunRequest:
    bench_args: list[str]
    runtime: str = "local"
    image: str | None = None  # None: the framework's image (IMAGES), for container runtimes
    launcher: str | None = None  # None: one process, no launcher
    num_workers: int = 1
    num_ps: int = 0
    timeout_s: float | None = None
    launcher_args: list[str] = field(default_factory=list)
    data_dir: str | None = None  # host directory, mounted read-only; bench gets --data-dir
    gpus: bool = False
    mpi: bool = False  # the runtime's MPI hook (sarus/shifter --mpi); not needed for the hybrid model
    edf_annotations: dict[str, str] = field(default_factory=dict)  # cscs-ce's EDF [annotations]
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def container_name(self) -> str:
        return f"dlbench-{self.run_id}"


@dataclass
class Outcome:
    record: dict | None  # None when bench wrote nothing (bad input, or the launch itself failed)
    exit_code: int
    command: list[str]
    interrupted: bool = False  # Ctrl-C/SIGINT reached benchrun: callers running several stop there


def default_image(request: RunRequest) -> str:
    if request.image:
        return request.image
    framework = launchers.bench_option(request.bench_args, "--framework") or os.environ.get("BENCH_FRAMEWORK") or "torch"
    if framework not in IMAGES:
        raise UsageError(f"no default image for --framework {framework!r}: give --image")
    return IMAGES[framework]


def requested_image(request: RunRequest, runtime: runtimes.Runtime) -> str:
    """The image to prepare: the one given, else the runtime's default (Shifter: the job's) for the framework's."""
    return request.image or runtime.default_image(default_image(request))


def container_spec(request: RunRequest, results: Path, image: str | None = None) -> ContainerSpec:
    """What every rank's container gets: the results dir (read-write), the data dir (read-only)."""
    runtime = runtimes.get(request.runtime)
    mounts = [runtimes.Mount(str(results), RESULTS_TARGET, readonly=False)]
    if request.data_dir:
        mounts.append(runtimes.Mount(os.path.abspath(request.data_dir), runtime.data_target(), readonly=True))
    return ContainerSpec(runtime=request.runtime, image=image or requested_image(request, runtime),
                         name=request.container_name, mounts=mounts, workdir=RESULTS_TARGET, gpus=request.gpus,
                         mpi=request.mpi, annotations=dict(request.edf_annotations))


def bench_command(request: RunRequest, results: Path | None = None, image: str | None = None) -> list[str]:
    """How to start bench for this request's runtime: this Python's package for `local`, else the
    per-rank container wrapper around the runtime's command (see container_command)."""
    if request.runtime == "local":
        return [sys.executable, "-m", "benchmarks"]
    if results is None:
        raise ValueError("a container runtime needs the results directory to mount")
    spec = container_spec(request, results, image)
    return [sys.executable, "-m", "runners.runtimes", spec.to_json(), "--", "bench"]


def container_command(request: RunRequest, results: Path, image: str | None = None) -> list[str]:
    """The bare runtime command one rank runs, e.g. `docker run --rm ... --name dlbench-ID ... IMAGE` + `bench`."""
    return argv_for(container_spec(request, results, image), ["bench"], environ={})[0]


def _bench_args(request: RunRequest, record_path: str) -> list[str]:
    args = [*request.bench_args, "--output", record_path]
    if request.data_dir and "--data-dir" not in args:
        inside = request.data_dir if request.runtime == "local" else runtimes.get(request.runtime).data_target()
        args += ["--data-dir", inside]
    if request.timeout_s is not None and "--timeout" not in args:
        args += ["--timeout", str(request.timeout_s)]
    return args


def plugin_parts(request: RunRequest, runtime: SlurmPluginRuntime, results: Path,
                 image: str | None) -> tuple[list[str], list[str]]:
    """A Slurm-plugin runtime's (srun options, program in the container) for the run."""
    spec = container_spec(request, results, image)
    return [*runtime.srun_options(spec, results), *request.launcher_args], runtime.program(spec)


def command(request: RunRequest, results: Path, image: str | None = None) -> list[str]:
    inside = results if request.runtime == "local" else Path(RESULTS_TARGET)
    args = _bench_args(request, str(inside / "record.jsonl"))
    runtime = runtimes.get(request.runtime)
    if isinstance(runtime, SlurmPluginRuntime):  # pyxis, cscs-ce: srun starts the containers
        options, program = plugin_parts(request, runtime, results, image)
        launcher, bench, launcher_args = PLUGIN_LAUNCHER, program, options
    else:
        launcher, bench, launcher_args = request.launcher, bench_command(request, results, image), request.launcher_args
    if launcher is None:
        return [*bench, *args]
    launch = [sys.executable, "-m", "runners", "launch", "--launcher", launcher,
              "-n", str(request.num_workers), "--bench-command", shlex.join(bench)]
    if request.num_ps:
        launch += ["--num-ps", str(request.num_ps)]
    if request.timeout_s is not None:
        launch += ["--timeout", str(request.timeout_s)]
    launch += [f"--launcher-arg={arg}" for arg in launcher_args]
    return [*launch, "--", *args]


def user_command(request: RunRequest, results: Path, image: str | None = None) -> list[str]:
    """What a user would type for this run (--dry-run): the runtime's own command under the launcher's,
    without benchrun's per-rank wrapper (`srun ... shifter --image=... bench ...`)."""
    from .commands.launch import launch_spec

    runtime = runtimes.get(request.runtime)
    inside = results if request.runtime == "local" else Path(RESULTS_TARGET)
    args = _bench_args(request, str(inside / "record.jsonl"))
    if isinstance(runtime, SlurmPluginRuntime):
        launcher_args, bench = plugin_parts(request, runtime, results, image)
        launcher = PLUGIN_LAUNCHER
    else:
        bench = runtime.command(image, ["bench"]) if request.runtime == "local" else container_command(request, results, image)
        launcher, launcher_args = request.launcher, request.launcher_args
    if bench and os.path.isabs(bench[0]) and shutil.which(os.path.basename(bench[0])) == bench[0]:
        bench = [os.path.basename(bench[0]), *bench[1:]]  # `docker`, as typed, when that is the one on PATH
    prefix = [f"{key}={value}" for key, value in runtime.host_env().items()]
    if launcher is None:
        return [*prefix, *bench, *args]
    spec = launch_spec(argparse.Namespace(bench_args=args, num_workers=request.num_workers, num_ps=request.num_ps,
                                          hosts="", timeout=None, bench_command=shlex.join(bench),
                                          launcher_arg=launcher_args))
    return [*prefix, *launchers.get(launcher).command(spec)]


def dry_run_text(request: RunRequest, results: str | None = None) -> str:
    """--dry-run's output: the user's command line, then (as # comments) any file it names that the run
    writes. Nothing is prepared or written: the results directory is shown as `results` (or /tmp/RESULTS)."""
    shown = results or "/tmp/RESULTS"
    with tempfile.TemporaryDirectory(prefix="benchrun-dry-run-") as tmp:  # mounts must exist to be checked
        text = shlex.join(user_command(request, Path(tmp))) + "\n"
        runtime = runtimes.get(request.runtime)
        if isinstance(runtime, SlurmPluginRuntime):
            text += runtime.run_files_text(container_spec(request, Path(tmp)), Path(tmp))
        return text.replace(tmp, shown)


def check(request: RunRequest) -> runtimes.Runtime:
    """Refuse bad input before anything runs (one-line errors)."""
    if request.launcher is not None and request.launcher not in launchers.LAUNCHERS:
        raise UsageError(f"unknown launcher {request.launcher!r}")
    runtime = runtimes.get(request.runtime)
    runtime.require()
    runtime.check_annotations(request.edf_annotations)
    if isinstance(runtime, SlurmPluginRuntime) and request.launcher not in (None, PLUGIN_LAUNCHER):
        raise UsageError(f"runtime {request.runtime!r} runs through srun (a Slurm plugin): "
                         f"use --launcher srun or none, not {request.launcher!r}")
    if request.data_dir is not None:
        if not os.path.isdir(request.data_dir):
            raise UsageError(f"--data-dir {request.data_dir} is not a directory")
        if runtime.runs_as_image_user and not runtimes.base.world_readable(request.data_dir):
            raise UsageError(f"--data-dir {request.data_dir} is not readable by the image's user (uid 1000): "
                             f"make it and its parents world-readable (chmod o+rX)")
    return runtime


def run(request: RunRequest, results_dir: str | Path | None = None, quiet: bool = False) -> Outcome:
    """Run it; the record (if bench wrote one) is returned, not left behind.

    Containers are removed when the run ends, times out (timeout_s + 60 s on the host) or is interrupted."""
    runtime = check(request)
    image = None if request.runtime == "local" else runtime.prepare(requested_image(request, runtime))
    with tempfile.TemporaryDirectory(prefix="benchrun-", dir=results_dir, ignore_cleanup_errors=True) as tmp:
        results = Path(tmp)
        if request.runtime != "local":
            results.chmod(0o777)  # the image's user (uid 1000) writes the record
        if isinstance(runtime, SlurmPluginRuntime):
            runtime.write_run_files(container_spec(request, results, image), results)
        argv = command(request, results, image)
        stream = subprocess.DEVNULL if quiet else None
        env = {**os.environ, **runtime.host_env()}
        interrupted = []

        def on_sigint(signum, frame):
            interrupted.append(signum)
            raise KeyboardInterrupt  # wait_group stops the run (SIGTERM, then SIGKILL) and returns

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            proc = subprocess.Popen(argv, stdout=stream, stderr=stream, env=env, start_new_session=True)
            code = wait_group([proc], None if request.timeout_s is None else request.timeout_s + TIMEOUT_GRACE_S)
        finally:
            signal.signal(signal.SIGINT, previous)
            runtime.remove(request.container_name, prefix=True)  # whatever a killed rank left behind
        record_path = results / "record.jsonl"
        lines = record_path.read_text().splitlines() if record_path.exists() else []
        record = json.loads(lines[-1]) if lines else None
        return Outcome(record, code, argv, interrupted=bool(interrupted))
