"""ImageStore (runners/runtimes/image_store.py) for each kind of copy a runtime keeps: a file (a SIF, an Enroot
squashfs), a directory (Charliecloud's) and an image in an engine's own store (Podman's, containerd's: a
fake engine here, holding images by id and names pointing at them). No container runs: the builds are
Python functions that write their partial, sleep, then finish it, in child processes where a test kills
one midway or runs two at once (a second at once must wait on the lock, then find the stamp fresh)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from runners.runtimes.image_store import Copy, ImageStore, PathCopy

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("file", "dir", "engine")


@dataclass(frozen=True)
class FakeEngine(Copy):
    """An engine's store: images/ID/ holds an image, names/NAME the id a name runs; an import writes
    images/.importing first, and the publish moves it into place and names it."""

    root: Path
    name: str

    @property
    def lock(self) -> Path:
        return self.root / f".{self.name}.lock"

    @property
    def partial(self) -> Path:
        return self.root / "images" / ".importing"

    def image(self, image_id: str) -> Path:
        return self.root / "images" / image_id

    def names(self) -> dict[str, str]:
        folder = self.root / "names"
        return {p.name: p.read_text() for p in folder.iterdir()} if folder.is_dir() else {}

    def stamp(self) -> str | None:
        held = self.names().get(self.name)
        return held if held is not None and self.image(held).is_dir() else None

    def discard(self) -> None:
        shutil.rmtree(self.partial, ignore_errors=True)

    def publish(self, stamp: str) -> None:
        if not self.image(stamp).is_dir():
            os.rename(self.partial, self.image(stamp))
        (self.root / "names").mkdir(exist_ok=True)
        (self.root / "names" / self.name).write_text(stamp)

    def remove(self, replaced: str | None) -> None:
        if replaced is not None and replaced not in self.names().values():  # kept while another name holds it
            shutil.rmtree(self.image(replaced))


def copy_for(kind: str, root: Path, name: str = "img"):
    if kind == "file":
        return PathCopy(root / f"{name}.sqsh", root / f"{name}.id")
    if kind == "dir":
        return PathCopy(root / name, root / name / "ch" / "image-id")
    return FakeEngine(root, name)


def content(copy) -> str:
    if isinstance(copy, FakeEngine):
        return (copy.image(copy.stamp()) / "content").read_text()
    return (copy.path if copy.path.is_file() else copy.path / "content").read_text()


def build(copy, stamp: str, log: Path, slow: float) -> None:
    """Half a copy, a pause (where a test kills it), the rest; each build leaves a line in `log`. An engine
    that has the image under another name only names it (as the SIFs of one image id are shared)."""
    if isinstance(copy, FakeEngine) and copy.image(stamp).is_dir():
        return
    with open(log, "a") as lines:
        lines.write(f"{stamp} {os.getpid()}\n")
    assert not copy.partial.exists(), "the build found an earlier build's partial"
    if isinstance(copy, PathCopy) and copy.stamp_file.is_relative_to(copy.path):
        (copy.partial / "ch").mkdir(parents=True)
        written = copy.partial / "content"
    elif isinstance(copy, FakeEngine):
        copy.partial.mkdir(parents=True)
        written = copy.partial / "content"
    else:
        written = copy.partial
    written.write_text("half")
    time.sleep(slow)
    written.write_text(stamp)


def child(kind: str, root: str, stamp: str, log: str, slow: float, runs: int) -> None:
    """One of `runs` runs materialising `stamp` (a test's child process), started together once all are
    up: prints whether it built, what it got, and how long it took."""
    ready = Path(log).with_name("ready")
    ready.mkdir(exist_ok=True)
    (ready / str(os.getpid())).touch()
    wait_for(lambda: len(list(ready.iterdir())) >= runs)
    copy, started = copy_for(kind, Path(root)), time.monotonic()
    built = ImageStore(copy).materialise(stamp, lambda: build(copy, stamp, Path(log), slow))
    print(json.dumps({"built": built, "content": content(copy), "took_s": time.monotonic() - started}), flush=True)


def start_child(kind: str, root: Path, stamp: str, log: Path, slow: float, runs: int = 1) -> subprocess.Popen:
    code = (f"from test_image_store import child\n"
            f"child({kind!r}, {str(root)!r}, {stamp!r}, {str(log)!r}, {slow}, {runs})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests")))}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)


def wait_for(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def half_written(copy) -> bool:
    written = copy.partial if copy.partial.is_file() else copy.partial / "content"
    try:
        return written.read_text() == "half"
    except OSError:
        return False


def left(root: Path) -> list[str]:
    """What the store holds (a lock file or partial left would show here)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_build_killed_midway_leaves_a_partial_the_next_build_removes(tmp_path, kind):
    root, log = tmp_path / "store", tmp_path / "builds"
    copy = copy_for(kind, root)
    killed = start_child(kind, root, "sha256:1", log, slow=60)
    try:
        wait_for(lambda: half_written(copy))
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    assert copy.partial.exists() and copy.stamp() is None  # killed midway: a partial, never published
    assert ImageStore(copy).materialise("sha256:1", lambda: build(copy, "sha256:1", log, slow=0))
    assert copy.stamp() == "sha256:1" and content(copy) == "sha256:1" and not copy.partial.exists()
    assert not copy.lock.exists()
    assert len(log.read_text().splitlines()) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_two_runs_at_once_build_once_and_get_the_same_copy(tmp_path, kind):
    root, log = tmp_path / "store", tmp_path / "builds"
    runs = [start_child(kind, root, "sha256:1", log, slow=1.5, runs=2) for _ in range(2)]
    outputs = []
    for run in runs:
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
        outputs.append(json.loads(out))
    outputs.sort(key=lambda o: o["built"])
    assert [o["built"] for o in outputs] == [False, True]
    assert outputs[0]["took_s"] > 1.0  # it waited on the lock for the build, then found the stamp fresh
    assert [o["content"] for o in outputs] == ["sha256:1", "sha256:1"]
    assert len(log.read_text().splitlines()) == 1
    assert not copy_for(kind, root).lock.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_image_id_rebuilds_and_the_replaced_copy_goes(tmp_path, kind):
    root, log = tmp_path / "store", tmp_path / "builds"
    copy = copy_for(kind, root)
    store = ImageStore(copy)
    assert store.materialise("sha256:1", lambda: build(copy, "sha256:1", log, slow=0))
    first = left(root)
    assert not store.materialise("sha256:1", lambda: build(copy, "sha256:1", log, slow=0))  # fresh: no build
    assert store.materialise("sha256:2", lambda: build(copy, "sha256:2", log, slow=0))
    assert copy.stamp() == "sha256:2" and content(copy) == "sha256:2"
    assert left(root) == [p.replace("sha256:1", "sha256:2") for p in first]  # the old copy gone, nothing else left
    assert len(log.read_text().splitlines()) == 2


def test_an_engine_keeps_a_replaced_copy_another_name_holds(tmp_path):
    root, log = tmp_path / "engine", tmp_path / "builds"
    mine, other = copy_for("engine", root, "mine"), copy_for("engine", root, "other")
    for copy in (mine, other):
        ImageStore(copy).materialise("sha256:1", lambda: build(copy, "sha256:1", log, slow=0))
    assert len(log.read_text().splitlines()) == 1  # the second name found the image and only named it
    ImageStore(mine).materialise("sha256:2", lambda: build(mine, "sha256:2", log, slow=0))
    assert mine.image("sha256:1").is_dir() and other.stamp() == "sha256:1"  # still held by the other name
    ImageStore(other).materialise("sha256:2", lambda: build(other, "sha256:2", log, slow=0))
    assert not mine.image("sha256:1").exists()


def build_that_fails(copy) -> None:
    copy.partial.write_text("half")
    raise RuntimeError("the import failed")


def test_a_failed_build_leaves_the_store_as_it_was(tmp_path):
    root, log = tmp_path / "store", tmp_path / "builds"
    copy = copy_for("file", root)
    with pytest.raises(RuntimeError, match="the import failed"):
        ImageStore(copy).materialise("sha256:1", lambda: build_that_fails(copy))
    assert left(root) == []
    ImageStore(copy).materialise("sha256:1", lambda: build(copy, "sha256:1", log, slow=0))
    with pytest.raises(RuntimeError):
        ImageStore(copy).materialise("sha256:2", lambda: build_that_fails(copy))
    assert copy.stamp() == "sha256:1" and content(copy) == "sha256:1"  # the current copy kept
    assert left(root) == ["img.id", "img.sqsh"]


def test_a_directory_replaced_while_killed_between_its_renames_is_removed(tmp_path):
    """A kill after the old directory moved aside and before it went: the next build removes it."""
    root, log = tmp_path / "store", tmp_path / "builds"
    copy = copy_for("dir", root)
    ImageStore(copy).materialise("sha256:1", lambda: build(copy, "sha256:1", log, slow=0))
    os.rename(copy.path, copy.replaced)
    assert copy.stamp() is None
    ImageStore(copy).materialise("sha256:2", lambda: build(copy, "sha256:2", log, slow=0))
    assert left(root) == ["img", "img/ch", "img/ch/image-id", "img/content"]


# ---- the runtimes' own copies, with stand-in tools (no container, no image) -------------------------

FAKE_DOCKER = """#!/usr/bin/env python3
import io, json, os, sys, tarfile
images = json.loads(open(os.environ["FAKE_IMAGES"]).read())  # name -> id
args = sys.argv[1:]
if args[:2] == ["image", "inspect"]:
    if args[-1] not in images:
        sys.exit("Error: No such image: " + args[-1])
    print(images[args[-1]] if "{{.Id}}" in args else 0)
elif args[:2] == ["image", "ls"]:
    print("\\n".join(sorted(set(images.values()))))
elif args[0] == "save":
    files = {"index.json": "{}", "manifest.json": json.dumps([{"RepoTags": [args[-1]]}])}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    (open(args[args.index("-o") + 1], "wb") if "-o" in args else sys.stdout.buffer).write(out.getvalue())
"""
FAKE_APPTAINER = """#!/usr/bin/env python3
import os, sys
open(os.environ["FAKE_LOG"], "a").write("build\\n")
open(sys.argv[-2], "w").write("SIF")
print("INFO: Extracting OCI image...", file=sys.stderr)
"""
FAKE_UDOCKER = """#!/usr/bin/env python3
import json, os, sys, tarfile
state = os.environ["FAKE_LOG"] + ".loaded"
loaded = set(open(state).read().split()) if os.path.exists(state) else set()
args = [a for a in sys.argv[1:] if a != "--allow-root"]
if args[0] == "inspect":
    sys.exit(0 if args[1] in loaded else 1)
if args[0] == "rmi":
    loaded.discard(args[-1])
if args[0] == "load":
    open(os.environ["FAKE_LOG"], "a").write("load\\n")
    if os.environ.get("FAKE_LOAD_FAILS"):
        sys.exit("Error: failed to load image")
    with tarfile.open(args[-1]) as tar:
        names = json.load(tar.extractfile("manifest.json"))[0]["RepoTags"]
    loaded.update(names)
    print("\\n".join(names))
open(state, "w").write(" ".join(loaded))
"""


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """Stand-in docker, apptainer and udocker on PATH; `tag(name, id)` retags an image in the fake Docker."""
    bin_dir, images = tmp_path / "bin", tmp_path / "images.json"
    bin_dir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("apptainer", FAKE_APPTAINER), ("udocker", FAKE_UDOCKER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_IMAGES", str(images))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))

    def tag(name: str, image_id: str) -> None:
        images.write_text(json.dumps({name: image_id}))

    return tag


def tool_calls(tmp_path) -> list[str]:
    log = tmp_path / "log"
    return log.read_text().split() if log.is_file() else []


def test_a_sif_per_image_id_and_the_replaced_one_goes(tmp_path, tools, monkeypatch):
    from runners import runtimes

    store = tmp_path / "sif"
    monkeypatch.setenv("DLBENCH_SIF_DIR", str(store))
    rt = runtimes.get("apptainer")
    tools("dlbench-x:1", "sha256:" + "1" * 64)
    first = rt.import_image("dlbench-x:1")
    assert first == str(store / f"{'1' * 16}.sif") and rt.import_image("dlbench-x:1") == first
    assert tool_calls(tmp_path) == ["build"]  # once per image id
    tools("dlbench-x:1", "sha256:" + "2" * 64)  # rebuilt: the old id no longer tagged
    assert rt.import_image("dlbench-x:1") == str(store / f"{'2' * 16}.sif")
    assert tool_calls(tmp_path) == ["build", "build"]
    assert left(store) == [f"{'2' * 16}.sif", "dlbench-x-1.image"]  # the old SIF, partial, layout, lock: gone


def test_udocker_loads_once_per_image_id_and_a_failed_load_leaves_nothing(tmp_path, tools, monkeypatch):
    from benchmarks.core.errors import UsageError
    from runners import runtimes

    store = tmp_path / "udocker-store"
    monkeypatch.setenv("DLBENCH_UDOCKER_STORE", str(store))
    rt = runtimes.get("udocker")
    tools("dlbench-x:1", "sha256:1")
    assert rt.import_image("dlbench-x:1") == "dlbench-x:1" == rt.import_image("dlbench-x:1")
    assert tool_calls(tmp_path) == ["load"] and left(store) == ["dlbench-x-1.loaded"]  # no tarball, partial, lock
    assert (store / "dlbench-x-1.loaded").read_text() == "sha256:1\ndlbench-x:1\n"
    tools("dlbench-x:1", "sha256:2")
    monkeypatch.setenv("FAKE_LOAD_FAILS", "1")
    with pytest.raises(UsageError, match="udocker load -i dlbench-x:1 failed: Error: failed to load image"):
        rt.import_image("dlbench-x:1")
    assert left(store) == []  # the earlier import went before the load (udocker loads over no name), no stamp
    monkeypatch.delenv("FAKE_LOAD_FAILS")
    assert rt.import_image("dlbench-x:1") == "dlbench-x:1"
    assert (store / "dlbench-x-1.loaded").read_text() == "sha256:2\ndlbench-x:1\n"
