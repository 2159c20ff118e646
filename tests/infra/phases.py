"""Where the test time goes: a per-phase summary at the end of every pytest run.

Per module, the time spent in setup (fixtures: image builds, runtime installs,
clusters), in the tests themselves, and in teardown; and the slowest fixture
setups by name. It reads pytest's own per-phase durations, so it costs nothing.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

PHASES = ("setup", "call", "teardown")
_by_module: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
_tests: dict[str, int] = defaultdict(int)
_fixtures: dict[str, float] = defaultdict(float)
_started = time.monotonic()


def pytest_sessionstart(session):
    global _started
    _started = time.monotonic()


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::")[0]
    _by_module[module][report.when] += report.duration
    if report.when == "call":
        _tests[module] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = time.monotonic()
    yield
    _fixtures[f"{fixturedef.argname} ({fixturedef.scope})"] += time.monotonic() - start


def _fmt(seconds: float) -> str:
    return f"{seconds:8.1f}s" if seconds < 600 else f"{seconds / 60:7.1f}min"


def pytest_terminal_summary(terminalreporter):
    if not _by_module:
        return
    write = terminalreporter.write_line
    wall = time.monotonic() - _started
    totals = {phase: sum(m[phase] for m in _by_module.values()) for phase in PHASES}
    terminalreporter.section("time per phase (tests/infra/phases.py)")
    write(f"wall {_fmt(wall)}   setup {_fmt(totals['setup'])}   tests {_fmt(totals['call'])}   "
          f"teardown {_fmt(totals['teardown'])}")
    write(f"{'module':44} {'tests':>5} {'setup':>9} {'call':>9} {'teardown':>9} {'total':>9}")
    for module, phases in sorted(_by_module.items(), key=lambda item: -sum(item[1].values())):
        write(f"{module:44} {_tests[module]:5d} {_fmt(phases['setup'])} {_fmt(phases['call'])} "
              f"{_fmt(phases['teardown'])} {_fmt(sum(phases.values()))}")
    slow = [(name, s) for name, s in sorted(_fixtures.items(), key=lambda item: -item[1]) if s >= 1.0][:12]
    if slow:
        write("slowest fixture setups (images, runtimes, clusters are built once per run):")
        for name, seconds in slow:
            write(f"  {name:60} {_fmt(seconds)}")
