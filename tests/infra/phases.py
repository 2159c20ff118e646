"""Where the test time goes: a per-phase summary at the end of every pytest run.

Per module, the time spent in setup (fixtures: image builds, runtime installs,
clusters), in the tests themselves, and in teardown; per pytest-xdist worker,
how long it was busy (are the workers balanced?); the slowest tests; and the
slowest fixture setups by name. It reads pytest's own per-phase durations, so it costs nothing.
Fixture times are measured where the fixture runs (a worker) and travel to the
summary in the test report's user_properties.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

PHASES = ("setup", "call", "teardown")
_by_module: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
_tests: dict[str, int] = defaultdict(int)
_fixtures: dict[str, float] = defaultdict(float)
_workers: dict[str, float] = defaultdict(float)
_calls: dict[str, float] = {}  # test id -> its call phase
_pending: list[tuple[str, float]] = []  # fixtures set up for the test being set up (in this process)
_started = time.monotonic()
FIXTURE = "phases.fixture_setup_s"


def pytest_sessionstart(session):
    global _started
    _started = time.monotonic()


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::")[0]
    _by_module[module][report.when] += report.duration
    node = getattr(report, "node", None)  # the xdist worker that ran it (None without xdist)
    _workers[getattr(getattr(node, "gateway", None), "id", "main")] += report.duration
    if report.when == "call":
        _tests[module] += 1
        _calls[report.nodeid] = report.duration
    for name, value in report.user_properties:
        if name == FIXTURE:
            _fixtures[value[0]] += value[1]


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = time.monotonic()
    yield
    _pending.append((f"{fixturedef.argname} ({fixturedef.scope})", time.monotonic() - start))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "setup" and _pending:
        outcome.get_result().user_properties.extend((FIXTURE, pending) for pending in _pending)
        _pending.clear()


def _fmt(seconds: float) -> str:
    return f"{seconds:8.1f}s" if seconds < 600 else f"{seconds / 60:7.1f}min"


KEPT = 20  # summaries kept in CACHE/test-phases: a CI run's, whose printed tail may be cut, read afterwards


def pytest_terminal_summary(terminalreporter):
    if not _by_module:
        return
    said = []

    def write(line: str) -> None:
        terminalreporter.write_line(line)
        said.append(line)

    try:
        _summary(terminalreporter, write)
    finally:
        _keep(said)


def _keep(said: list[str]) -> None:
    from .cache import CACHE

    folder = CACHE / "test-phases"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / time.strftime("%Y%m%dT%H%M%S.txt")).write_text("\n".join(said) + "\n")
        for old in sorted(folder.glob("*.txt"))[:-KEPT]:
            old.unlink()
    except OSError:  # a read-only or full cache: the summary was printed all the same
        pass


def _summary(terminalreporter, write) -> None:
    wall = time.monotonic() - _started
    totals = {phase: sum(m[phase] for m in _by_module.values()) for phase in PHASES}
    terminalreporter.section("time per phase (tests/infra/phases.py)")
    write(f"wall {_fmt(wall)}   setup {_fmt(totals['setup'])}   tests {_fmt(totals['call'])}   "
          f"teardown {_fmt(totals['teardown'])}" + ("   (summed over workers)" if len(_workers) > 1 else ""))
    if len(_workers) > 1:
        write("busy per worker: " + "   ".join(f"{worker} {_fmt(busy)}" for worker, busy in sorted(_workers.items())))
    write(f"{'module':44} {'tests':>5} {'setup':>9} {'call':>9} {'teardown':>9} {'total':>9}")
    for module, phases in sorted(_by_module.items(), key=lambda item: -sum(item[1].values())):
        write(f"{module:44} {_tests[module]:5d} {_fmt(phases['setup'])} {_fmt(phases['call'])} "
              f"{_fmt(phases['teardown'])} {_fmt(sum(phases.values()))}")
    write("slowest tests:")
    for nodeid, seconds in sorted(_calls.items(), key=lambda item: -item[1])[:25]:
        write(f"  {nodeid[:90]:90} {_fmt(seconds)}")
    slow = [(name, s) for name, s in sorted(_fixtures.items(), key=lambda item: -item[1]) if s >= 1.0][:12]
    if slow:
        write("slowest fixture setups (images, runtimes, clusters are built once per run):")
        for name, seconds in slow:
            write(f"  {name:60} {_fmt(seconds)}")
