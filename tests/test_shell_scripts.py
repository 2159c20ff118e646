"""Our bash scripts run under `set -o pipefail`: a pipe into a reader that stops early (`grep -q`,
`grep -m`, `head`) kills the writer with SIGPIPE when the reader exits first, and the pipeline then
fails at random — CI saw `compose-run.sh` call a listed service "unknown". Such reads take a
here-string or a command's whole output instead."""

import re
import subprocess

from infra.helpers import ROOT

EARLY_EXIT_READER = re.compile(r"\|\s*(grep\s+(-[a-zA-Z]*[qm]|--quiet|--max-count)|head\b)")


def test_no_bash_script_pipes_into_a_reader_that_stops_early():
    scripts = subprocess.run(["git", "ls-files", "*.sh", "*.def"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert "containers/compose-run.sh" in scripts
    found = [f"{name}:{number}: {line.strip()}"
             for name in scripts
             for number, line in enumerate((ROOT / name).read_text().splitlines(), 1)
             if not line.lstrip().startswith("#") and EARLY_EXIT_READER.search(line)]
    assert not found, "\n".join(found)
