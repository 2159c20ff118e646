"""MkDocs hooks for the documentation site (mkdocs.yml names this file).

- The flag references are generated at build time, never kept by hand: `reference/bench.md` from the
  option table (benchmarks.settings.options: the same table that derives bench's parser), `reference/benchrun.md`
  from each `benchrun` command's own parser (its `--help`, exactly as a user sees it).
- A link from a page to a file of the repository outside docs/ (`../perf/RESULTS.md`) is checked to exist
  and shown as that path, since the site holds only docs/: a moved or deleted file fails the strict build
  like a broken link between pages does.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
log = logging.getLogger("mkdocs.plugins.dlbench")
OUTSIDE = re.compile(r"\[([^\]]+)\]\((\.\./[^)#\s]+)(#[^)\s]*)?\)")


def bench_reference() -> str:
    from benchmarks.settings import options

    lines = ["# `bench` flags", "",
             "Generated from bench's option table (`benchmarks/settings/options.py`), the table its parser is built from: "
             "this list and `bench --help` cannot differ. Defaults shown are those of a run without the "
             "variables an image sets (`BENCH_FRAMEWORK`). What the harder flags mean in depth: "
             "[bench in depth](../bench.md).", ""]
    for group, title in options.GROUPS.items():
        rows = [o for o in options.OPTIONS.values() if o.group == group and options.RUN in o.commands]
        if not rows:
            continue
        lines += [f"## {title[0].upper()}{title[1:]}", "", "| flag | default | what it does |", "|---|---|---|"]
        for option in rows:
            flag = f"`{option.flag}`" + (f" `{option.metavar}`" if option.metavar else "")
            default = "off" if option.type is bool else "none" if option.default is None else f"`{option.default}`"
            text = option.help_text().replace("%%", "%").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {flag} | {default} | {text} |")
        lines.append("")
    comm = [o for o in options.OPTIONS.values() if options.COMM in o.commands and options.RUN not in o.commands]
    lines += ["## `bench comm` only", "", "| flag | default | what it does |", "|---|---|---|"]
    lines += [f"| `{o.flag}` | {'none' if o.default is None else f'`{o.default}`'} | "
              f"{o.help_text().replace('%%', '%').replace('|', chr(92) + '|')} |" for o in comm]
    return "\n".join(lines) + "\n"


def benchrun_reference() -> str:
    from runners import cli

    os.environ.setdefault("COLUMNS", "110")  # argparse wraps at the terminal's width: the page's is fixed
    top = argparse.ArgumentParser(prog="benchrun")
    sub = top.add_subparsers()
    for command in cli.COMMANDS.values():
        command.add_parser(sub)
    lines = ["# `benchrun` commands", "",
             "Generated from each command's own parser: what `benchrun COMMAND --help` prints.", "",
             "```text", cli.parser().format_help().rstrip(), "```", ""]
    for name, parser in sub.choices.items():
        lines += [f"## `benchrun {name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def on_files(files, config):
    for path, render in (("reference/bench.md", bench_reference), ("reference/benchrun.md", benchrun_reference)):
        files.append(File.generated(config, path, content=render()))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = Path(config["docs_dir"]) / page.file.src_uri

    def outside(match: re.Match) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        resolved = Path(os.path.normpath(source.parent / target))  # as written: a symlinked folder stays here
        if resolved.is_relative_to(Path(os.path.normpath(config["docs_dir"]))):
            return match.group(0)  # a page of the site: MkDocs checks it
        if not resolved.exists():
            log.warning("Doc file '%s' links '%s', which is not in the repository", page.file.src_uri, target)
            return match.group(0)
        relative = resolved.relative_to(ROOT)
        return text if text.strip("`") == str(relative) else f"{text} (`{relative}{anchor}`)"

    return OUTSIDE.sub(outside, markdown)
