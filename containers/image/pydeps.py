"""Print the pip requirements of dlbench for the given groups, one per line.

pyproject.toml stays the single source of the pins: the images install their
dependency layers from it before the source is copied (cache-friendly), and
`make wheelhouse` downloads exactly the same set.

    python3 pydeps.py PYPROJECT GROUP... [--replace NAME=REQUIREMENT]

GROUP: `build` (build-system requires), `core` (project dependencies) or an
extra name (`torch`, `tf`). --replace swaps one pinned requirement for another,
e.g. tensorflow-cpu=tensorflow[and-cuda]==2.21.0 for a GPU TensorFlow image.
"""

import re
import sys
import tomllib


def name_of(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def main(argv: list[str]) -> int:
    args, replace = [], {}
    it = iter(argv)
    for a in it:
        if a == "--replace":
            a = next(it, "")
            name, sep, req = a.partition("=")
            if not sep or not req:
                print(f"pydeps: error: --replace wants NAME=REQUIREMENT, got {a!r}", file=sys.stderr)
                return 2
            replace[name_of(name)] = req
        else:
            args.append(a)
    if len(args) < 2:
        print("usage: pydeps.py PYPROJECT GROUP... [--replace NAME=REQUIREMENT]", file=sys.stderr)
        return 2
    with open(args[0], "rb") as f:
        meta = tomllib.load(f)
    extras = meta["project"].get("optional-dependencies", {})
    groups = {"build": meta["build-system"]["requires"], "core": meta["project"]["dependencies"], **extras}
    out = []
    for g in args[1:]:
        if g not in groups:
            print(f"pydeps: error: unknown group {g!r} (valid: {', '.join(groups)})", file=sys.stderr)
            return 2
        out.extend(groups[g])
    for req in out:
        print(replace.get(name_of(req), req))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
