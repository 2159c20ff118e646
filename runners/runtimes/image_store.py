"""One image store for every runtime: a Docker image made into a runtime's own copy (a SIF, a squashfs, an
unpacked directory, an image in Podman's, containerd's or udocker's store) once per Docker image id.

Every runtime that converts images does the same five things, here once: it compares the copy's **stamp**
(the Docker image id it was made from) with the image's id; a stale or missing copy is rebuilt under **one
lock** (fcntl), so that a concurrent run waits and then finds the stamp fresh; the build writes a
**partial**, which is **published** only when the build succeeded (a failed or killed build leaves only a
partial, which the next build removes first); then the **replaced copy is removed**, unless another name
still holds it. A runtime states only its build step, and a `Copy`: where its copy lives and how its stamp
is read, its partial removed, its build published and a replaced copy removed (`PathCopy` for a plain file
or directory; an engine's store states its own). docs/runtimes.md, "Image store".
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator


class Copy(ABC):
    """A runtime's copy of one image, where the runtime keeps it: the hooks ImageStore needs. The defaults
    say "nothing to do": an engine that publishes and removes as it loads states only its stamp."""

    lock: Path  # the lock file: beside the copy, or one for a store whose builds must not overlap at all

    @abstractmethod
    def stamp(self) -> str | None:
        """The stamp of the current copy (the Docker image id it was made from); None: no usable copy."""

    def discard(self) -> None:
        """Remove what a build left that was not published (its partial): a failed build's, a killed one's."""

    def publish(self, stamp: str) -> None:
        """Make the finished build the current copy, stamped `stamp`."""

    def remove(self, replaced: str | None) -> None:
        """Remove the copy a published build replaced (`replaced`: its stamp; None: it had none), unless
        another name still holds it."""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive fcntl lock on `path`, whose file goes when the lock is released (a store is left as it
    was found). A waiter that got the lock on a file already removed tries again on the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)  # read-only: another user of the store may lock it too
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            held, named = os.fstat(fd), os.stat(path)
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # another user's file in a sticky directory stays
            path.unlink(missing_ok=True)  # while held: no one locks this file and takes it for the current one
        os.close(fd)


def tmp_lock(name: str) -> Path:
    """A lock file for a store this project does not hold a directory of (an engine's): one per user."""
    return Path(tempfile.gettempdir()) / f"dlbench-{name}-{os.getuid()}.lock"


@dataclass(frozen=True)
class ImageStore:
    """Materialises one copy (the module's docstring): the runtime gives its Copy here, its build step to
    materialise()."""

    copy: Copy

    def materialise(self, stamp: str, build: Callable[[], object]) -> bool:
        """Make the copy current for `stamp`, running `build` (which writes the copy's partial) only where it
        is not; True when it built. The first check takes no lock: a current copy costs one look."""
        if self.copy.stamp() == stamp:
            return False
        with locked(self.copy.lock):
            replaced = self.copy.stamp()
            if replaced == stamp:  # made by the run this one waited for
                return False
            self.copy.discard()  # a killed build's partial
            try:
                build()
                self.copy.publish(stamp)
            except BaseException:  # Ctrl-C too
                self.copy.discard()
                raise
            self.copy.remove(replaced)
        return True


@dataclass(frozen=True)
class EngineCopy(Copy):
    """A copy an engine holds in its own store (Podman's, podman-hpc's, containerd's), stated by the runtime's
    callables: how its stamp is read and, where the engine's own import does not already do it, how a build
    is published, a replaced copy removed (given its stamp), a killed import's leftovers removed."""

    lock: Path
    reads: Callable[[], str | None]
    publishes: Callable[[str], object] = lambda stamp: None
    removes: Callable[[str], object] = lambda replaced: None
    discards: Callable[[], object] = lambda: None

    def stamp(self) -> str | None:
        return self.reads()

    def discard(self) -> None:
        self.discards()

    def publish(self, stamp: str) -> None:
        self.publishes(stamp)

    def remove(self, replaced: str | None) -> None:
        if replaced is not None:
            self.removes(replaced)


def remove_path(path: Path) -> None:
    """A file or a directory, whichever it is, if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class PathCopy(Copy):
    """A copy that is a file (a SIF, a squashfs) or a directory (an unpacked image) at `path`; its stamp a
    file holding the image id: inside a directory's copy, so that the rename publishes both at once, or
    beside a file's. The build writes `partial`; the lock file lies beside the copy."""

    path: Path
    stamp_file: Path

    @property
    def partial(self) -> Path:
        return self.path.with_name(f".{self.path.name}.partial")

    @property
    def replaced(self) -> Path:
        """Where a replaced directory waits for its removal (a directory cannot be renamed over)."""
        return self.path.with_name(f".{self.path.name}.replaced")

    @property
    def lock(self) -> Path:
        return self.path.with_name(f".{self.path.name}.lock")

    def stamp(self) -> str | None:
        try:
            return self.stamp_file.read_text().strip() if self.path.exists() else None
        except OSError:
            return None

    def discard(self) -> None:
        remove_path(self.partial)
        remove_path(self.replaced)  # a build killed between its two renames

    def publish(self, stamp: str) -> None:
        if self.stamp_file.is_relative_to(self.path):
            (self.partial / self.stamp_file.relative_to(self.path)).write_text(stamp + "\n")
        else:
            self.stamp_file.unlink(missing_ok=True)  # no stamp names a copy that is not yet (or no more) this one
        if self.path.is_dir() and not self.path.is_symlink():
            os.rename(self.path, self.replaced)
        os.replace(self.partial, self.path)  # a file's replaced copy goes here
        if not self.stamp_file.is_relative_to(self.path):
            self.stamp_file.write_text(stamp + "\n")

    def remove(self, replaced: str | None) -> None:
        remove_path(self.replaced)
