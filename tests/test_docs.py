"""The documentation site (issue 46): `mkdocs build --strict` passes on docs/ and fails on a broken
link, anchor or repository path; the flag references it generates name every flag; the hand-written
"bench in depth" names no flag bench does not have."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from benchmarks.settings import options
from infra.helpers import ROOT


@pytest.fixture(scope="module")
def mkdocs_env():
    said = subprocess.run([str(ROOT / "scripts" / "pip-cached.sh"), "target", "mkdocs-material==9.8.2", sys.executable],
                          capture_output=True, text=True, timeout=600)
    assert said.returncode == 0, said.stderr
    path = re.search(r'export PYTHONPATH="([^"$]+)', said.stdout).group(1)
    return {**os.environ, "PYTHONPATH": path, "NO_MKDOCS_2_WARNING": "1"}


def build(where, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(where / "site")],
                          capture_output=True, text=True, cwd=where, env=env, timeout=300)


def copy_of_the_site(tmp_path):
    for name in ("docs", "scripts"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    for name in ("perf", "examples", "benchmarks", "containers"):  # what the pages link outside docs/
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def test_the_site_builds_strictly_and_each_kind_of_broken_link_fails_it(tmp_path, mkdocs_env):
    site = copy_of_the_site(tmp_path)
    done = build(site, mkdocs_env)
    assert done.returncode == 0, done.stderr[-3000:]
    generated = (site / "site" / "reference" / "bench" / "index.html").read_text()
    assert all(f"<code>{o.flag}</code>" in generated for o in options.OPTIONS.values()), "a flag is missing"
    benchrun = (site / "site" / "reference" / "benchrun" / "index.html").read_text()
    assert all(f"benchrun {name}" in benchrun for name in ("info", "run", "compare-runtimes", "export"))
    page = site / "docs" / "comm.md"
    original = page.read_text()
    for broken, said in (("[x](nowhere.md)", "nowhere.md"), ("[x](results.md#no-such-heading)", "no-such-heading"),
                         ("[x](../perf/gone.md)", "perf/gone.md")):
        page.write_text(original + f"\n{broken}\n")
        done = build(site, mkdocs_env)
        assert done.returncode != 0 and said in done.stderr, (broken, done.stderr[-2000:])


def test_bench_in_depth_names_only_flags_bench_has():
    text = (ROOT / "docs" / "bench.md").read_text()
    named = set(re.findall(r"^\| `(--[a-z0-9-]+)", text, re.MULTILINE))
    known = {o.flag for o in options.OPTIONS.values()} | {"--version", "--help"}
    assert named and named <= known, named - known
