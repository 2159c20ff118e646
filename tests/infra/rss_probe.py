"""Run a command and write its own peak resident memory and exit status to a file: `rss_probe.py LIMIT_MB
REPORT -- ARGV...`. `measured()` starts commands through this small process because a process forked from
the test process starts with the test process's resident pages counted, and Linux keeps that high-water
mark across execve: a `benchrun` forked from a pytest worker that had imported torch reported the worker's
580 MB. Forked from here, the command's ru_maxrss starts from this probe's ~10 MB."""

import os
import resource
import sys

limit_mb, report, separator, *argv = sys.argv[1:]
assert separator == "--" and argv, sys.argv
pid = os.fork()
if pid == 0:
    try:
        limit = int(limit_mb) << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}\n")
