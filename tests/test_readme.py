"""The README as a newcomer meets it (issue 46): short, its links resolve, and the commands it marks as
checked run as shown. A block after `<!-- check: output -->` holds `$ command` lines, each followed by
exactly what it prints (a run token shown as TOKEN); the commands run with this checkout's venv first on
PATH, as after `make venv`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from infra.helpers import ROOT

README = (ROOT / "README.md").read_text()
MAX_LINES = 250
CHECKED = re.compile(r"<!-- check: output -->\n```console\n(.*?)```", re.DOTALL)


def checked_commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, the lines it prints) of every checked block."""
    found = []
    for block in CHECKED.findall(text):
        for chunk in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
            command, *shown = chunk.rstrip("\n").split("\n")
            found.append((command, shown))
    return found


def test_the_readme_is_short_and_its_links_resolve():
    assert len(README.splitlines()) < MAX_LINES
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert links and not missing, missing


def test_the_checked_commands_print_what_the_readme_shows():
    commands = checked_commands(README)
    assert len(commands) >= 2, "no checked block found: the marker or the parser broke"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command, shown in commands:
        done = subprocess.run(shlex.split(command), capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        assert done.returncode == 0, (command, done.stderr)
        printed = re.sub(r"DLBENCH_RUN_TOKEN=[0-9a-f]+", "DLBENCH_RUN_TOKEN=TOKEN", done.stdout).rstrip("\n").split("\n")
        assert printed == shown, command


def test_a_changed_output_is_caught():
    block = "<!-- check: output -->\n```console\n$ echo one\ntwo\n```\n"
    assert checked_commands(block) == [("echo one", ["two"])]
