"""`apptainer`: Apptainer, Singularity's Linux Foundation successor; the same command line."""

from __future__ import annotations

from .singularity import SingularityRuntime


class ApptainerRuntime(SingularityRuntime):
    name = "apptainer"
    binary = "apptainer"
