"""Run one benchmark from the host and get its record back: the one call sweeps, compare-runtimes and
`benchrun run` share.

bench writes its record with `--output` into a results directory (mounted into the container when there
is one) and the record is read back from there, so the same path works for every runtime and launcher.
The runtime name is resolved once into a Runtime, whose plan for the run (Runtime.plan) says how a rank
starts bench there; with a launcher, the launcher runs in this process. Containers compose with launchers
in the hybrid model: one container per rank (docs/runtimes.md, "Launchers × runtimes").
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.core import framework_specs
from benchmarks.core.errors import EXIT_CODE_BY_STATUS, EXIT_ENVIRONMENT, EXIT_INTERRUPTED, UsageError
from benchmarks.core.processes import STOP_GRACE_S, host_deadline, interrupting, stop_process_group
from benchmarks.results.provenance import REQUESTED_RUNTIME_ENV, RUNTIME_VERSION_ENV
from benchmarks.runspec import RunSpec
from benchmarks.settings.options import FASHION_MNIST_DIR, FASHION_MNIST_PACKAGE, OPTIONS

from . import faults, launchers, runtimes
from .launchers.base import wait_ranks
from .runtimes.base import RunPlan
from .runtimes.container import ContainerSpec


def new_run_id() -> str:
    """A run's id on the host: names its containers (dlbench-ID), so each run, each round, gets a fresh one."""
    return uuid.uuid4().hex[:12]


@dataclass
class RunRequest:
    spec: RunSpec  # what bench is asked; benchrun sets --output, --timeout, --num-ps and the mounted paths
    runtime: str = runtimes.DEFAULT
    image: str | None = None  # None: the framework's image (its FrameworkSpec's), for container runtimes
    launcher: str | None = None  # None: one process, no launcher
    num_workers: int = 1
    num_ps: int = 0
    timeout_s: float | None = None
    launcher_args: list[str] = field(default_factory=list)
    data_dir: str | None = None  # host directory, mounted read-only; bench gets --data-dir
    gpus: bool = False
    mpi: bool = False  # the runtime's MPI hook (sarus/shifter --mpi); not needed for the hybrid model
    edf_annotations: dict[str, str] = field(default_factory=dict)  # cscs-ce's EDF [annotations]
    env: dict[str, str] = field(default_factory=dict)  # benchrun's own variables for every rank (DLBENCH_COMPARISON)
    container_options: list[str] = field(default_factory=list)  # --container-option for this runtime
    run_id: str = field(default_factory=new_run_id)

    @property
    def container_name(self) -> str:
        return f"dlbench-{self.run_id}"

    def to_json(self) -> dict:
        """As a sweep hands it to its point's process (runners.pointrun)."""
        return {**dataclasses.asdict(self), "spec": self.spec.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> RunRequest:
        return cls(**{**data, "spec": RunSpec.from_json(data["spec"])})


@dataclass
class Outcome:
    record: dict | None  # None when bench wrote nothing (bad input, or the launch itself failed)
    exit_code: int
    command: list[str]
    interrupted: bool = False  # Ctrl-C (or a SIGTERM) reached benchrun: callers running several stop there
    fault: str | None = None  # the environment ended the run (runners.faults): the one-line reason


def default_image(request: RunRequest) -> str:
    """The image of the request's framework (--image left out)."""
    framework = request.spec.framework or os.environ.get("BENCH_FRAMEWORK") or "torch"
    try:
        return framework_specs.spec_of(framework).image
    except KeyError:
        raise UsageError(f"no default image for --framework {framework!r}: give --image") from None


def requested_image(request: RunRequest, runtime: runtimes.Runtime) -> str:
    """The image to prepare: the one given, else the runtime's default (Shifter: the job's) for the framework's."""
    return request.image or runtime.default_image(default_image(request))


def read_only_inputs(request: RunRequest, runtime: runtimes.Runtime) -> dict[str, str]:
    """bench's option -> the host directory mounted read-only for it: --data-dir, or, for a time-to-accuracy
    run in an image, the host's Fashion-MNIST: a directory given, or Debian's where the host has it (the
    images carry Debian's package too: without the host's, bench reads the image's own)."""
    if request.data_dir:
        return {"data_dir": os.path.abspath(request.data_dir)}
    asked = request.spec
    if runtime.uses_image and asked.target_accuracy is not None and not asked.data_dir:
        host = os.path.abspath(asked.fashion_mnist_dir)
        if asked.fashion_mnist_dir != FASHION_MNIST_DIR or os.path.isdir(host):
            return {"fashion_mnist_dir": host}
    return {}


def container_spec(request: RunRequest, runtime: runtimes.Runtime, results: Path, image: str | None) -> ContainerSpec:
    """What every rank's container gets: the results dir (read-write), the data (read-only)."""
    mounts = [runtimes.Mount(str(results), runtime.results_dir(str(results)), readonly=False)]
    mounts += [runtimes.Mount(host, runtime.data_dir(host), readonly=True)
               for host in read_only_inputs(request, runtime).values()]
    if image is None and runtime.uses_image:
        image = requested_image(request, runtime)
    return ContainerSpec(runtime=runtime.name, image=image or "", name=request.container_name,
                         mounts=mounts, workdir=runtime.results_dir(str(results)), gpus=request.gpus, mpi=request.mpi,
                         annotations=dict(request.edf_annotations), options=list(request.container_options))


def stop_grace_s(runtime: runtimes.Runtime, client) -> float:
    """SIGTERM to SIGKILL for a stopped run's process 0: bench stopping its worker and writing its record,
    or in a container the rank wrapper's wait for its client (udocker removes its container in it) and
    then the wrapper's own clean-up: longer than the wrapper's wait, or its clean-up is cut short."""
    return client.stop_grace_s + STOP_GRACE_S if runtime.uses_image else 2 * STOP_GRACE_S


def request_stop_grace_s(request: RunRequest) -> float:
    """stop_grace_s of a request not yet planned (a sweep's point process, before it runs it)."""
    runtime = runtimes.get(request.runtime)
    return stop_grace_s(runtime, runtime.client(container_spec(request, runtime, Path(tempfile.gettempdir()), "")))


def container_command(request: RunRequest, results: Path, image: str | None = None) -> list[str]:
    """The bare runtime command one rank runs, e.g. `docker run --rm ... --name dlbench-ID ... IMAGE` + `bench`."""
    runtime = runtimes.get(request.runtime)
    return container_spec(request, runtime, results, image).command(runtime, ["bench"], environ={})[0]


def bench_spec(request: RunRequest, runtime: runtimes.Runtime, results: Path) -> RunSpec:
    """What each rank's bench is asked: the request's, writing its record into the results directory as the
    runtime sees it, reading the mounted data paths (the launch adds --timeout and --num-ps)."""
    mounted = {name: runtime.data_dir(host) for name, host in read_only_inputs(request, runtime).items()}
    return request.spec.replace(output=str(Path(runtime.results_dir(str(results))) / "record.jsonl"), **mounted)


def launcher_name(request: RunRequest, runtime: runtimes.Runtime) -> str | None:
    """The launcher that runs the request: a launcher's plugin (pyxis, cscs-ce: srun's) runs through that launcher."""
    return runtime.launcher or request.launcher


def planned(request: RunRequest, runtime: runtimes.Runtime, results: Path,
            image: str | None) -> tuple[RunPlan, launchers.LaunchSpec]:
    """The runtime's plan for the request, and its ranks: bench as the runtime starts it, its arguments,
    the options the runtime puts on the launcher's line, the runtime's host variables, and the runtime's
    name and version, which every rank's record keeps (provenance.requested_runtime, runtime_version)."""
    plan = runtime.plan(container_spec(request, runtime, results, image), results)
    version = runtime.version()
    return plan, launchers.launch_spec(plan.bench, bench_spec(request, runtime, results), request.num_workers,
                                       request.num_ps, request.timeout_s,
                                       extra=[*plan.launcher_options, *request.launcher_args],
                                       env={**runtime.host_env(), REQUESTED_RUNTIME_ENV: runtime.name,
                                            **({RUNTIME_VERSION_ENV: version} if version else {}), **request.env})


def user_command(request: RunRequest, runtime: runtimes.Runtime, plan: RunPlan, spec: launchers.LaunchSpec) -> list[str]:
    """What a user would type for this run (--dry-run): the runtime's own command under the launcher's,
    without benchrun's per-rank wrapper (`srun ... shifter --image=... bench ...`)."""
    spec = dataclasses.replace(spec, bench=plan.typed)
    prefix = [f"{key}={value}" for key, value in runtime.host_env().items()]
    launcher = launcher_name(request, runtime)
    if launcher is None:
        return [*prefix, *spec.bench, *spec.run.to_argv()]
    return [*prefix, *launchers.get(launcher).typed(spec)]


def dry_run_text(request: RunRequest, results: str | None = None, scratch: str | None = None) -> str:
    """--dry-run's output: the user's command line, then (as # comments) any file it names that the run
    writes. Nothing is prepared or written: the results directory is shown as `results` (or /tmp/RESULTS).
    `scratch`: an empty directory to plan in (a sweep checks thousands of points with one), else a new one."""
    if scratch is None:
        with tempfile.TemporaryDirectory(prefix="benchrun-dry-run-") as tmp:  # mounts must exist to be checked
            return dry_run_text(request, results, tmp)
    runtime = runtimes.get(request.runtime)
    plan, spec = planned(request, runtime, Path(scratch), None)
    text = shlex.join(user_command(request, runtime, plan, spec)) + "\n"
    for path, content in plan.files.items():
        text += f"# {path}:\n" + "".join(f"# {line}\n" for line in content.splitlines())
    return text.replace(scratch, results or "/tmp/RESULTS")


def components(request: RunRequest) -> list:
    """The request's launcher (if any) and runtime, resolved (an unknown name: one line naming the choices)."""
    return [*([launchers.get(request.launcher)] if request.launcher is not None else []), runtimes.get(request.runtime)]


def check(request: RunRequest, installed: bool = True) -> runtimes.Runtime:
    """Refuse bad input before anything runs (one-line errors); the request's runtime, resolved once.
    `installed=False` (a dry run) leaves out whether the runtime and launcher are installed here: missing()."""
    request.spec.check()  # bench's own option and strategy rules: refused here, before an image is prepared
    *_, runtime = parts = components(request)
    for part in parts if installed else ():
        part.require()
    runtime.check_annotations(request.edf_annotations)
    if request.container_options:
        runtime.container_options(request.container_options)  # refused where the runtime takes none (local)
    if runtime.launcher not in (None, request.launcher) and request.launcher is not None:
        raise UsageError(f"runtime {request.runtime!r} runs through {runtime.launcher} (a Slurm plugin): "
                         f"use --launcher {runtime.launcher} or none, not {request.launcher!r}")
    for name, host in read_only_inputs(request, runtime).items():
        flag = OPTIONS[name].flag
        if not os.path.isdir(host):
            hint = "" if name == "data_dir" else \
                " (leave it out: the image's own Fashion-MNIST, or the host's from Debian's " \
                f"{FASHION_MNIST_PACKAGE} where installed; or give --data-dir)"
            raise UsageError(f"{flag} {host} is not a directory{hint}")
        if runtime.runs_as_image_user and not runtimes.base.world_readable(host):
            raise UsageError(f"{flag} {host} is not readable by the image's user (uid 1000): "
                             f"make it and its parents world-readable (chmod o+rX)")
    return runtime


def missing(request: RunRequest) -> list[str]:
    """Why the launcher and runtime could not run here (one line each; none: they could). A dry run says
    so and still shows the command, so that a job can be prepared on a machine without them."""
    said = []
    for part in components(request):
        try:
            part.require()
        except UsageError as error:
            said.append(str(error))
    return said


FRAMEWORK_LABEL = "io.dlbench.framework"  # the frameworks an image holds, comma-separated (Dockerfiles)


def check_image_framework(request: RunRequest, runtime: runtimes.Runtime, image: str) -> None:
    """Refuse a --framework the prepared image does not hold (a SIF of the other framework's image)."""
    wanted = request.spec.framework
    held = runtime.image_labels(image).get(FRAMEWORK_LABEL)
    if not wanted or not held:
        return
    from benchmarks.settings.config import resolve_framework

    framework = resolve_framework(wanted)
    if framework not in held.split(","):
        raise UsageError(f"image {image} holds {held} ({FRAMEWORK_LABEL}), not --framework {wanted}: "
                         f"give an image of {framework} (--image), or --framework {held.split(',')[0]}")


def prepare(request: RunRequest, runtime: runtimes.Runtime) -> str | None:
    """The image as the runtime will run it (imported/converted once, cached); None without an image."""
    if not runtime.uses_image:
        return None
    image = runtime.prepare(requested_image(request, runtime))
    check_image_framework(request, runtime, image)
    return image


def run(request: RunRequest) -> Outcome:
    """Run it; the record (if bench wrote one) is returned, not left behind.

    The launcher runs in this process; containers are removed when the run ends, times out
    (benchmarks.core.processes.host_deadline) or is interrupted. A run that fails because its environment
    did (the container daemon went away, a node failed) gets a record saying so (runners.faults)."""
    from benchmarks.results.record import utc_now

    runtime = check(request)
    started_utc, t0 = utc_now(), time.monotonic()
    fault = runtime.fault()
    if fault is not None:  # the daemon is gone before the run: recorded like a run it ended (sweeps go on)
        return Outcome(faults.host_record(request, launcher_name(request, runtime), fault, EXIT_ENVIRONMENT,
                                          started_utc, 0.0, []), EXIT_ENVIRONMENT, [], fault=fault)
    image = prepare(request, runtime)
    with tempfile.TemporaryDirectory(prefix="benchrun-", ignore_cleanup_errors=True) as tmp:
        results = Path(tmp)
        if runtime.runs_as_image_user:
            results.chmod(0o777)  # the image's user (uid 1000) writes the record
        plan, spec = planned(request, runtime, results, image)
        for path, content in plan.files.items():
            path.write_text(content)
        client = runtime.client(container_spec(request, runtime, results, image))
        deadline = host_deadline(request.timeout_s)
        if deadline is not None:
            deadline += client.setup_s
        spec.stop_grace_s = stop_grace_s(runtime, client)
        # Ctrl-C, and every other ending signal nobody above us handles (scancel, a job's time limit, `kill`, a
        # hang-up, Slurm's warning: processes.ENDING_SIGNALS): the run is stopped now (wait_ranks: SIGTERM, then
        # SIGKILL), its record says 'interrupted' and its containers go (a sweep's point process has its own).
        stop = interrupting()
        launcher, proc = None, None
        try:
            if launcher_name(request, runtime) is None:
                argv = [*spec.bench, *spec.run.to_argv()]
                proc = subprocess.Popen(argv, env={**os.environ, **spec.env}, start_new_session=True)
                code, _ = wait_ranks([proc], deadline, spec.stop_grace_s)
            else:
                launcher = launchers.get(launcher_name(request, runtime))
                argv = launcher.command(spec)
                code = launcher.run(spec, timeout_s=deadline)
        finally:
            stop.restore()
            if proc is not None and proc.poll() is None:  # a stop raised between its start and the wait for it
                stop_process_group(proc, spec.stop_grace_s)
            runtime.clean_up(request.container_name, prefix=True)  # whatever a killed rank left behind
        record_path = results / "record.jsonl"
        lines = record_path.read_text().splitlines() if record_path.exists() else []
        record = json.loads(lines[-1]) if lines else None
        code = client.exit_code(code, record)  # udocker-runc loses bench's exit code: the record's
        fault = None
        if code != 0 and not stop.received and (record is None or record["status"] != "ok"):
            # (a dockerd being stopped closes its API before it stops its containers: asked at once)
            fault = runtime.fault() or (launcher.fault() if launcher is not None else None)
        if fault is not None:
            record = faults.blame(record, fault, code) if record is not None else faults.host_record(
                request, launcher_name(request, runtime), fault, code, started_utc, round(time.monotonic() - t0, 3), argv,
                spec.run_token if launcher is not None else None)
        unfinished = record is not None and record["status"] != "ok"
        if stop.received and (code != 0 or unfinished):
            # whatever the rank's program died of (an exec'd runtime: SIGTERM, 143), or the launcher's own sum of its
            # ranks' codes (MPICH's Hydra: 0 or 130, by which rank ended first; a stopped rank but 0 exits 0): interrupted
            code = EXIT_INTERRUPTED
        elif unfinished:
            code = EXIT_CODE_BY_STATUS.get(record["status"], code)  # horovodrun and mpirun say 1 for any rank's end
        return Outcome(record, code, argv, interrupted=bool(stop.received), fault=fault)

