"""`cscs-ce`: the CSCS Container Engine (Alps), a customised Pyxis + Enroot driven by TOML "Environment
Definition Files" (EDF, docs.cscs.ch/software/container-engine/edf): dlbench writes one for the run into
its results directory and starts `srun ... --environment=EDF bench ...` (the EDF: docs/runtimes.md).

`--edf-annotation KEY=VALUE` adds or overrides an annotation; only the hooks CSCS documents are accepted,
as the engine would ignore a typo silently.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from benchmarks.core.errors import UsageError

from .base import Command, Invocation, check_mount
from .pyxis import PyxisRuntime
from .slurm_plugin import SlurmPluginRuntime

# The hooks' annotations CSCS documents (container-engine/resource-hook), with their accepted values.
BOOL = ("true", "false")
KNOWN_ANNOTATIONS: dict[str, tuple[str, ...] | None] = {
    "com.hooks.aws_ofi_nccl.enabled": BOOL,
    "com.hooks.aws_ofi_nccl.variant": ("cuda11", "cuda12", "rocm5", "rocm6"),
    "com.hooks.cxi.enabled": BOOL,
    "com.hooks.nvidia_cuda_mps.enabled": BOOL,
    "com.hooks.ssh.enabled": BOOL,
    "com.hooks.ssh.authorize_ssh_key": None,  # a path
    "com.hooks.ssh.port": None,
}
# With --gpus: NCCL over Slingshot.
GPU_ANNOTATIONS = {"com.hooks.aws_ofi_nccl.enabled": "true", "com.hooks.aws_ofi_nccl.variant": "cuda12"}


def validate_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    for key, value in annotations.items():
        if key not in KNOWN_ANNOTATIONS:
            raise UsageError(f"unknown EDF annotation {key!r} (choices: {', '.join(sorted(KNOWN_ANNOTATIONS))})")
        allowed = KNOWN_ANNOTATIONS[key]
        if allowed is not None and value not in allowed:
            raise UsageError(f"EDF annotation {key}={value!r}: expected one of {', '.join(allowed)}")
        if not value or re.search(r"[\x00-\x1f]", value):
            raise UsageError(f"EDF annotation {key}: empty value or control characters")
    return dict(annotations)


TOML_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", **{code: f"\\u{code:04x}" for code in (*range(0x20), 0x7F)}}


def toml_string(value: str) -> str:
    """A TOML basic string (quotes, backslashes and control characters escaped)."""
    return '"' + value.translate(TOML_ESCAPES) + '"'


def edf_text(image: str, mounts, workdir: str | None, env: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The EDF for one run: image, mounts (data read-only), workdir, no entrypoint, [env], [annotations]."""
    lines = ["# dlbench run environment for the CSCS Container Engine (srun --environment=THIS_FILE)",
             f"image = {toml_string(image)}"]
    specs = [f"{m.source}:{m.target}" + (":ro" if m.readonly else "") for m in (check_mount(m) for m in mounts)]
    lines.append("mounts = [" + ", ".join(toml_string(s) for s in specs) + "]")
    if workdir is not None:
        lines.append(f"workdir = {toml_string(workdir)}")
    lines.append("entrypoint = false")
    if env:
        lines += ["", "[env]"]
        lines += [f"{key} = {toml_string(value)}" for key, value in env.items()]  # plan()'s command() checked the names
    if annotations:
        lines += ["", "[annotations]"]
        lines += [f"{key} = {toml_string(value)}" for key, value in sorted(validate_annotations(annotations).items())]
    return "\n".join(lines) + "\n"


class CscsCeRuntime(SlurmPluginRuntime):
    name = "cscs-ce"
    privilege = "a Slurm plugin running Enroot, unprivileged"
    plugin_option = "--environment"
    plugin_name = "the CSCS Container Engine (its SPANK plugin)"

    def import_image(self, image: str) -> str:
        return PyxisRuntime().import_image(image)  # the same squashfs (CE runs Enroot underneath)

    def check_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        return validate_annotations(annotations)

    def edf_path(self, spec, host_dir: Path) -> Path:
        return host_dir / f"{spec.name or 'dlbench'}.toml"

    def edf(self, spec) -> str:
        fixed = {key: value for key, value in spec.env.items() if value is not None}
        annotations = {**(GPU_ANNOTATIONS if spec.gpus else {}), **spec.annotations}  # validated by edf_text
        return edf_text(spec.image, spec.mounts, spec.workdir, fixed, annotations)

    def srun_options(self, spec, host_dir: Path) -> list[str]:
        return [f"--environment={self.edf_path(spec, host_dir)}"]

    def run_files(self, spec, host_dir: Path) -> dict[Path, str]:
        return {self.edf_path(spec, host_dir): self.edf(spec)}

    def slots(self, run: Invocation) -> Command:
        return Command(command=run.argv)  # the variables are the EDF's [env]
