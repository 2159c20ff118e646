"""`docker`: the Docker CLI. Host network and IPC (ranks talk over loopback, DataLoader shared memory)."""

from __future__ import annotations

from benchmarks.errors import UsageError

from .base import Runtime, run_quiet


class DockerRuntime(Runtime):
    name = "docker"
    binary = "docker"
    subcommand = ("run", "--rm", "--init")
    removes_container = True
    runs_as_image_user = True

    def base_options(self, image: str) -> list[str]:
        return ["--network=host", "--ipc=host"]

    def image_and_command(self, image: str, argv: list[str]) -> list[str]:
        return ["--entrypoint", argv[0], image, *argv[1:]]  # the images' ENTRYPOINT is bench: state it

    def prepare(self, image: str) -> str:
        super().prepare(image)
        self.require()
        if run_quiet([self.executable(), "image", "inspect", image]).returncode != 0:
            raise UsageError(f"image {image!r} not found by {self.name} (build it: make images)")
        return image

    def remove(self, name: str, prefix: bool = False) -> None:
        pattern = f"^/?{name}" + ("" if prefix else "$")
        found = run_quiet([self.executable(), "ps", "-aq", "--filter", f"name={pattern}"]).stdout.split()
        if found:
            run_quiet([self.executable(), "rm", "-f", *found])
