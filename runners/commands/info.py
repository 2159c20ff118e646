"""`benchrun info`: what this machine can run, in one table, and the one line that installs what is
missing (the user's text is DESCRIPTION).

Every fact is read, never assumed: a runtime or launcher is found on PATH as `benchrun run` would
find it (Runtime.available, Launcher.available), a framework where bench would import it from
(framework_specs' modules, found without importing them), an image by asking Docker for its labels,
a GPU through NVML, Fashion-MNIST by its four files (labelled.check_fashion_mnist). Install lines name
our own scripts where we have them (each runtime's and launcher's `install_hint`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass

from benchmarks.core import framework_specs
from benchmarks.core.errors import UsageError
from benchmarks.settings.options import FASHION_MNIST_DIR

from .. import launchers, runtimes
from ..runtimes.base import run_quiet

DESCRIPTION = """\
What this machine can run: each container runtime and launcher found (version, how it runs
unprivileged), the frameworks in this Python and in the built images, GPUs and data sets, and for
each thing missing the one line that installs it.

    benchrun info
    benchrun info --json      one JSON object per row, for scripts: kind (runtime, launcher,
                              framework, image, gpu, data), name, found (true/false), detail
                              (version and facts, or why not), install (the line, when missing)

Exit code 0 whatever is missing: the table is the answer.
"""
HORIZON_S = 20  # a runtime or daemon that does not answer a version or label query in this is reported as not answering
HOROVOD_IMAGES = ("dlbench-horovod-openmpi:latest", "dlbench-horovod-mpich:latest")
VERSION = re.compile(r"\b\d+\.\d+")
SITE_INSTALLED = "installed by the site (docs/runtimes.md names what each needs)"


@dataclass(frozen=True)
class Row:
    kind: str  # runtime, launcher, framework, image, gpu, data
    name: str
    found: bool
    detail: str  # version and facts when found; why not when missing
    install: str = ""  # the one line that installs it, when missing


def runtime_rows() -> list[Row]:
    rows = []
    for name in runtimes.RUNTIMES:
        runtime = runtimes.get(name)
        if not runtime.uses_image:  # the host itself: nothing to find
            continue
        try:
            runtime.require()  # its own reason when it cannot run here (no binary, no Slurm plugin, ...)
            found, facts = True, [runtime.version() or "its --version answers nothing", runtime.privilege]
        except UsageError as missing:
            found, facts = False, [str(missing)]
        facts += [f"legacy: {runtime.legacy}"] if runtime.legacy else []
        rows.append(Row("runtime", name, found, "; ".join(filter(None, facts)),
                        "" if found else runtime.install_hint or SITE_INSTALLED))
    return rows


def launcher_rows() -> list[Row]:
    rows = []
    for name in launchers.LAUNCHERS:
        launcher = launchers.get(name)
        if launcher.binary is None:
            continue
        found = launcher.available()
        detail = version_line([launcher.executable(), "--version"]) if found else f"{launcher.binary} not on PATH"
        rows.append(Row("launcher", name, found, detail, "" if found else launcher.install_hint))
    return rows


def framework_rows() -> list[Row]:
    rows, distributions = [], importlib.metadata.packages_distributions()
    for spec in framework_specs.FRAMEWORKS.values():
        missing = [m for m in spec.modules if importlib.util.find_spec(m) is None]
        versions = ", ".join(f"{m} {_version(m, distributions)}" for m in spec.modules if m not in missing)
        rows.append(Row("framework", f"{spec.name} (this Python)", not missing,
                        versions or f"{', '.join(missing)} not importable",
                        "" if not missing else "make venv (the project's venv has every framework), then .venv/bin/benchrun"))
    return rows


def image_rows() -> list[Row]:
    docker = runtimes.get("docker")
    images = [spec.image for spec in framework_specs.FRAMEWORKS.values()] + list(HOROVOD_IMAGES)
    targets = {image: "make images" for image in images} | {image: "make images-horovod" for image in HOROVOD_IMAGES}
    if not docker.available():
        return [Row("image", image, False, "no docker client to ask", targets[image]) for image in images]
    rows = []
    for image in images:
        labels = docker.image_labels(image)
        if not labels:
            rows.append(Row("image", image, False, "not in Docker's store (or the daemon does not answer)", targets[image]))
            continue
        versions = [f"{key.split('.')[-2]} {value}" for key, value in sorted(labels.items())
                    if key.startswith("io.dlbench.") and key.endswith(".version")]
        built = labels.get("org.opencontainers.image.revision", "unknown")[:12]
        rows.append(Row("image", image, True, f"{', '.join(versions) or 'no version labels'}; built from {built}"))
    return rows


def gpu_rows() -> list[Row]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - any NVML failure means no GPU this tool can use: say which
        reason = str(error) or type(error).__name__
        return [Row("gpu", "NVIDIA", False, f"none visible (NVML: {reason[:120]})", "a GPU node, its driver and the NVIDIA "
                    "container toolkit (docs/gpu.md)")]
    try:
        count = pynvml.nvmlDeviceGetCount()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        driver = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return [Row("gpu", f"{i}", True, f"{_text(name)}; driver {_text(driver)}") for i, name in enumerate(names)] or [
        Row("gpu", "NVIDIA", False, "NVML answers but counts no GPU", "")]


def data_rows() -> list[Row]:
    from benchmarks.data.labelled import check_fashion_mnist

    try:
        found = check_fashion_mnist(FASHION_MNIST_DIR)
    except UsageError:
        return [Row("data", "fashion-mnist", False, f"not at {FASHION_MNIST_DIR}", "apt-get install dataset-fashion-mnist "
                    "(the images carry it already)")]
    return [Row("data", "fashion-mnist", True, f"{found} (--target-accuracy's default data)")]


def version_line(argv: list[str]) -> str:
    """The first line of `argv`'s answer that holds a version number (MPICH's is the second; srun without a
    Slurm configuration answers with why, which is then what the row says)."""
    try:
        said = run_quiet(argv, timeout=HORIZON_S)
    except subprocess.TimeoutExpired:
        return f"does not answer within {HORIZON_S} s"
    except OSError as error:
        return f"cannot be started ({error.strerror or error})"
    text = said.stdout + "\n" + said.stderr
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    versioned = next((line for line in lines if VERSION.search(line)), None)
    if said.returncode == 0 and versioned:
        return versioned[:120]
    if "usage:" in text:  # torchrun: no --version, its version is torch's
        return "found; it has no --version"
    return f"answers: {lines[0][:120]}" if lines else "its --version answers nothing"


def _version(module: str, distributions: dict[str, list[str]]) -> str:
    for name in [module, *distributions.get(module, [])]:  # tensorflow's module comes from tensorflow-cpu here
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "(version unknown)"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def rows() -> list[Row]:
    return runtime_rows() + launcher_rows() + framework_rows() + image_rows() + gpu_rows() + data_rows()


def table(found: list[Row]) -> str:
    width = {field: max(len(getattr(row, field)) for row in found) for field in ("kind", "name")}
    lines = [f"{'':{width['kind']}}  {'':{width['name']}}  found  detail, or what to run"]
    for row in found:
        mark = "yes" if row.found else "no "
        said = row.found or not row.install or row.install in row.detail  # a runtime's reason may name it already
        text = row.detail if said else f"{row.detail}; to install: {row.install}"
        lines.append(f"{row.kind:{width['kind']}}  {row.name:{width['name']}}  {mark}    {text}")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="what this machine can run, and how to install what is missing", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON object per row instead of the table")
    p.set_defaults(run=run)


def run(args) -> int:
    found = rows()
    print("\n".join(json.dumps(asdict(row)) for row in found) if args.json else table(found))
    if not args.json:
        user = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
        print(f"\nas {user}; runtimes and launchers as found on PATH" + ("" if shutil.which("bench") else
              "; bench itself is not on it (.venv/bin/bench after `make venv`, or in an image)"))
    return 0
