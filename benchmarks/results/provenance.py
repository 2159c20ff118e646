"""Where a number came from: host, software and container, detected from inside.

Detection reads only markers the runtimes themselves create, so a record says
what it ran under even when nobody told it.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Callable, Mapping

CONTAINER_RUNTIMES = ("docker", "podman", "singularity", "apptainer", "shifter", "charliecloud", "udocker", "containerd",
                      "none")
COMPARISON_ENV = "DLBENCH_COMPARISON"  # set by benchrun compare-runtimes: this run's round and position (JSON)
REQUESTED_RUNTIME_ENV = "DLBENCH_RUNTIME"  # set by benchrun for every rank: the --runtime it was asked for
RUNTIME_VERSION_ENV = "DLBENCH_RUNTIME_VERSION"  # set by benchrun beside it: that runtime's version line


def root_mount() -> str:
    """The options of the mount at / (who made the root file system: an overlay's layers), "" if unknown."""
    import psutil  # lazily: bench --help stays light

    try:
        roots = [mount.opts for mount in psutil.disk_partitions(all=True) if mount.mountpoint == "/"]
    except OSError:
        return ""
    return roots[-1] if roots else ""  # the last one mounted there is the one seen


def detect_container_runtime(
    env: Mapping[str, str] = os.environ, exists: Callable[[str], bool] = os.path.exists,
    root: Callable[[], str] = root_mount,
) -> str:
    """The container runtime this process runs under, or "none", from the markers each runtime itself
    sets (docs/results.md, `container_runtime`). Apptainer also sets Singularity's, so it is asked first."""
    if env.get("CH_RUNNING"):
        return "charliecloud"
    if env.get("APPTAINER_CONTAINER") or env.get("APPTAINER_NAME"):
        return "apptainer"
    if env.get("SINGULARITY_CONTAINER") or env.get("SINGULARITY_NAME") or exists("/.singularity.d"):
        return "singularity"
    if env.get("SHIFTER_RUNTIME"):
        return "shifter"
    if env.get("container_uuid") and env.get("container_execmode"):
        return "udocker"
    if exists("/run/.containerenv") or env.get("container") == "podman":
        return "podman"
    if exists("/.dockerenv"):
        return "docker"
    if "/io.containerd.snapshotter." in root():
        return "containerd"
    return "none"


def cpu_model(cpuinfo: str | None = None) -> str:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or platform.machine()
    for line in cpuinfo.splitlines():
        if line.lower().startswith(("model name", "cpu model", "hardware")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def host_provenance() -> dict:
    from .. import __version__

    return {
        "dlbench_version": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}",
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable_cores(),
        "container_runtime": detect_container_runtime(),
        "requested_runtime": os.environ.get(REQUESTED_RUNTIME_ENV) or None,
        "runtime_version": os.environ.get(RUNTIME_VERSION_ENV) or None,
        "image": os.environ.get("BENCH_IMAGE") or None,
    }


def comparison(env: Mapping[str, str] = os.environ, warn: Callable[[str], None] | None = None) -> dict | None:
    """The record's `comparison`: $DLBENCH_COMPARISON as `benchrun compare-runtimes` sets it, a JSON object
    {id, seed, round, position, order}; None when unset. A malformed value is ignored with one warning line
    (`warn`): the run is still a run, only not placed in its comparison."""
    text = env.get(COMPARISON_ENV)
    if not text:
        return None
    import json

    from pydantic import ValidationError  # lazily: bench --help stays light

    from .pathrecord import ComparisonInfo

    try:
        value = ComparisonInfo.model_validate(json.loads(text)).model_dump()
        if value["round"] < 1 or not 1 <= value["position"] <= len(value["order"]):
            raise ValueError(f"round {value['round']}, position {value['position']} of {len(value['order'])} runtimes")
    except (ValueError, ValidationError) as error:
        if warn is not None:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            warn(f"{COMPARISON_ENV} is ignored, not a comparison's {{id, seed, round, position, order}}: "
                 f"{reason[:200]}")
        return None
    return value
