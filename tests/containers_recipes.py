"""Small readers for Dockerfile.tf/.torch and Singularity.def, shared by the
container tests: just enough to compare what each image promises (entrypoint,
environment, labels). spython parses the Singularity side; its DockerParser
mixes up multi-stage files and ARG defaults, so Dockerfiles are read here.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = {"torch": ROOT / "Dockerfile.torch", "tensorflow": ROOT / "Dockerfile.tf"}
SINGULARITY_DEF = ROOT / "Singularity.def"
# Singularity/Apptainer keep the caller's HOME (and user): the recipe must not pin it.
DOCKER_ONLY_ENV = {"HOME"}


@dataclass
class Stage:
    name: str | None
    parent: str
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | None = None
    user: str | None = None


def instructions(text: str) -> list[tuple[str, str]]:
    out, buf = [], ""
    for line in text.splitlines():
        if re.match(r"\s*#", line) or (not line.strip() and not buf):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        if buf.strip():
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def substitute(value: str, args: dict[str, str]) -> str:
    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return args[name] if name in args else m.group(0)
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, value)


def pairs(rest: str, args: dict[str, str]) -> dict[str, str]:
    out = {}
    for tok in shlex.split(rest, posix=True):
        key, sep, val = tok.partition("=")
        if not sep:
            raise ValueError(f"expected KEY=VALUE, got {tok!r}")
        out[key] = substitute(val, args)
    return out


def parse_dockerfile(text: str) -> dict[str, Stage]:
    """Stages by name (the last one also under key "final"), ENV/LABEL/ENTRYPOINT
    inherited from parent stages, ARG defaults substituted."""
    global_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    cur: Stage | None = None
    for word, rest in instructions(text):
        if word == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            parent, name = m.group(1), m.group(2)
            cur = Stage(name=name, parent=parent)
            if parent in stages:
                p = stages[parent]
                cur.env, cur.labels = dict(p.env), dict(p.labels)
                cur.entrypoint, cur.user = p.entrypoint, p.user
            stages[name or f"_{len(stages)}"] = cur
            stages["final"] = cur
        elif word == "ARG":
            key, sep, val = rest.partition("=")
            scope = global_args if cur is None else cur.args
            scope[key] = val.strip('"') if sep else global_args.get(key, "")
        elif cur is None:
            raise ValueError(f"{word} before FROM")
        elif word == "ENV":
            cur.env.update(pairs(rest, {**cur.args}))
        elif word == "LABEL":
            cur.labels.update(pairs(rest, {**cur.args}))
        elif word == "ENTRYPOINT":
            cur.entrypoint = json.loads(rest)
        elif word == "USER":
            cur.user = rest
    return stages


def def_arguments(text: str) -> dict[str, str]:
    m = re.search(r"^%arguments\s*\n(.*?)(?=^%|\Z)", text, re.M | re.S)
    out = {}
    for line in (m.group(1) if m else "").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, val = line.partition("=")
            out[key.strip()] = val.strip()
    return out


def render_def(text: str, **build_args: str) -> str:
    """What `apptainer build --build-arg K=V` does to {{ K }} before parsing."""
    values = {**def_arguments(text), **build_args}

    def render(template: str) -> str:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", repl, template)

    def repl(m: re.Match) -> str:
        if m.group(1) not in values:
            raise KeyError(f"{{{{ {m.group(1)} }}}} has no value (not in %arguments)")
        return render(values[m.group(1)])  # a default may name other arguments, with their given values
    return render(text)
