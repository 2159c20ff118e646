"""`apptainer`: Apptainer, Singularity's Linux Foundation successor; the same command line."""

from __future__ import annotations

from .singularity import SingularityRuntime


class ApptainerRuntime(SingularityRuntime):
    name = "apptainer"
    privilege = "unprivileged (user namespaces), or setuid where the site installs it so"
    binary = "apptainer"
